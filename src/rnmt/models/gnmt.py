"""GNMT-style deep stacks (Wu et al. 2016) with any cell; the ATR paper's "GNMT + ATR" (Table 2) and
"DeepRNNSearch" (Table 4: a deep GRU RNNSearch with 5 layers, emb 620, hidden 1000).

Encoder: layer 1 is bidirectional (h = [h→; h←], 2d), layer 2 reads it (2d → d), layers 3..L are
unidirectional with residual connections (x_{l+1} = x_l + cell_l(x_l)).
Decoder: layer 1 reads E y_{j-1}; its output is the query of an additive attention over the top
encoder layer (hidden size = memory size); layers 2..L read [their input; c_j] and add residuals
from layer 3 on. Readout as in RNNSearch: tanh(W [tanh(s_top); c_j; E y_{j-1}] + b), tied to the
target embeddings. Decoder layers start from `init`: "zeros" (GNMT) or "bridge", a tanh projection
of the top encoder layer's last state per decoder layer.
Dropout is applied between layers and on the readout (`dropout`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from rnmt.cells import build_cell, run
from rnmt.data.vocab import PAD_ID
from rnmt.io import InputError
from rnmt.machine.matmul import Linear
from rnmt.models import decoder_sequence, rnnsearch
from rnmt.models.attention import AdditiveAttention
from rnmt.models.base import DecoderState, Seq2Seq
from rnmt.models.embedding import FactoredEmbedding
from rnmt.models.readout import Readout
from rnmt.models.registry import register_model


@register_model("gnmt")
class GNMT(Seq2Seq):
    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, cell: str = "gru", emb: int = 512,
                 hidden: int = 512, layers: int = 8, dropout: float = 0.2, init: str = "zeros",
                 tie_output: bool = True, cell_options: dict[str, Any] | None = None,
                 factors: dict[str, Any] | None = None) -> None:
        super().__init__()
        if layers < 2:
            raise InputError(f"gnmt needs at least 2 layers (a bidirectional one and one above it), got {layers}")
        if init not in ("zeros", "bridge"):
            raise InputError(f"gnmt: init must be 'zeros' or 'bridge', not {init!r}")
        opts, f = cell_options or {}, factors or {}
        self.layers, self.init, self.hidden = layers, init, hidden
        self.src_emb = FactoredEmbedding(src_vocab_size, emb, tuple(f.get("vocab_sizes", ())),
                                          tuple(f.get("dims", ())), f.get("combine", "concat"))
        self.tgt_emb = nn.Embedding(tgt_vocab_size, emb, padding_idx=PAD_ID)
        x = self.src_emb.dim
        self.enc_fwd = build_cell(cell, x, hidden, **opts)
        self.enc_bwd = build_cell(cell, x, hidden, **opts)
        self.enc = nn.ModuleList([build_cell(cell, 2 * hidden, hidden, **opts)]
                                 + [build_cell(cell, hidden, hidden, **opts) for _ in range(layers - 2)])
        self.dec = nn.ModuleList([build_cell(cell, emb, hidden, **opts)]
                                 + [build_cell(cell, 2 * hidden, hidden, **opts) for _ in range(layers - 1)])
        self.state_size = self.dec[0].state_size
        if init == "bridge":
            self.bridge = Linear(hidden, layers * self.state_size)
        self.attention = AdditiveAttention(hidden, hidden, hidden)
        self.readout = Readout(hidden, hidden, emb, tgt_vocab_size, dropout, tie_output)
        self.drop = nn.Dropout(dropout)

    def start(self, src: Tensor, src_mask: Tensor) -> DecoderState:
        x = self.src_emb(src)
        fwd, _ = run(self.enc_fwd, x, src_mask)
        bwd, _ = run(self.enc_bwd, x, src_mask, reverse=True)
        h = self.drop(torch.cat([fwd, bwd], -1))
        for i, cell in enumerate(self.enc):
            out, _ = run(cell, h, src_mask)
            h = self.drop(out + h if i >= 1 else out)        # residuals from encoder layer 3 on
        B = src.size(0)
        if self.init == "bridge":
            states = torch.tanh(self.bridge(rnnsearch.last_real(h, src_mask))).view(B, self.layers, self.state_size)
        else:
            states = h.new_zeros(B, self.layers, self.state_size)
        return DecoderState(states=states, memory=h, keys=self.attention.keys(h), mask=src_mask)

    def _first(self, p_t: Tensor, s: Tensor, st: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        """Decoder layer 1's step and the attention its output queries → (state, output, context)."""
        s = self.dec_lower.fast_step(p_t, s)
        out = self.dec_lower.output(s)
        return s, out, self.attention(out, st["keys"], st["memory"], st["mask"])[0]

    def _decode(self, p0: Tensor, st: DecoderState) -> tuple[Tensor, Tensor, Tensor]:
        states = list(st["states"].unbind(1))
        states[0], out, context = self._first(p0, states[0], st)
        for i in range(1, self.layers):
            inp = self.drop(out)
            cell = self.dec[i]
            states[i] = cell.fast_step(cell.project_inputs(torch.cat([inp, context], -1)), states[i])
            new = cell.output(states[i])
            out = new + inp if i >= 2 else new
        return torch.stack(states, 1), out, context

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher-forced scores, layer by layer: only decoder layer 1 and the attention it queries need a step
        loop (nothing above feeds back into them), so layers 2..L each run over the whole target sequence
        at once, as `step` runs them one position at a time (the same numbers; their input projections one
        product a layer, their recurrences the cell's fastest measured whole-sequence path), and layer 1 with
        its attention runs as RNNSearch's fused decoder where that measured faster (models/decoder_sequence.py).
        On a GPU that is a few kernels a target step instead of every layer's."""
        st = self.start(src, src_mask)
        emb = self.tgt_emb(tgt_in)
        p0 = self.dec_lower.project_inputs(self.drop(emb))
        first = {"state": st["states"][:, 0], "memory": st["memory"], "keys": st["keys"], "mask": st["mask"]}
        fused = decoder_sequence.chosen(self, p0, st["memory"]) == "sequence"
        out, context = decoder_sequence.decode(self, p0, first) if fused else self.decoder_loop(p0, first)
        if torch.is_grad_enabled() and not fused:
            decoder_sequence.record(self, "step loop")
        for i in range(1, self.layers):                   # unmasked: the step loop's numbers at padding too
            inp = self.drop(out)
            new, _ = run(self.dec[i], torch.cat([inp, context], -1), None, st["states"][:, i])
            out = new + inp if i >= 2 else new
        return self.readout(out, context, emb, self.tgt_emb)

    @property
    def dec_lower(self) -> nn.Module:
        """Decoder layer 1, whose output queries the attention (the lower cell of models/decoder_sequence.py)."""
        return self.dec[0]

    dec_higher = None                                     # no cell between the attention and the layers above
    decoder_name = "GNMT decoder's first layer"

    def decoder_loop(self, p0: Tensor, st: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Decoder layer 1 and its attention step by step over its projected inputs [B, T, P], from st["state"]
        → (outputs [B, T, H], contexts [B, T, M]); models/decoder_sequence.py is the same as one function."""
        s, outs, contexts = st["state"], [], []
        for p_t in p0.unbind(1):                          # one gradient copy, not one per step
            s, out, context = self._first(p_t, s, st)
            outs.append(out)
            contexts.append(context)
        return torch.stack(outs, 1), torch.stack(contexts, 1)

    def step(self, prev: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
        emb = self.tgt_emb(prev)
        states, out, context = self._decode(self.dec[0].project_inputs(emb), state)
        logp = torch.log_softmax(self.readout(out, context, emb, self.tgt_emb).float(), -1)
        return logp, DecoderState(state, states=states)


@register_model("deep-rnnsearch")
class DeepRNNSearch(GNMT):
    """The ATR paper's DeepRNNSearch: GNMT-style stacks of 5 layers (section 5.2)."""

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, **settings: Any) -> None:
        super().__init__(src_vocab_size, tgt_vocab_size, **{"layers": 5, "emb": 620, "hidden": 1000, **settings})
