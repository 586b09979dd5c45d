"""Source embeddings, optionally factored (Sennrich & Haddow 2016; the UD paper): a word embedding
and one embedding per extra factor (e.g. dependency labels), concatenated or summed.

Input ids are [B, S] for words only or [B, S, 1 + F] with the factors after the word id.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from rnmt.data.vocab import PAD_ID
from rnmt.io import InputError


class FactoredEmbedding(nn.Module):
    def __init__(self, vocab_size: int, dim: int, factor_vocab_sizes: tuple[int, ...] = (),
                 factor_dims: tuple[int, ...] = (), combine: str = "concat") -> None:
        super().__init__()
        if len(factor_vocab_sizes) != len(factor_dims):
            raise InputError("factored input: give one embedding size per factor vocabulary "
                             f"(got {len(factor_vocab_sizes)} vocabularies, {len(factor_dims)} sizes)")
        if combine not in ("concat", "sum"):
            raise InputError(f"factored input: combine must be 'concat' or 'sum', not {combine!r}")
        if combine == "sum" and any(d != dim for d in factor_dims):
            raise InputError(f"factored input with combine=sum needs every factor size = word size {dim}, "
                             f"got {list(factor_dims)}")
        self.combine = combine
        self.words = nn.Embedding(vocab_size, dim, padding_idx=PAD_ID)
        self.factors = nn.ModuleList(nn.Embedding(v, d, padding_idx=PAD_ID)
                                     for v, d in zip(factor_vocab_sizes, factor_dims, strict=True))
        self.dim = dim + (sum(factor_dims) if combine == "concat" else 0)

    @property
    def weight(self) -> Tensor:
        return self.words.weight

    def forward(self, ids: Tensor) -> Tensor:
        if ids.dim() == 2:
            if self.factors:
                raise InputError(f"the model expects {len(self.factors)} factor(s) per source token, got none")
            return self.words(ids)
        if ids.size(-1) != 1 + len(self.factors):
            raise InputError(f"the model expects {len(self.factors)} factor(s) per source token, "
                             f"got {ids.size(-1) - 1}")
        parts = [self.words(ids[..., 0])] + [f(ids[..., i + 1]) for i, f in enumerate(self.factors)]
        return torch.cat(parts, -1) if self.combine == "concat" else torch.stack(parts).sum(0)
