"""Data settings: how a corpus is cleaned and tokenized, segmented into subwords and turned into
vocabularies. One typed class per config block (`preprocess`, `bpe`, `vocab`), each default written once:
the config schema's blocks are generated from these classes, and a corpus' settings are these defaults
under the config's block, the registry's preset for the corpus and the corpus entry's own (weakest first),
checked when the workflow starts."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from rnmt.settings import checked, setting

S = TypeVar("S", bound="_DataSettings")


class _DataSettings:
    WHAT = ""

    @classmethod
    def from_dict(cls: type[S], d: dict[str, Any], where: str = "") -> S:
        return checked(cls, d, cls.WHAT, where)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)      # type: ignore[call-overload]


@dataclass(frozen=True)
class PreprocessSettings(_DataSettings):
    WHAT = "preprocess"

    tokenized: bool = setting(False, "input Moses-tokenized and escaped already: not re-tokenized")
    escape: bool = setting(True, "Moses escaping (&apos; &quot; ...), as the papers' preprocessing did")
    normalize: bool = setting(True, "Moses punctuation normalisation")
    lowercase: bool = setting(False, "lowercase both sides (BLEU is then case-insensitive)")
    truecase: bool = setting(False, "Moses truecasing learnt on the training text; translations are detruecased")
    segment: str = setting("auto", "Chinese word segmentation with jieba: auto (lines not segmented yet), always "
                                   "or never", enum=["auto", "always", "never"])
    romanian: bool = setting(False, "Romanian s/t with cedilla to comma below (Sennrich et al.'s WMT16 En-Ro)")
    max_words: int | None = setting(None, "drop training pairs with a side longer than this (ATR 80, SR-NMT 50)",
                                    minimum=1)
    min_words: int = setting(1, "drop training pairs with a side shorter than this", minimum=0)
    max_ratio: float | None = setting(None, "drop training pairs whose length ratio exceeds this",
                                      exclusiveMinimum=0)
    dedupe: bool = setting(False, "drop repeated training pairs")
    max_subwords: int | None = setting(None, "drop training pairs longer than this after BPE (DTMT 256 / 128)",
                                       minimum=1)
    max_pairs: int | None = setting(None, "keep a random sample of this many training pairs (the small scale)",
                                    minimum=1)
    chunks: int = setting(1, "training pairs are cleaned in this many parallel jobs", minimum=1)


@dataclass(frozen=True)
class BPESettings(_DataSettings):
    WHAT = "bpe"

    merges: int = setting(0, "BPE merge operations (ATR: 40K per side); 0: word level, no BPE", minimum=0)
    joint: bool = setting(False, "one model learnt on both sides (DTMT) instead of one per side (ATR)")
    min_frequency: int = setting(2, "a pair of symbols seen fewer times is not merged", minimum=1)


@dataclass(frozen=True)
class VocabSettings(_DataSettings):
    WHAT = "vocab"

    max_size: int | None = setting(None, "keep the most frequent subwords up to this many; null: all", minimum=5)
    min_count: int = setting(1, "leave out subwords seen fewer times", minimum=1)
