"""Moses truecasing (sacremoses): learn the usual casing of each word from the tokenized training
text, then restore it at the start of every sentence (as SR-NMT's En-Ro preprocessing did)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from sacremoses import MosesTruecaser

from rnmt.io import InputError, atomic_path, atomic_writer, iter_lines


def _token_lists(path: Path) -> Iterator[list[str]]:
    for line in iter_lines(path):
        yield line.split()


def train(text: str | Path, model: str | Path) -> None:
    """Learn a truecasing model from tokenized text, streaming it (no whole-file read)."""
    text, model = Path(text), Path(model)
    if not text.is_file():
        raise InputError(f"{text}: file not found")
    with atomic_path(model) as tmp:
        # sacremoses' train_from_file reads the whole file into memory; _train takes an iterator.
        MosesTruecaser()._train(_token_lists(text), save_to=str(tmp))


def load(model: str | Path, fix: str = "learn it again (rnmt corpus truecase-train)") -> MosesTruecaser:
    """A learned truecasing model; a file that is not one is an input error naming it and `fix`."""
    try:
        return MosesTruecaser(load_from=str(model))
    except (UnicodeDecodeError, ValueError, IndexError, KeyError) as e:
        raise InputError(f"{model}: not a Moses truecasing model ({type(e).__name__}); {fix}") from None


def apply(model: str | Path, inp: str | Path, out: str | Path) -> int:
    """Truecase a tokenized file with a learned model; return the number of lines."""
    if not Path(model).is_file():
        raise InputError(f"{model}: truecasing model not found; learn it first (rnmt corpus truecase-train)")
    if not Path(inp).is_file():
        raise InputError(f"{inp}: file not found")
    tc = load(model)
    n = 0
    with atomic_writer(out) as f:
        for line in iter_lines(inp):
            f.write(tc.truecase(line, return_str=True) + "\n")
            n += 1
    return n
