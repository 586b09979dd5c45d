"""What every architecture offers the trainer and the decoder."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, fields

from torch import Tensor, nn


@dataclass
class DecoderState:
    """Per-hypothesis decoder tensors, batch first; beam search reorders them with `select`."""

    state: Tensor          # the recurrent state
    memory: Tensor         # encoder outputs the attention reads [N, S, M]
    keys: Tensor           # the memory's precomputed attention projection [N, S, A]
    mask: Tensor           # [N, S], True at real source tokens

    def select(self, index: Tensor) -> DecoderState:
        return type(self)(**{f.name: getattr(self, f.name).index_select(0, index) for f in fields(self)})


class Seq2Seq(nn.Module, ABC):
    """An encoder-decoder: teacher-forced `forward` for training, `start`/`step` for search."""

    @abstractmethod
    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        """Token ids src [B, S] and tgt_in [B, T] (starting with <s>) → logits [B, T, V]."""

    @abstractmethod
    def start(self, src: Tensor, src_mask: Tensor) -> DecoderState:
        """Encode a batch and return the decoder's initial state."""

    @abstractmethod
    def step(self, prev: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
        """Previous tokens [N] → log-probabilities [N, V] of the next token and the new state."""
