"""BPE for the training pairs: both sides at once, in parallel worker processes, dropping pairs
longer than a subword limit (DTMT: 256 subwords for En-De/En-Fr, 128 for Zh-En)."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator
from multiprocessing import Pool
from multiprocessing.pool import Pool as PoolType
from pathlib import Path

from rnmt.data.bpe import Segmenter
from rnmt.data.clean import Report
from rnmt.io import atomic_writer, iter_lines, write_json

log = logging.getLogger(__name__)
BATCH = 5000
_WORKER: tuple[Segmenter, Segmenter] | None = None


def _init(src_codes: str | None, tgt_codes: str | None) -> None:
    global _WORKER
    _WORKER = (Segmenter(src_codes), Segmenter(tgt_codes))


def _segment(batch: list[tuple[str, str]]) -> list[tuple[str, str]]:
    assert _WORKER is not None
    s, t = _WORKER
    return [(s(a), t(b)) for a, b in batch]


def _batches(src: Path, tgt: Path) -> Iterator[list[tuple[str, str]]]:
    pairs = zip(iter_lines(src), iter_lines(tgt), strict=True)
    while batch := list(itertools.islice(pairs, BATCH)):
        yield batch


def _bounded_map(pool: PoolType | None, batches: Iterator[list[tuple[str, str]]],
                 window: int) -> Iterator[list[tuple[str, str]]]:
    """Segment batches in order, holding at most `window` batches in flight (Pool.imap would read
    the whole input ahead of the workers)."""
    if pool is None:
        yield from map(_segment, batches)
        return
    while group := list(itertools.islice(batches, window)):
        yield from pool.map(_segment, group)


def segment_pairs(src: Path, tgt: Path, src_codes: str | None, tgt_codes: str | None, out_src: Path,
                  out_tgt: Path, out_report: Path, max_subwords: int | None = None, workers: int = 1) -> Report:
    """Apply BPE to a line-aligned pair; with `max_subwords`, drop pairs with a longer side."""
    report = Report()
    step = report.step(f"subwords_max_{max_subwords}") if max_subwords else report.step("bpe")
    t0 = time.perf_counter()
    pool = Pool(workers, _init, (src_codes, tgt_codes)) if workers > 1 else None
    if pool is None:
        _init(src_codes, tgt_codes)
    try:
        last = time.monotonic()
        with atomic_writer(out_src) as fs, atomic_writer(out_tgt) as ft:
            for batch in _bounded_map(pool, _batches(src, tgt), 2 * workers):
                if time.monotonic() - last > 30:
                    last = time.monotonic()
                    log.info("BPE on the training pairs: %d done", report.lines_in)
                for a, b in batch:
                    report.lines_in += 1
                    if max_subwords and max(len(a.split()), len(b.split())) > max_subwords:
                        step.dropped += 1
                        continue
                    step.kept += 1
                    fs.write(a + "\n")
                    ft.write(b + "\n")
    finally:
        if pool:
            pool.close()
            pool.join()
    report.seconds = time.perf_counter() - t0
    write_json(out_report, report.as_dict())
    log.info("BPE on %d training pairs (%d workers): %d kept", report.lines_in, workers, report.lines_out)
    return report
