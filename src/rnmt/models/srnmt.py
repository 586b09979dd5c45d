"""SR-NMT (Di Gangi & Federico 2018, section 3, Figure 2): N bidirectional weakly-recurrent encoder
units, then N decoder units, each with its own attention over the last encoder layer H; a softmax
generator p(y_i) = softmax(W_o dropout(s_i^N) + b_o), untied as in OpenNMT-py.

The decoder's recurrent state starts at zero. Dropout (0.1 in the paper) is applied before every
multiplication by a parameter matrix (section 4). Initialisation as the authors' code (the trainer's
`xavier` scheme): Xavier-normal matrices, vectors uniform in ±0.1, layer norms at gain 1 and bias 0. Table 4 ablations:
`layer_norm`, `highway` and `multi_attention` (off: attention in the last decoder layer only).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from rnmt.cells.srnmt import DecoderUnit, EncoderUnit, check_highway
from rnmt.data.vocab import PAD_ID
from rnmt.io import InputError
from rnmt.machine.matmul import Linear
from rnmt.models.base import DecoderState, Seq2Seq
from rnmt.models.embedding import FactoredEmbedding
from rnmt.models.init import initialise
from rnmt.models.registry import register_model


@register_model("srnmt")
class SRNMT(Seq2Seq):
    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, layers: int = 4, emb: int = 500,
                 hidden: int = 500, dropout: float = 0.1, layer_norm: bool = True, highway: bool = True,
                 multi_attention: bool = True, factors: dict[str, Any] | None = None) -> None:
        super().__init__()
        if layers < 1:
            raise InputError(f"srnmt: layers must be at least 1, got {layers}")
        f = factors or {}
        self.src_emb = FactoredEmbedding(src_vocab_size, emb, tuple(f.get("vocab_sizes", ())),
                                          tuple(f.get("dims", ())), f.get("combine", "concat"))
        self.tgt_emb = nn.Embedding(tgt_vocab_size, emb, padding_idx=PAD_ID)
        if highway:
            check_highway("source embedding (emb plus concatenated factor sizes)", self.src_emb.dim, hidden)
            check_highway("target embedding (emb)", emb, hidden)
        self.encoder = nn.ModuleList(
            EncoderUnit(self.src_emb.dim if i == 0 else hidden, hidden, layer_norm, highway, dropout)
            for i in range(layers))
        self.decoder = nn.ModuleList(
            DecoderUnit(emb if i == 0 else hidden, hidden, layer_norm, highway,
                        multi_attention or i == layers - 1, dropout)
            for i in range(layers))
        self.dropout = nn.Dropout(dropout)
        self.generator = Linear(hidden, tgt_vocab_size)
        self.hidden = hidden
        initialise(self, "xavier")
        with torch.no_grad():
            self.src_emb.weight[PAD_ID].zero_()
            self.tgt_emb.weight[PAD_ID].zero_()

    def start(self, src: Tensor, src_mask: Tensor) -> DecoderState:
        h = self.src_emb(src)
        for unit in self.encoder:
            h = unit(h, src_mask)
        st = DecoderState(memory=h, mask=src_mask,
                          state=h.new_zeros(h.size(0), len(self.decoder), self.hidden))
        for i, unit in enumerate(self.decoder):
            if unit.attention is not None:
                st[f"keys{i}"] = unit.attention.keys(h)
        return st

    def _decode(self, y: Tensor, st: DecoderState) -> tuple[Tensor, Tensor]:
        """Target embeddings [B, T, emb] through every decoder unit → (top outputs, new states [B, L, d])."""
        states = []
        for i, unit in enumerate(self.decoder):
            y, s = unit(y, st["state"][:, i], st.get(f"keys{i}"), st["memory"], st["mask"])
            states.append(s)
        return y, torch.stack(states, 1)

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        out, _ = self._decode(self.tgt_emb(tgt_in), self.start(src, src_mask))
        return self.generator(self.dropout(out))

    def step(self, prev: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
        out, s = self._decode(self.tgt_emb(prev).unsqueeze(1), state)
        logp = torch.log_softmax(self.generator(self.dropout(out[:, 0])).float(), -1)
        return logp, DecoderState(state, state=s)
