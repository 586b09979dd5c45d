"""DTMT#N and ShallowRNMT (Meng & Zhang 2019): deep transition RNMT.

Every transition module is a bottom cell (L-GRU by default; GRU or LAU for DTMT Table 3) followed
by N T-GRUs inside one timestep (cells/composite.py TransitionCell):
    encoder:  h→_j = T(x_j, h→_{j-1}), h←_j likewise backwards; C = [h→; h←] (2d)
    query:    s_{t,Lq} = T_q(y_{t-1}, s_{t-1})
    context:  c_t = multi-head additive attention(s_{t,Lq}, C)     (16 heads)
    decoder:  s_t = T_d(c_t, s_{t,Lq})
    output:   p(y_t) = softmax(W_o dropout(tanh(W [y_{t-1}; s_t; c_t] + b)) + b_o)      (eq. 1)
Decoder init (reference code): s_0 = tanh(W mean_j(C_j) + b). Embeddings have a bias vector and
sinusoidal positions scaled by 1/√d ("Advanced Techniques"); dropout on embeddings, before the
prediction and on candidate activations. N = 0 is ShallowRNMT.

`modules` sets one module's own bottom cell and depth, e.g. {"query": {"cell": "gru", "depth": 0}}:
Table 4's ablation replaces one transition module with "the corresponding part of the conventional
shallow RNMT" (a GRU, no T-GRUs). `gate_norm=False` drops the per-gate layer normalisation of every
cell, T-GRUs included (Table 5's "− Advanced Techniques").

Training runs the decoder's teacher-forced loop as one function with a hand-written backward where measured
faster (models/decoder_sequence.py, the fast path RNNSearch's decoder has), else step by step (`decoder_loop`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from rnmt.cells import build_cell, run
from rnmt.cells.composite import TransitionCell
from rnmt.data.vocab import PAD_ID
from rnmt.io import InputError
from rnmt.machine.matmul import Linear
from rnmt.models import decoder_sequence
from rnmt.models.attention import MultiHeadAdditiveAttention
from rnmt.models.base import DecoderState, Seq2Seq
from rnmt.models.embedding import FactoredEmbedding
from rnmt.models.registry import register_model


def positional_encoding(positions: Tensor, dim: int) -> Tensor:
    """Sinusoids (Vaswani et al. 2017) at integer `positions` [...], scaled by 1/√dim (DTMT) → [..., dim]."""
    half = dim // 2
    freq = torch.exp(-math.log(10000.0) * torch.arange(half, device=positions.device) / max(half - 1, 1))
    angles = positions.unsqueeze(-1).float() * freq
    pe = torch.cat([torch.sin(angles), torch.cos(angles)], -1)
    if dim % 2:
        pe = nn.functional.pad(pe, (0, 1))
    return pe / math.sqrt(dim)


@register_model("dtmt")
class DTMT(Seq2Seq):
    decoder_name = "DTMT decoder"               # what the paths a run took call its decoder (rnmt.cells.taken)

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, cell: str = "lgru", emb: int = 1024,
                 hidden: int = 1024, depth: int = 1, heads: int = 16, dropout: float = 0.3,
                 rnn_dropout: float = 0.1, positional: bool = True, cell_options: dict[str, Any] | None = None,
                 factors: dict[str, Any] | None = None, gate_norm: bool = True,
                 modules: dict[str, dict[str, Any]] | None = None) -> None:
        super().__init__()
        f = factors or {}
        own = modules or {}
        unknown = sorted(set(own) - {"encoder", "query", "decoder"}) + sorted(
            f"{m}.{k}" for m, o in own.items() for k in o if k not in ("cell", "depth"))
        if unknown:
            raise InputError(f"dtmt: unknown modules entries {', '.join(unknown)}; modules takes encoder, query and "
                             "decoder, each with cell and depth (e.g. {query: {cell: gru, depth: 0}})")

        def module(name: str, input_size: int) -> TransitionCell:
            kind, n = own.get(name, {}).get("cell", cell), own.get(name, {}).get("depth", depth)
            opts = {"candidate_dropout": rnn_dropout, **({"gate_norm": gate_norm} if kind in ("gru", "lgru", "lau")
                                                         else {}), **(cell_options or {})}
            return TransitionCell(build_cell(kind, input_size, hidden, **opts),
                                  [build_cell("tgru", 0, hidden, candidate_dropout=rnn_dropout, gate_norm=gate_norm)
                                   for _ in range(n)])

        self.src_emb = FactoredEmbedding(src_vocab_size, emb, tuple(f.get("vocab_sizes", ())),
                                          tuple(f.get("dims", ())), f.get("combine", "concat"))
        self.tgt_emb = nn.Embedding(tgt_vocab_size, emb, padding_idx=PAD_ID)
        self.src_bias = nn.Parameter(torch.zeros(self.src_emb.dim))
        self.tgt_bias = nn.Parameter(torch.zeros(emb))
        self.positional = positional
        self.enc_fwd, self.enc_bwd = module("encoder", self.src_emb.dim), module("encoder", self.src_emb.dim)
        self.init_proj = Linear(2 * hidden, hidden)
        self.query = module("query", emb)
        self.attention = MultiHeadAdditiveAttention(hidden, 2 * hidden, hidden, heads)
        self.decoder = module("decoder", 2 * hidden)
        self.readout = Linear(emb + hidden + 2 * hidden, hidden)
        self.output = Linear(hidden, tgt_vocab_size)
        self.drop = nn.Dropout(dropout)

    def _embed_src(self, src: Tensor) -> Tensor:
        x = self.src_emb(src) + self.src_bias
        if self.positional:
            x = x + positional_encoding(torch.arange(x.size(1), device=x.device), x.size(-1)).to(x.dtype)
        return self.drop(x)

    def _embed_tgt(self, ids: Tensor, positions: Tensor) -> Tensor:
        """ids [B, T] at positions [B, T] → embeddings [B, T, emb]."""
        y = self.tgt_emb(ids) + self.tgt_bias
        if self.positional:
            y = y + positional_encoding(positions, y.size(-1)).to(y.dtype)
        return self.drop(y)

    def start(self, src: Tensor, src_mask: Tensor) -> DecoderState:
        x = self._embed_src(src)
        fwd, _ = run(self.enc_fwd, x, src_mask)
        bwd, _ = run(self.enc_bwd, x, src_mask, reverse=True)
        memory = torch.cat([fwd, bwd], -1)
        m = src_mask.unsqueeze(-1).to(memory.dtype)
        init = torch.tanh(self.init_proj((memory * m).sum(1) / m.sum(1)))
        return DecoderState(state=init, memory=memory, keys=self.attention.keys(memory), mask=src_mask,
                            position=torch.zeros(src.size(0), dtype=torch.long, device=src.device))

    def _decode(self, p_query: Tensor, st: DecoderState) -> tuple[Tensor, Tensor]:
        s = self.query.fast_step(p_query, st["state"])
        context, _ = self.attention(s, st["keys"], st["memory"], st["mask"])
        return self.decoder.fast_step(self.decoder.project_inputs(context), s), context

    def _logits(self, s: Tensor, context: Tensor, prev: Tensor) -> Tensor:
        return self.output(self.drop(torch.tanh(self.readout(torch.cat([prev, s, context], -1)))))

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        st = self.start(src, src_mask)
        y = self._embed_tgt(tgt_in, torch.arange(tgt_in.size(1), device=tgt_in.device).expand_as(tgt_in))
        pq = self.query.project_inputs(y)                 # all target steps in one product
        fused = decoder_sequence.chosen(self, pq, st["memory"]) == "sequence"
        states, contexts = decoder_sequence.decode(self, pq, st) if fused else self.decoder_loop(pq, st)
        if torch.is_grad_enabled() and not fused:
            decoder_sequence.record(self, "step loop")
        return self._logits(states, contexts, y)

    def decoder_loop(self, pq: Tensor, st: DecoderState) -> tuple[Tensor, Tensor]:
        """The decoder step by step over the query block's projected inputs [B, T, P] → (states [B, T, H],
        contexts [B, T, 2H]); models/decoder_sequence.py is the same as one function."""
        states, contexts = [], []
        for p_t in pq.unbind(1):                          # one gradient copy, not one per step
            st["state"], context = self._decode(p_t, st)
            states.append(st["state"])
            contexts.append(context)
        return torch.stack(states, 1), torch.stack(contexts, 1)

    @property
    def dec_lower(self) -> TransitionCell:
        """The query transition block (the lower cell of models/decoder_sequence.py)."""
        return self.query

    @property
    def dec_higher(self) -> TransitionCell:
        """The decoder transition block, reading the attention's context (the higher cell there)."""
        return self.decoder

    def step(self, prev: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
        y = self._embed_tgt(prev.unsqueeze(1), state["position"].unsqueeze(1)).squeeze(1)
        s, context = self._decode(self.query.project_inputs(y), state)
        logp = torch.log_softmax(self._logits(s, context, y).float(), -1)
        return logp, DecoderState(state, state=s, position=state["position"] + 1)


@register_model("shallow-rnmt")
class ShallowRNMT(DTMT):
    """DTMT's ShallowRNMT baseline: the same system without T-GRUs (transition depth 0), GRU cells."""

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, **settings: Any) -> None:
        super().__init__(src_vocab_size, tgt_vocab_size, **{"cell": "gru", **settings, "depth": 0})
