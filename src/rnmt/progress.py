"""Progress of a long loop over a known number of items: a live bar on a terminal, and in a job's log
file (no terminal) a line at most every `every_s` seconds with the count, rate and ETA, so a log read
later is a list of lines rather than carriage-return fragments."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def clock(seconds: float) -> str:
    """12.3 s, 4m05s or 2h03m."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    m, s = divmod(int(seconds), 60)
    return f"{m}m{s:02d}s" if m < 60 else f"{m // 60}h{m % 60:02d}m"


def logged(items: Iterable[T], total: int, what: str, log: logging.Logger, every_s: float = 30.0,
           unit: str = "") -> Iterator[T]:
    """Yield `items`, reporting progress towards `total` (a bar on a terminal, else log lines)."""
    if sys.stderr.isatty():
        from tqdm import tqdm

        yield from tqdm(items, total=total, desc=what, unit=unit or "it", disable=None)
        return
    start = last = time.monotonic()
    for done, item in enumerate(items, 1):
        yield item
        now = time.monotonic()
        if now - last >= every_s and done < total:
            last = now
            rate = done / (now - start)
            eta = (total - done) / rate if rate > 0 else float("inf")
            log.info("%s: %s of %s%s (%.0f%%), %.1f/s, elapsed %s, ETA %s", what, f"{done:,}", f"{total:,}",
                     f" {unit}" if unit else "", 100 * done / total, rate, clock(now - start), clock(eta))
