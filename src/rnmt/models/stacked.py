"""The OpenNMT-py-style stacked baseline of SR-NMT Table 2 (LSTM 2L/3L/5L, SRU 3L), with any cell.

Encoder: N bidirectional layers, hidden/2 per direction; layer n+1 reads [h→; h←] of layer n; the
backward cell starts at each sentence's last real token.
Decoder (Luong et al. 2015, with input feeding and MLP attention as the SR-NMT paper's section 5.1):
    s_t^1 = cell_1(s_{t−1}^1, [E y_{t−1}; h̃_{t−1}])       (input feeding; [E y_{t−1}] without it)
    s_t^n = cell_n(s_{t−1}^n, out(s_t^{n−1}))
    c_t = Bahdanau (MLP) attention with query out(s_t^N) over the top encoder layer
    h̃_t = tanh(W_out [c_t; out(s_t^N)] + b),   p(y_t) = softmax(W_o dropout(h̃_t) + b_o)
Each decoder layer starts from the final states of the encoder layer below it, the two directions
merged blockwise (OpenNMT-py's bridge: [h→; h←] for h, and so on for every hidden-sized block of
the state, e.g. the LSTM's c). Dropout is applied to every layer's input ("vertical connections",
section 4) and before the generator.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from rnmt.cells import build_cell, run
from rnmt.data.vocab import PAD_ID
from rnmt.io import InputError
from rnmt.machine.matmul import Linear
from rnmt.models.attention import AdditiveAttention
from rnmt.models.base import DecoderState, Seq2Seq
from rnmt.models.embedding import FactoredEmbedding
from rnmt.models.registry import register_model


def merge_directions(fwd: Tensor, bwd: Tensor, block: int) -> Tensor:
    """Interleave the hidden-sized blocks of two final states: [a→; b→], [a←; b←] → [a→; a←; b→; b←]."""
    return torch.cat([t for pair in zip(fwd.split(block, -1), bwd.split(block, -1), strict=True)
                      for t in pair], -1)


@register_model("stacked")
class Stacked(Seq2Seq):
    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, cell: str = "lstm", layers: int = 2,
                 emb: int = 500, hidden: int = 500, dropout: float = 0.1, input_feeding: bool = True,
                 cell_options: dict[str, Any] | None = None, factors: dict[str, Any] | None = None) -> None:
        super().__init__()
        if layers < 1:
            raise InputError(f"stacked: layers must be at least 1, got {layers}")
        if hidden % 2:
            raise InputError(f"stacked: hidden ({hidden}) must be even (hidden/2 per encoder direction)")
        opts, f = cell_options or {}, factors or {}
        self.src_emb = FactoredEmbedding(src_vocab_size, emb, tuple(f.get("vocab_sizes", ())),
                                          tuple(f.get("dims", ())), f.get("combine", "concat"))
        self.tgt_emb = nn.Embedding(tgt_vocab_size, emb, padding_idx=PAD_ID)
        half = hidden // 2
        self.enc_fwd = nn.ModuleList(build_cell(cell, self.src_emb.dim if i == 0 else hidden, half, **opts)
                                     for i in range(layers))
        self.enc_bwd = nn.ModuleList(build_cell(cell, self.src_emb.dim if i == 0 else hidden, half, **opts)
                                     for i in range(layers))
        first = emb + (hidden if input_feeding else 0)
        self.dec = nn.ModuleList(build_cell(cell, first if i == 0 else hidden, hidden, **opts)
                                 for i in range(layers))
        enc_state, dec_state = self.enc_fwd[-1].state_size, self.dec[0].state_size
        if enc_state % half or dec_state != 2 * enc_state:
            raise InputError(f"stacked: cell {cell!r} has states of {enc_state} (hidden {half}) and {dec_state} "
                             f"(hidden {hidden}); the encoder-to-decoder bridge needs states made of "
                             "hidden-sized blocks")
        self.input_feeding, self.hidden, self.half = input_feeding, hidden, half
        self.attention = AdditiveAttention(hidden, hidden, hidden)
        self.attn_out = Linear(2 * hidden, hidden)
        self.dropout = nn.Dropout(dropout)
        self.generator = Linear(hidden, tgt_vocab_size)

    def start(self, src: Tensor, src_mask: Tensor) -> DecoderState:
        x, finals = self.src_emb(src), []
        for fwd_cell, bwd_cell in zip(self.enc_fwd, self.enc_bwd, strict=True):
            x = self.dropout(x)
            fwd, f_state = run(fwd_cell, x, src_mask)
            bwd, b_state = run(bwd_cell, x, src_mask, reverse=True)
            x = torch.cat([fwd, bwd], -1)
            finals.append(merge_directions(f_state, b_state, self.half))
        return DecoderState(state=torch.stack(finals, 1), memory=x, keys=self.attention.keys(x), mask=src_mask,
                            feed=x.new_zeros(x.size(0), self.hidden))

    def _step(self, emb: Tensor, st: DecoderState) -> tuple[Tensor, Tensor]:
        """One target position: emb [B, E] → (h̃ [B, d], new states [B, L, state])."""
        x = torch.cat([emb, st["feed"]], -1) if self.input_feeding else emb
        states = []
        for i, cell in enumerate(self.dec):
            s = cell.fast_step(cell.project_inputs(self.dropout(x)), st["state"][:, i])
            states.append(s)
            x = cell.output(s)
        context, _ = self.attention(x, st["keys"], st["memory"], st["mask"])
        return torch.tanh(self.attn_out(torch.cat([context, x], -1))), torch.stack(states, 1)

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        st, emb, outs = self.start(src, src_mask), self.tgt_emb(tgt_in), []
        for e_t in emb.unbind(1):                         # one gradient copy, not one per step
            st["feed"], st["state"] = self._step(e_t, st)
            outs.append(st["feed"])
        return self.generator(self.dropout(torch.stack(outs, 1)))

    def step(self, prev: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
        feed, s = self._step(self.tgt_emb(prev), state)
        logp = torch.log_softmax(self.generator(self.dropout(feed)).float(), -1)
        return logp, DecoderState(state, state=s, feed=feed)
