"""Token vocabularies: reserved symbols first, then tokens by frequency."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from rnmt.data.settings import VocabSettings
from rnmt.io import InputError, atomic_writer

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
SPECIALS = (PAD, UNK, BOS, EOS)
PAD_ID, UNK_ID, BOS_ID, EOS_ID = range(4)
UNKNOWN_WARN = 0.05         # a source this unknown to the model is probably not what it was trained on


class Vocab:
    def __init__(self, tokens: Sequence[str]) -> None:
        if tuple(tokens[:4]) != SPECIALS:
            raise InputError(f"a vocabulary must start with {' '.join(SPECIALS)}; got {' '.join(tokens[:4])}")
        self.itos = list(tokens)
        self.stoi = {t: i for i, t in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    @classmethod
    def build(cls, lines: Iterable[str], max_size: int | None = VocabSettings.max_size,
              min_count: int = VocabSettings.min_count) -> Vocab:
        counts: Counter[str] = Counter()
        for line in lines:
            counts.update(line.split())
        ranked = sorted((t for t, c in counts.items() if c >= min_count and t not in SPECIALS),
                        key=lambda t: (-counts[t], t))
        if max_size is not None:
            ranked = ranked[: max(0, max_size - len(SPECIALS))]
        return cls([*SPECIALS, *ranked])

    def save(self, path: str | Path) -> None:
        with atomic_writer(path) as f:
            for t in self.itos:
                f.write(t + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Vocab:
        with open(path, encoding="utf-8") as f:
            return cls([line.rstrip("\n") for line in f])

    def encode(self, line: str) -> list[int]:
        return [self.stoi.get(t, UNK_ID) for t in line.split()]

    def unknown_warning(self, sources: Iterable[list[int]], what: str) -> tuple[float, str]:
        """The share of `sources`' tokens that are <unk>, and a warning where it is UNKNOWN_WARN or more:
        text segmented with another corpus' BPE codes, or of another language, is mostly unknown to a model
        and translates as noise with no error."""
        tokens = unknown = 0
        for ids in sources:
            tokens += len(ids)
            unknown += sum(i == UNK_ID for i in ids)
        return unknown_warning(unknown, tokens, what)

    def decode(self, ids: Iterable[int]) -> str:
        return " ".join(self.itos[i] for i in ids if i not in (PAD_ID, BOS_ID, EOS_ID))


def unknown_warning(unknown: int, tokens: int, what: str) -> tuple[float, str]:
    """`Vocab.unknown_warning` from the counts: <unk> subwords among `tokens` source subwords."""
    share = unknown / tokens if tokens else 0.0
    if share < UNKNOWN_WARN:
        return share, ""
    return share, (f"{what}: {share:.1%} of the source subwords are not in the model's vocabulary (<unk>); "
                   "the BPE codes or the text may come from another corpus, language or tokenization than "
                   "the model's training data")
