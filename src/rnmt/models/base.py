"""What every architecture offers the trainer and the decoder."""

from __future__ import annotations

from abc import ABC, abstractmethod

from torch import Tensor, nn


class DecoderState(dict[str, Tensor]):
    """Per-hypothesis decoder tensors by name, each with the batch (or batch·beam) as first dimension.

    An architecture keeps whatever it needs here (recurrent states of every layer, encoder memory,
    precomputed attention keys, masks, the previous context for input feeding, ...); beam search only
    reorders them with `select`.
    """

    def select(self, index: Tensor) -> DecoderState:
        return DecoderState({k: v.index_select(0, index) for k, v in self.items()})


class Seq2Seq(nn.Module, ABC):
    """An encoder-decoder: teacher-forced `forward` for training, `start`/`step` for search.

    `src` is [B, S] token ids, or [B, S, F] for factored input (word ids, then label ids).
    """

    @abstractmethod
    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        """Source ids and tgt_in [B, T] (starting with <s>) → logits [B, T, V]."""

    @abstractmethod
    def start(self, src: Tensor, src_mask: Tensor) -> DecoderState:
        """Encode a batch and return the decoder's initial state."""

    @abstractmethod
    def step(self, prev: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
        """Previous tokens [N] → log-probabilities [N, V] of the next token and the new state.

        Tensors of `state` are never changed in place: a tensor that the new state passes through as the
        same object (encoder memory, keys, masks) is taken by beam search as constant for the sentence.
        """
