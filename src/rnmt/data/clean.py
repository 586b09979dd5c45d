"""Cleaning a parallel corpus as the papers did, step by step, counting what each step drops or changes.

Per line: a byte order mark at its start removed, NUL and other C0 control characters (and tab) made
spaces (counted), Romanian letter normalisation (optional), Chinese word segmentation (jieba, for Chinese
that is not segmented yet), Moses punctuation normalisation and tokenization with or without escaping
(input that is Moses-tokenized already is only un-escaped, where escaping is off), lower-casing.
Per pair: empty lines, a length window in tokens (`min_words`..`max_words`), a length-ratio limit
(`max_ratio`); across the corpus (when merging chunks): exact duplicates.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from rnmt.data.settings import PreprocessSettings
from rnmt.data.tokenize import tokenize

_CJK_RUN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]{5,}")     # 5+ Han characters without a space
_RO = str.maketrans({"ş": "ș", "Ş": "Ș", "ţ": "ț", "Ţ": "Ț"})      # cedilla → comma below


BOM = "\ufeff"
_C0 = re.compile("[\x00-\x1f]")                  # C0 control characters, tab included: each becomes a space
_C0_NOT_TAB_NUL = re.compile("[\x01-\x08\x0a-\x1f]")
# The text fixes, in order, as they are named in the report; each counts the pairs (lines) it changed.
TEXT_FIXES = ("bom", "nul", "control_chars")
FIX_WHAT = {"bom": "a UTF-8 byte order mark at the start (removed)", "nul": "NUL bytes (each made a space)",
            "control_chars": "control characters U+0001-U+001F other than tab (each made a space)"}


def fix_text(line: str) -> tuple[str, set[str]]:
    """`line` without a leading byte order mark and with every C0 control character as a space, and the
    kinds of change made (of TEXT_FIXES; a tab is ordinary whitespace and not counted).

    Left alone, a BOM becomes part of the first word (a vocabulary token of its own) and the tokenizer
    deletes a NUL, merging the words beside it."""
    kinds = set()
    if line.startswith(BOM):
        line = line.lstrip(BOM)
        kinds.add("bom")
    if _C0.search(line):
        if "\x00" in line:
            kinds.add("nul")
        if _C0_NOT_TAB_NUL.search(line):
            kinds.add("control_chars")
        line = _C0.sub(" ", line)
    return line, kinds


_MOSES_ESCAPES = (("&bar;", "|"), ("&#124;", "|"), ("&lt;", "<"), ("&gt;", ">"), ("&bra;", "["), ("&ket;", "]"),
                  ("&#91;", "["), ("&#93;", "]"), ("&quot;", '"'), ("&apos;", "'"), ("&amp;", "&"))


def unescape_moses(line: str) -> str:
    """Undo Moses' XML escaping (for input that was already tokenized and escaped)."""
    for entity, char in _MOSES_ESCAPES:
        line = line.replace(entity, char)
    return line


def normalize_romanian(line: str) -> str:
    """Romanian s/t with cedilla (a legacy encoding) → with comma below, as Sennrich et al. did."""
    return line.translate(_RO)


@lru_cache(maxsize=1)
def _jieba() -> Any:
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()
    return jieba


def is_segmented(line: str) -> bool:
    """Chinese text counts as segmented when no run of five or more Han characters is unbroken."""
    return _CJK_RUN.search(line) is None


def segment_chinese(line: str, mode: str = "auto") -> str:
    """Words separated by spaces (jieba); `auto` leaves already segmented lines alone."""
    if mode == "never" or (mode == "auto" and is_segmented(line)):
        return line
    return " ".join(w for w in _jieba().lcut(line) if not w.isspace())


@dataclass(frozen=True)
class Preparer:
    """Turns one raw line of one language into the tokenized line the model sees."""

    lang: str
    escape: bool = PreprocessSettings.escape
    normalize: bool = PreprocessSettings.normalize
    lowercase: bool = PreprocessSettings.lowercase
    segment: str = PreprocessSettings.segment
    romanian: bool = PreprocessSettings.romanian
    tokenized: bool = PreprocessSettings.tokenized

    @classmethod
    def from_settings(cls, lang: str, s: PreprocessSettings) -> Preparer:
        return cls(lang, s.escape, s.normalize, s.lowercase, s.segment, s.romanian, s.tokenized)

    def __call__(self, line: str) -> str:
        if self.romanian and self.lang == "ro":
            line = normalize_romanian(line)
        if self.lang == "zh":
            line = segment_chinese(line, self.segment)
        if self.tokenized:                  # Moses-tokenized and escaped already: re-tokenizing would split &apos;s
            line = " ".join(line.split()) if self.escape else unescape_moses(" ".join(line.split()))
            return line.lower() if self.lowercase else line
        return tokenize(line, self.lang, escape=self.escape, normalize=self.normalize, lowercase=self.lowercase)


