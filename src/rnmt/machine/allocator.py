"""Keep freed memory inside the process, so big tensors are not page-faulted in again at every step.

glibc's malloc hands allocations above its mmap threshold (128 KiB, raised adaptively up to 32 MiB) to
fresh `mmap`s and gives them back on `free`, and trims the top of the heap beyond its trim threshold.
A training step allocates the same tens of megabytes of activations and gradients every time, so every
step faulted them in again, and elementwise ops into fresh buffers ran several times slower than into warm
ones (benchmarks/README.md, "Measurements behind the CPU kernels").
With both thresholds raised, the steady state takes no page faults (`tests/test_allocator.py`).

PyTorch's CPU tuning guide recommends jemalloc or tcmalloc for the same reason; this needs neither.
The cost: a process keeps up to 1 GiB of freed memory instead of returning it (its peak stays the
same). `RNMT_MALLOC_TUNING=0` turns it off. Only glibc on Linux is tuned; elsewhere it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

from rnmt.machine.switches import switch

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1          # glibc <malloc.h>
M_MMAP_THRESHOLD = -3
KEEP = 1 << 30                 # bytes of freed memory a process may keep

tuned = False                  # whether keep_freed_memory() took effect in this process


def keep_freed_memory(limit: int = KEEP) -> bool:
    """Raise glibc's mmap and trim thresholds to `limit`; True when it took effect."""
    global tuned
    if not switch("malloc_tuning") or not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):          # not glibc (e.g. musl without mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok = bool(mallopt(M_MMAP_THRESHOLD, limit)) and bool(mallopt(M_TRIM_THRESHOLD, limit))
    tuned = tuned or ok
    if not ok:
        log.debug("mallopt refused the thresholds; the allocator keeps its defaults")
    return ok


def minor_faults() -> int:
    """This process's minor page faults so far: how often it touched memory new to it (0 where the
    platform does not count them)."""
    try:
        import resource
    except ImportError:                        # Windows
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
