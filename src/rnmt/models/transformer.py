"""Transformer (Vaswani et al. 2017), the papers' non-recurrent reference (ATR paper, Table 4).

Post-norm layers as in the original (section 3.1), each sub-layer y = LayerNorm(x + Dropout(F(x))):
    encoder layer: F = multi-head self-attention, then F = FFN
    decoder layer: F = masked self-attention, then attention over the encoder output, then FFN
    MultiHead(Q, K, V) = Concat_h(softmax(Q W^Q_h (K W^K_h)ᵀ / √d_k) V W^V_h) W^O     (eqs. 1, section 3.2.2)
    FFN(x) = max(0, x W_1 + b_1) W_2 + b_2                                           (eq. 2)
    input = Dropout(√d_model · E x + PE),  PE(pos, 2i) = sin(pos / 10000^{2i/d}), PE(pos, 2i+1) = cos(·)
    p(y_j) = softmax(E_out h_j), E_out = the target embedding when `tie_output` (section 3.4)
Base model: d_model 512, ffn 2048, 8 heads, 6 + 6 layers, dropout 0.1. `share_embeddings` ties the
source embedding too (one joint vocabulary, as Vaswani et al. do for En-De).

Incremental decoding: `step` runs one position through the decoder and attends to the keys and values
of the earlier positions, which `DecoderState` caches per layer ([N, t, d_model], batch first, so beam
search reorders them); the encoder output's keys and values are projected once in `start`.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from rnmt.data.vocab import PAD_ID
from rnmt.io import InputError
from rnmt.machine.matmul import Linear, linear
from rnmt.models.base import DecoderState, Seq2Seq
from rnmt.models.embedding import FactoredEmbedding
from rnmt.models.registry import register_model


def sinusoids(positions: Tensor, d: int) -> Tensor:
    """positions [...] → PE [..., d]: sin on even, cos on odd dimensions."""
    freq = 10000.0 ** (-torch.arange(0, d, 2, device=positions.device, dtype=torch.float) / d)
    angles = positions.float().unsqueeze(-1) * freq
    return torch.stack([angles.sin(), angles.cos()], -1).flatten(-2)


class MultiHeadAttention(nn.Module):
    def __init__(self, d: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.q, self.k, self.v, self.o = (Linear(d, d) for _ in range(4))

    def kv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Projected keys and values [N, T, d] (cached by the decoder)."""
        return self.k(x), self.v(x)

    def _split(self, x: Tensor) -> Tensor:
        return x.unflatten(-1, (self.heads, -1)).transpose(1, 2)

    def forward(self, x: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        """x [N, Tq, d] attends over k, v [N, Tk, d]; mask broadcastable to [N, heads, Tq, Tk], True = visible."""
        q = self._split(self.q(x))
        # the CPU takes the plain (math) kernel: torch's flash kernel's backward is much slower in bfloat16
        # at sentence lengths, and no faster in float32 (benchmarks/README.md, "Training on the CPU")
        with sdpa_kernel(SDPBackend.MATH) if q.device.type == "cpu" else contextlib.nullcontext():
            out = F.scaled_dot_product_attention(q, self._split(k), self._split(v), mask,
                                                 dropout_p=self.dropout if self.training else 0.0)
        return self.o(out.transpose(1, 2).flatten(-2))


class Layer(nn.Module):
    """An encoder layer (cross=False) or a decoder layer (cross=True)."""

    def __init__(self, d: int, ffn: int, heads: int, dropout: float, attention_dropout: float,
                 cross: bool) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d, heads, attention_dropout)
        self.cross_attn = MultiHeadAttention(d, heads, attention_dropout) if cross else None
        self.feed_forward = nn.Sequential(Linear(d, ffn), nn.ReLU(), Linear(ffn, d))
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(3 if cross else 2))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                memory: tuple[Tensor, Tensor, Tensor] | None = None) -> Tensor:
        """k, v: self-attention keys/values (from this layer's inputs); memory: cross keys, values, mask."""
        x = self.norms[0](x + self.drop(self.self_attn(x, k, v, mask)))
        if self.cross_attn is not None and memory is not None:
            x = self.norms[1](x + self.drop(self.cross_attn(x, *memory)))
        return self.norms[-1](x + self.drop(self.feed_forward(x)))