@dataclass
class Step:
    """A step's counts; `changed` (None for a pure filter) counts the kept lines whose text it altered."""

    name: str
    kept: int = 0
    dropped: int = 0
    changed: int | None = None

    def as_dict(self) -> dict[str, Any]:
        out = {"step": self.name, "kept": self.kept, "dropped": self.dropped}
        return out if self.changed is None else {**out, "changed": self.changed}


@dataclass
class Report:
    """Lines in, then lines kept and dropped by each step, in order."""

    lines_in: int = 0
    steps: list[Step] = field(default_factory=list)
    seconds: float = 0.0
    identical: int = 0           # non-empty pairs whose two sides have the same text (before tokenizing)

    def step(self, name: str, changes: bool = False) -> Step:
        """The step called `name`, appended if new (counting changed lines too where `changes`)."""
        for s in self.steps:
            if s.name == name:
                return s
        self.steps.append(Step(name, changed=0 if changes else None))
        return self.steps[-1]

    @property
    def lines_out(self) -> int:
        return self.steps[-1].kept if self.steps else self.lines_in

    def as_dict(self) -> dict[str, Any]:
        return {"lines_in": self.lines_in, "lines_out": self.lines_out, "steps": [s.as_dict() for s in self.steps],
                "identical_pairs": self.identical,
                "seconds": round(self.seconds, 3),
                "lines_per_second": round(self.lines_in / self.seconds, 1) if self.seconds else None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Report:
        return cls(d["lines_in"], [Step(s["step"], s["kept"], s["dropped"], s.get("changed")) for s in d["steps"]],
                   d["seconds"], d.get("identical_pairs", 0))

    def add(self, other: Report) -> None:
        """Sum another chunk's report into this one (steps in the same order)."""
        self.lines_in += other.lines_in
        self.seconds += other.seconds
        self.identical += other.identical
        for s in other.steps:
            mine = self.step(s.name, changes=s.changed is not None)
            mine.kept += s.kept
            mine.dropped += s.dropped
            if s.changed is not None:
                mine.changed = (mine.changed or 0) + s.changed

    def changes(self) -> dict[str, int]:
        """Pairs changed by each text fix that changed any (TEXT_FIXES order)."""
        return {k: s.changed for k in TEXT_FIXES for s in self.steps if s.name == k and s.changed}


def clean_pairs(pairs: Iterable[tuple[str, str]], src: Preparer, tgt: Preparer, settings: PreprocessSettings,
                report: Report) -> Iterator[tuple[str, str]]:
    """Prepare and filter sentence pairs, counting every step in `report`."""
    lo, hi, ratio = settings.min_words, settings.max_words, settings.max_ratio
    fixes = [report.step(k, changes=True) for k in TEXT_FIXES]
    names = ["non_empty", "tokenize"]
    use_words = lo > 1 or bool(hi)
    if use_words:
        names.append(f"words_{lo}_to_{hi or 'any'}")
    if ratio:
        names.append(f"ratio_max_{ratio}")
    steps = [report.step(n) for n in names]
    t0 = time.perf_counter()
    for a, b in pairs:
        report.lines_in += 1
        (a, ka), (b, kb) = fix_text(a), fix_text(b)
        for fix in fixes:
            fix.kept += 1
            if fix.name in ka or fix.name in kb:
                fix.changed += 1                           # type: ignore[operator]
        if not a.strip() or not b.strip():
            steps[0].dropped += 1
            continue
        steps[0].kept += 1
        if a.split() == b.split():
            report.identical += 1
        a, b = src(a), tgt(b)
        steps[1].kept += 1
        i = 2
        na, nb = len(a.split()), len(b.split())
        if use_words:
            if min(na, nb) < lo or (hi and max(na, nb) > hi):
                steps[i].dropped += 1
                continue
            steps[i].kept += 1
            i += 1
        if ratio:
            if max(na, nb) > ratio * max(min(na, nb), 1):
                steps[i].dropped += 1
                continue
            steps[i].kept += 1
        yield a, b
    report.seconds += time.perf_counter() - t0
