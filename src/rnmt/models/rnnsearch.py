"""RNNSearch (Bahdanau et al. 2015) as the ATR paper's appendix A.1 builds it, with any cell.

Encoder (eq. 11): a forward and a backward cell over the source embeddings; h_i = [h→_i; h←_i].
The backward cell starts at each sentence's last real token.
Decoder init: s_0 = tanh(W [h→_n; h←_1] + b).
Decoder (eq. 13), a two-level conditional unit:
    s̃_j = cell_lower(s_{j-1}, E y_{j-1})
    c_j = additive attention with query s̃_j over the memory tanh(h)
    s_j = cell_higher(s̃_j, c_j)
Readout (eq. 12): p(y_j) = softmax(E_out · dropout(tanh(W [tanh(s_j); c_j; E y_{j-1}] + b)) + b_out),
where E_out is the target embedding matrix when `tie_output` is set.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rnmt.cells import build_cell, run
from rnmt.data.vocab import PAD_ID
from rnmt.models.attention import AdditiveAttention
from rnmt.models.base import DecoderState, Seq2Seq
from rnmt.models.registry import register_model


@register_model("rnnsearch")
class RNNSearch(Seq2Seq):
    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, cell: str = "gru", emb: int = 620,
                 hidden: int = 1000, dropout: float = 0.2, tie_output: bool = True) -> None:
        super().__init__()
        self.src_emb = nn.Embedding(src_vocab_size, emb, padding_idx=PAD_ID)
        self.tgt_emb = nn.Embedding(tgt_vocab_size, emb, padding_idx=PAD_ID)
        self.enc_fwd = build_cell(cell, emb, hidden)
        self.enc_bwd = build_cell(cell, emb, hidden)
        self.dec_lower = build_cell(cell, emb, hidden)
        self.dec_higher = build_cell(cell, 2 * hidden, hidden)
        self.init_proj = nn.Linear(2 * hidden, self.dec_lower.state_size)
        self.attention = AdditiveAttention(hidden, 2 * hidden, hidden)
        self.readout = nn.Linear(hidden + 2 * hidden + emb, emb)
        self.dropout = nn.Dropout(dropout)
        self.out_bias = nn.Parameter(torch.zeros(tgt_vocab_size))
        self.out_proj = None if tie_output else nn.Linear(emb, tgt_vocab_size, bias=False)

    def start(self, src: Tensor, src_mask: Tensor) -> DecoderState:
        x = self.src_emb(src)
        fwd, _ = run(self.enc_fwd, x, src_mask)
        bwd, _ = run(self.enc_bwd, x, src_mask, reverse=True)
        lengths = src_mask.sum(1)
        last_fwd = fwd[torch.arange(src.size(0), device=src.device), lengths - 1]
        state = torch.tanh(self.init_proj(torch.cat([last_fwd, bwd[:, 0]], -1)))
        memory = torch.tanh(torch.cat([fwd, bwd], -1))
        return DecoderState(state, memory, self.attention.keys(memory), src_mask)

    def _decode(self, p_lower: Tensor, st: DecoderState) -> tuple[Tensor, Tensor, Tensor]:
        """One decoder step from the lower cell's projected input → (new state, output, context)."""
        s_tilde = self.dec_lower.step(p_lower, st.state)
        context, _ = self.attention(self.dec_lower.output(s_tilde), st.keys, st.memory, st.mask)
        s = self.dec_higher.step(self.dec_higher.project_inputs(context), s_tilde)
        return s, self.dec_higher.output(s), context

    def _logits(self, out: Tensor, context: Tensor, prev_emb: Tensor) -> Tensor:
        r = self.dropout(torch.tanh(self.readout(torch.cat([torch.tanh(out), context, prev_emb], -1))))
        weight = self.tgt_emb.weight if self.out_proj is None else self.out_proj.weight
        return F.linear(r, weight, self.out_bias)

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        st = self.start(src, src_mask)
        emb = self.tgt_emb(tgt_in)
        p_lower = self.dec_lower.project_inputs(emb)      # all target steps in one product
        outs, contexts = [], []
        for t in range(tgt_in.size(1)):
            s, out, context = self._decode(p_lower[:, t], st)
            st.state = s
            outs.append(out)
            contexts.append(context)
        return self._logits(torch.stack(outs, 1), torch.stack(contexts, 1), emb)

    def step(self, prev: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
        emb = self.tgt_emb(prev)
        s, out, context = self._decode(self.dec_lower.project_inputs(emb), state)
        logp = torch.log_softmax(self._logits(out, context, emb).float(), -1)
        return logp, DecoderState(s, state.memory, state.keys, state.mask)