@register_model("transformer")
class Transformer(Seq2Seq):
    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, d_model: int = 512, ffn: int = 2048,
                 heads: int = 8, layers: int = 6, dec_layers: int | None = None, dropout: float = 0.1,
                 attention_dropout: float = 0.0, tie_output: bool = True, share_embeddings: bool = False,
                 factors: dict[str, Any] | None = None) -> None:
        super().__init__()
        if d_model % heads or d_model % 2:
            raise InputError(f"transformer: d_model {d_model} must be even and divisible by heads {heads}")
        f = factors or {}
        dims, combine = tuple(f.get("dims", ())), f.get("combine", "concat")
        word = d_model - sum(dims) if combine == "concat" else d_model
        if word <= 0:
            raise InputError(f"transformer: factor sizes {list(dims)} leave no room for words in d_model {d_model}")
        self.d = d_model
        self.src_emb = FactoredEmbedding(src_vocab_size, word, tuple(f.get("vocab_sizes", ())), dims, combine)
        if share_embeddings:
            if src_vocab_size != tgt_vocab_size or dims:
                raise InputError("transformer: share_embeddings needs one joint vocabulary and no factors "
                                 f"(got {src_vocab_size} / {tgt_vocab_size} types, {len(dims)} factors)")
            self.tgt_emb = self.src_emb.words
        else:
            self.tgt_emb = nn.Embedding(tgt_vocab_size, d_model, padding_idx=PAD_ID)
        self.encoder = nn.ModuleList(Layer(d_model, ffn, heads, dropout, attention_dropout, False)
                                     for _ in range(layers))
        self.decoder = nn.ModuleList(Layer(d_model, ffn, heads, dropout, attention_dropout, True)
                                     for _ in range(dec_layers or layers))
        self.out = None if tie_output else Linear(d_model, tgt_vocab_size, bias=False)
        self.drop = nn.Dropout(dropout)

    def _embed(self, emb: Tensor, start: int = 0) -> Tensor:
        positions = torch.arange(start, start + emb.size(1), device=emb.device)
        return self.drop(emb * math.sqrt(self.d) + sinusoids(positions, self.d).to(emb.dtype))

    def _logits(self, h: Tensor) -> Tensor:
        return linear(h, self.tgt_emb.weight if self.out is None else self.out.weight)

    def start(self, src: Tensor, src_mask: Tensor) -> DecoderState:
        x = self._embed(self.src_emb(src))
        visible = src_mask[:, None, None, :]
        for layer in self.encoder:
            x = layer(x, *layer.self_attn.kv(x), visible)
        state = DecoderState(src_mask=src_mask)
        empty = x.new_zeros(x.size(0), 0, self.d)
        for i, layer in enumerate(self.decoder):
            state[f"mem_k{i}"], state[f"mem_v{i}"] = layer.cross_attn.kv(x)
            state[f"k{i}"], state[f"v{i}"] = empty, empty
        return state

    def _memory(self, state: DecoderState, i: int) -> tuple[Tensor, Tensor, Tensor]:
        return state[f"mem_k{i}"], state[f"mem_v{i}"], state["src_mask"][:, None, None, :]

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        state = self.start(src, src_mask)
        x = self._embed(self.tgt_emb(tgt_in))
        T = tgt_in.size(1)
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        for i, layer in enumerate(self.decoder):
            x = layer(x, *layer.self_attn.kv(x), causal, self._memory(state, i))
        return self._logits(x)

    def step(self, prev: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
        x = self._embed(self.tgt_emb(prev).unsqueeze(1), start=state["k0"].size(1))
        new = DecoderState(state)
        for i, layer in enumerate(self.decoder):
            k, v = layer.self_attn.kv(x)
            new[f"k{i}"] = torch.cat([state[f"k{i}"], k], 1)
            new[f"v{i}"] = torch.cat([state[f"v{i}"], v], 1)
            x = layer(x, new[f"k{i}"], new[f"v{i}"], None, self._memory(state, i))
        return F.log_softmax(self._logits(x.squeeze(1)).float(), -1), new
