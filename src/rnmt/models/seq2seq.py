"""Sequence to sequence learning (Sutskever et al. 2014) as the UD paper uses it, with any cell.

Encoder: N stacked cells (the UD paper: 2) read the source reversed, each sentence within its own
length (padding stays at the end, so the last word comes first and the first word is read last,
next to the decoder); layer l reads the outputs of layer l − 1. No attention: the encoder's final
state of layer l is the decoder's initial state of layer l. Decoder: N stacked cells over the target
embeddings, and a non-recurrent softmax output layer on the top layer's output (UD paper section 2):

    s^l_0 = h^l_S (final encoder state),   s^l_j = cell^l(s^l_{j-1}, out^{l-1}_j),   out^0_j = E y_{j-1}
    p(y_j) = softmax(W_o · dropout(out^N_j) + b_o)

Source input is words only or factored (UD paper: 150-d words + 50-d dependency labels, concatenated,
vs 200-d words). `dropout` acts on the non-recurrent connections only (embeddings, between layers,
before the softmax; Zaremba et al. 2014); neither paper uses it, so it defaults to 0.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rnmt.cells import RecurrentCell, build_cell, run
from rnmt.data.vocab import PAD_ID
from rnmt.io import InputError
from rnmt.machine.matmul import Linear
from rnmt.models.base import DecoderState, Seq2Seq
from rnmt.models.embedding import FactoredEmbedding
from rnmt.models.registry import register_model


def cell_stack(cell: str, input_size: int, hidden: int, layers: int, options: dict[str, Any]) -> nn.ModuleList:
    return nn.ModuleList(build_cell(cell, input_size if i == 0 else hidden, hidden, **options)
                         for i in range(layers))


@register_model("seq2seq")
class Sutskever(Seq2Seq):
    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, cell: str = "ud-gru", emb: int = 200,
                 hidden: int = 200, layers: int = 2, tgt_emb: int | None = None, dropout: float = 0.0,
                 cell_options: dict[str, Any] | None = None, factors: dict[str, Any] | None = None) -> None:
        super().__init__()
        if layers < 1:
            raise InputError(f"seq2seq: layers must be at least 1, got {layers}")
        opts = cell_options or {}
        f = factors or {}
        self.src_emb = FactoredEmbedding(src_vocab_size, emb, tuple(f.get("vocab_sizes", ())),
                                          tuple(f.get("dims", ())), f.get("combine", "concat"))
        tgt_dim = tgt_emb or self.src_emb.dim       # UD paper: 200-d on both sides
        self.tgt_emb = nn.Embedding(tgt_vocab_size, tgt_dim, padding_idx=PAD_ID)
        self.encoder = cell_stack(cell, self.src_emb.dim, hidden, layers, opts)
        self.decoder = cell_stack(cell, tgt_dim, hidden, layers, opts)
        self.dropout = nn.Dropout(dropout)
        self.out = Linear(hidden, tgt_vocab_size)

    def start(self, src: Tensor, src_mask: Tensor) -> DecoderState:
        x = self.src_emb(src)
        finals = {}
        for i, cell in enumerate(self.encoder):
            out, finals[f"layer{i}"] = run(cell, self.dropout(x), src_mask, reverse=True)
            x = out
        return DecoderState(finals)

    def _layers(self, x: Tensor, state: DecoderState, apply: Any) -> tuple[Tensor, DecoderState]:
        """Run the decoder stack with `apply(cell, input, initial state) → (output, final state)`."""
        new = DecoderState()
        for i, cell in enumerate(self.decoder):
            x, new[f"layer{i}"] = apply(cell, self.dropout(x), state[f"layer{i}"])
        return self.dropout(x), new

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        mask = torch.ones_like(tgt_in, dtype=torch.bool)   # positions after </s> are never scored

        def over_sequence(cell: RecurrentCell, x: Tensor, s: Tensor) -> tuple[Tensor, Tensor]:
            return run(cell, x, mask, state=s)

        top, _ = self._layers(self.tgt_emb(tgt_in), self.start(src, src_mask), over_sequence)
        return self.out(top)

    def step(self, prev: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
        def one_step(cell: RecurrentCell, x: Tensor, s: Tensor) -> tuple[Tensor, Tensor]:
            s = cell.fast_step(cell.project_inputs(x), s)
            return cell.output(s), s

        top, new = self._layers(self.tgt_emb(prev), state, one_step)
        return F.log_softmax(self.out(top).float(), -1), new
