"""RNNSearch (Bahdanau et al. 2015) as the ATR paper's appendix A.1 builds it, with any cell.

Encoder (eq. 11): a forward and a backward cell over the source embeddings; h_i = [h→_i; h←_i].
The backward cell starts at each sentence's last real token. Decoder init s_0 = tanh(W [h→_n; h←_1] + b).
With `encoder="ca"` the context-aware encoder (Zhang et al. 2017, ATR Table 2 "+CA") replaces it:
a forward pass f_i = cell(f_{i-1}, x_i), then a backward pass of two cells per step,
u_i = cell_lower(h_{i+1}, x_i), h_i = cell_higher(u_i, f_i); the memory is h alone (size d, not 2d)
and s_0 = tanh(W h_1 + b).
Decoder (eq. 13), a two-level conditional unit:
    s̃_j = cell_lower(s_{j-1}, E y_{j-1})
    c_j = additive attention with query s̃_j over the memory tanh(h); its hidden size is the memory size
    s_j = cell_higher(s̃_j, c_j)
Readout (eq. 12): p(y_j) = softmax(E_out · dropout(tanh(W [tanh(s_j); c_j; E y_{j-1}] + b)) + b_out),
with E_out the target embedding matrix when `tie_output` is set.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from rnmt.cells import build_cell, run
from rnmt.cells.composite import TwoInputCell
from rnmt.data.vocab import PAD_ID
from rnmt.io import InputError
from rnmt.machine.matmul import Linear
from rnmt.models import decoder_sequence
from rnmt.models.attention import AdditiveAttention
from rnmt.models.base import DecoderState, Seq2Seq
from rnmt.models.embedding import FactoredEmbedding
from rnmt.models.readout import Readout
from rnmt.models.registry import register_model


def last_real(outputs: Tensor, mask: Tensor) -> Tensor:
    """outputs [B, S, H] at each sentence's last real position → [B, H]."""
    return outputs[torch.arange(outputs.size(0), device=outputs.device), mask.sum(1) - 1]


@register_model("rnnsearch")
class RNNSearch(Seq2Seq):
    decoder_name = "RNNSearch decoder"          # what the paths a run took call its decoder (rnmt.cells.taken)

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, cell: str = "gru", emb: int = 620,
                 hidden: int = 1000, dropout: float = 0.2, tie_output: bool = True, encoder: str = "birnn",
                 cell_options: dict[str, Any] | None = None, factors: dict[str, Any] | None = None) -> None:
        super().__init__()
        opts = cell_options or {}
        f = factors or {}
        self.src_emb = FactoredEmbedding(src_vocab_size, emb, tuple(f.get("vocab_sizes", ())),
                                          tuple(f.get("dims", ())), f.get("combine", "concat"))
        self.tgt_emb = nn.Embedding(tgt_vocab_size, emb, padding_idx=PAD_ID)
        x = self.src_emb.dim
        if encoder == "birnn":
            self.enc_fwd = build_cell(cell, x, hidden, **opts)
            self.enc_bwd = build_cell(cell, x, hidden, **opts)
            memory = 2 * hidden
        elif encoder == "ca":
            self.enc_fwd = build_cell(cell, x, hidden, **opts)
            self.enc_bwd = TwoInputCell(build_cell(cell, x, hidden, **opts), build_cell(cell, hidden, hidden, **opts))
            memory = hidden
        else:
            raise InputError(f"rnnsearch: unknown encoder {encoder!r}; valid: birnn, ca")
        self.encoder = encoder
        self.dec_lower = build_cell(cell, emb, hidden, **opts)
        self.dec_higher = build_cell(cell, memory, hidden, **opts)
        self.init_proj = Linear(memory, self.dec_lower.state_size)
        self.attention = AdditiveAttention(hidden, memory, memory)
        self.readout = Readout(hidden, memory, emb, tgt_vocab_size, dropout, tie_output)

    def encode(self, src: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """→ (memory [B, S, M] before tanh, decoder init input [B, M])."""
        x = self.src_emb(src)
        fwd, _ = run(self.enc_fwd, x, mask)
        if self.encoder == "ca":
            bwd, _ = run(self.enc_bwd, torch.cat([x, fwd], -1), mask, reverse=True)
            return bwd, bwd[:, 0]
        bwd, _ = run(self.enc_bwd, x, mask, reverse=True)
        return torch.cat([fwd, bwd], -1), torch.cat([last_real(fwd, mask), bwd[:, 0]], -1)

    def start(self, src: Tensor, src_mask: Tensor) -> DecoderState:
        annotations, init = self.encode(src, src_mask)
        memory = torch.tanh(annotations)
        if torch.is_autocast_enabled(memory.device.type):     # cast once here, not by every step's product
            memory = memory.to(torch.get_autocast_dtype(memory.device.type))
        return DecoderState(state=torch.tanh(self.init_proj(init)), memory=memory,
                            keys=self.attention.keys(memory), mask=src_mask)

    def _decode(self, p_lower: Tensor, st: DecoderState) -> tuple[Tensor, Tensor, Tensor]:
        """One decoder step from the lower cell's projected input → (new state, output, context)."""
        s_tilde = self.dec_lower.fast_step(p_lower, st["state"])
        context, _ = self.attention(self.dec_lower.output(s_tilde), st["keys"], st["memory"], st["mask"])
        s = self.dec_higher.fast_step(self.dec_higher.project_inputs(context), s_tilde)
        return s, self.dec_higher.output(s), context

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        st = self.start(src, src_mask)
        emb = self.tgt_emb(tgt_in)
        p_lower = self.dec_lower.project_inputs(emb)      # all target steps in one product
        fused = decoder_sequence.chosen(self, p_lower, st["memory"]) == "sequence"
        outs, contexts = decoder_sequence.decode(self, p_lower, st) if fused else self.decoder_loop(p_lower, st)
        if torch.is_grad_enabled() and not fused:
            decoder_sequence.record(self, "step loop")
        return self.readout(outs, contexts, emb, self.tgt_emb)

    def decoder_loop(self, p_lower: Tensor, st: DecoderState) -> tuple[Tensor, Tensor]:
        """The decoder step by step over the lower cell's projected inputs [B, T, P] → (outputs [B, T, H],
        contexts [B, T, M]); models/decoder_sequence.py is the same as one function."""
        outs, contexts = [], []
        for p_t in p_lower.unbind(1):                     # one gradient copy, not one per step
            st["state"], out, context = self._decode(p_t, st)
            outs.append(out)
            contexts.append(context)
        return torch.stack(outs, 1), torch.stack(contexts, 1)

    def step(self, prev: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
        emb = self.tgt_emb(prev)
        s, out, context = self._decode(self.dec_lower.project_inputs(emb), state)
        logp = torch.log_softmax(self.readout(out, context, emb, self.tgt_emb).float(), -1)
        return logp, DecoderState(state, state=s)


@register_model("rnnsearch-ca")
class RNNSearchCA(RNNSearch):
    """RNNSearch with the context-aware encoder (ATR paper, "RNNSearch + ATR + CA")."""

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, **settings: Any) -> None:
        super().__init__(src_vocab_size, tgt_vocab_size, **{**settings, "encoder": "ca"})
