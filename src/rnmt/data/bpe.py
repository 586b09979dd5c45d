"""Byte-pair encoding with subword-nmt: learn codes, apply them, undo them.

Subwords that continue into the next one end in the separator `@@` (subword-nmt's convention), so
undoing BPE is joining on "@@ ".
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from pathlib import Path

from subword_nmt.apply_bpe import BPE
from subword_nmt.learn_bpe import learn_bpe as _learn_bpe

from rnmt.data.settings import BPESettings
from rnmt.io import InputError, atomic_writer, iter_lines
from rnmt.progress import logged

log = logging.getLogger(__name__)

SEPARATOR = "@@"


def learn(lines: Iterable[str], codes_path: str | Path, merges: int,
          min_frequency: int = BPESettings.min_frequency) -> None:
    """Learn `merges` BPE merge operations from tokenized `lines` and write the codes file.

    The lines are streamed (subword-nmt only keeps word counts), so memory follows the vocabulary.
    """
    import subword_nmt.learn_bpe as subword_learn

    def merges_logged(items: Iterable[int], *args: object, **kwargs: object) -> Iterator[int]:
        return logged(items, merges, "BPE merges learned", log)

    bar = subword_learn.tqdm                    # subword-nmt's own bar (one line of fragments in a log file)
    subword_learn.tqdm = merges_logged
    try:
        with atomic_writer(codes_path) as out:
            _learn_bpe((line + "\n" for line in lines), out, merges, min_frequency=min_frequency)
    finally:
        subword_learn.tqdm = bar


def file_lines(paths: Iterable[str | Path]) -> Iterator[str]:
    """The lines of several UTF-8 files in turn, without their newlines (for `learn` on big files)."""
    for path in paths:
        if not Path(path).is_file():
            raise InputError(f"{path}: file not found")
        yield from iter_lines(path)


class Segmenter:
    """Applies a learned codes file to tokenized lines; without codes (word level) lines pass as they are."""

    def __init__(self, codes_path: str | Path | None) -> None:
        self._bpe: BPE | None = None
        if codes_path is None:
            return
        path = Path(codes_path)
        if not path.is_file():
            raise InputError(f"{path}: BPE codes file not found; learn it first (rnmt bpe learn)")
        with open(path, encoding="utf-8") as f:
            self._bpe = BPE(f, separator=SEPARATOR)

    def __call__(self, line: str) -> str:
        if self._bpe is None:
            return " ".join(line.split())
        return self._bpe.process_line(line).strip()


def undo(line: str) -> str:
    """Join subwords back into words: `Ver@@ suchs@@ weise` → `Versuchsweise`."""
    return (line + " ").replace(SEPARATOR + " ", "").rstrip()
