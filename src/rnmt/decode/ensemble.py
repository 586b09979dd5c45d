"""Ensembles of models that share their vocabularies (ATR: 8 seeds En-De, 4 En-Fr).

    p(y | x) = (1/K) Σ_k p_k(y | x)      (probabilities averaged, then the log: the reference code's way)

An ensemble is itself a Seq2Seq, so beam search and `translate_ids` decode it unchanged; its decoder
state holds every member's state under the member's index.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor, nn

from rnmt.data.vocab import Vocab
from rnmt.io import InputError
from rnmt.models.base import DecoderState, Seq2Seq
from rnmt.models.checkpoint import load_model_with_labels


class Ensemble(Seq2Seq):
    def __init__(self, members: Sequence[Seq2Seq]) -> None:
        super().__init__()
        if not members:
            raise InputError("an ensemble needs at least one model")
        self.members = nn.ModuleList(members)

    def _average(self, logps: list[Tensor]) -> Tensor:
        return torch.logsumexp(torch.stack(logps), 0) - math.log(len(logps))

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        """Log-probabilities [B, T, V] (a valid input to cross-entropy and to log_softmax)."""
        return self._average([torch.log_softmax(m(src, src_mask, tgt_in).float(), -1) for m in self.members])

    def start(self, src: Tensor, src_mask: Tensor) -> DecoderState:
        return DecoderState({f"{i}/{k}": v for i, m in enumerate(self.members)
                             for k, v in m.start(src, src_mask).items()})

    def _member_state(self, state: DecoderState, i: int) -> DecoderState:
        prefix = f"{i}/"
        return DecoderState({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})

    def step(self, prev: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
        logps, merged = [], DecoderState()
        for i, m in enumerate(self.members):
            logp, st = m.step(prev, self._member_state(state, i))
            logps.append(logp)
            merged.update({f"{i}/{k}": v for k, v in st.items()})
        return self._average(logps), merged


def load_ensemble_with_labels(paths: Sequence[str | Path], device: torch.device | str = "cpu"
                              ) -> tuple[Seq2Seq, Vocab, Vocab, Vocab | None]:
    """One model, or an Ensemble of several whose vocabularies (source, target, source labels) are identical."""
    loaded = [load_model_with_labels(p, device) for p in paths]
    _, src_vocab, tgt_vocab, label_vocab = loaded[0]
    labels = label_vocab.itos if label_vocab is not None else None
    for path, (_, sv, tv, lv) in zip(paths[1:], loaded[1:], strict=True):
        if sv.itos != src_vocab.itos or tv.itos != tgt_vocab.itos:
            raise InputError(f"{path} and {paths[0]} have different vocabularies; an ensemble's models must share "
                             "them (train them on the same BPE-segmented data)")
        if (lv.itos if lv is not None else None) != labels:
            raise InputError(f"{path} and {paths[0]} differ in their source labels (one takes none, or other label "
                             "vocabularies); ensemble models trained on the same label files")
    if len(loaded) == 1:
        return loaded[0]
    return Ensemble([m for m, _, _, _ in loaded]).eval(), src_vocab, tgt_vocab, label_vocab


def load_ensemble(paths: Sequence[str | Path], device: torch.device | str = "cpu") -> tuple[Seq2Seq, Vocab, Vocab]:
    """One model, or an Ensemble of several whose source and target vocabularies are identical."""
    model, src_vocab, tgt_vocab, _ = load_ensemble_with_labels(paths, device)
    return model, src_vocab, tgt_vocab
