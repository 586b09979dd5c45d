"""`rnmt bench data`: Moses tokenization + BPE (the pipeline's own `tokenize` and `Segmenter`) in lines/s
with 1 and 2 worker processes.

The text is the synthetic corpus's source side, its BPE codes learned from it first (untimed). Each
worker process loads the codes once; the timed part is mapping chunks of lines through the pool (the
pool's start-up is excluded, as the pipeline's long jobs amortise it).
"""

from __future__ import annotations

import tempfile
from multiprocessing import Pool
from pathlib import Path
from typing import Any

import torch

from rnmt.bench.timing import Peak, environment, measure
from rnmt.data import bpe
from rnmt.data.synthetic import write_corpus
from rnmt.data.tokenize import tokenize
from rnmt.io import read_lines

CHUNK = 500
_SEGMENTER: bpe.Segmenter | None = None


def _init(codes: str) -> None:
    global _SEGMENTER
    _SEGMENTER = bpe.Segmenter(codes)


def _process(lines: list[str]) -> list[str]:
    assert _SEGMENTER is not None, "worker not initialised"
    return [_SEGMENTER(tokenize(line, "en")) for line in lines]


def corpus(directory: Path, lines: int, merges: int) -> tuple[list[str], Path]:
    """Raw synthetic lines and BPE codes learned from their tokenized form."""
    write_corpus(directory, {"train": lines}, seed=1)
    text = read_lines(directory / "train.src")
    codes = directory / "codes"
    bpe.learn((tokenize(line, "en") for line in text), codes, merges)
    return text, codes


def bench(device: torch.device, quick: bool = False, workers: tuple[int, ...] = (1, 2),
          lines: int | None = None) -> list[dict[str, Any]]:
    n, merges, reps = (8000, 500, 2) if quick else (20000, 2000, 3)
    n = lines or n
    peak = Peak(device, quick=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        text, codes = corpus(Path(tmp), n, merges)
        chunks = [text[i:i + CHUNK] for i in range(0, len(text), CHUNK)]
        reference = None
        for w in workers:
            with Pool(w, _init, (str(codes),)) as pool:
                pool.map(_process, chunks[:w])                        # warm-up: every worker loaded
                out: list[list[str]] = []
                t = measure(lambda pool=pool, out=out: out.append(pool.map(_process, chunks)), device, 0, reps)
            result = [line for chunk in out[-1] for line in chunk]
            if reference is None:
                reference = result
            elif result != reference:
                raise RuntimeError(f"tokenize+BPE with {w} workers gave different lines than with {workers[0]}")
            rows.append({"task": "tokenize+bpe", "workers": w, "lines": len(text), "seconds": t.median,
                         "lines_per_s": len(text) / t.median, "reps": reps})
    env = environment(device, peak)
    return [{**r, "ratio_to_1_worker": r["lines_per_s"] / rows[0]["lines_per_s"], **env} for r in rows]


COLUMNS = ("task", "workers", "lines", "lines_per_s", "ratio_to_1_worker")
