"""Which implementation of a computation runs, chosen by measuring the candidates on the machine at hand.

Some computations have several implementations that give the same numbers: a recurrent layer runs as
its step loop, as its cell's whole-sequence path, or (GRU, LSTM) as torch's own layer; a float32
product on the CPU goes to the BLAS or to oneDNN. Which is fastest depends on the CPU (an AMD EPYC and an
Intel Xeon disagree), the sizes, the thread count and the device, so it is measured, never assumed: the
first time a choice is needed, each candidate runs once to warm up and then `reps` times, the candidates
interleaved, and the lowest median time wins if it beats the default candidate's by more than MARGIN
(closer than that, the default stays: a choice made once should not follow the noise).

Choices are kept for the process and in a JSON file (`RNMT_FASTPATH_CACHE`, default
~/.cache/rnmt/fastpath.json) under the machine's name (CPU model or GPU name, torch version, threads), so
every job on a machine and a resumed run take the paths of the first measurement. `RNMT_FASTPATH`:
`measure` (the default), or `default` to take each computation's default candidate without measuring
(what the tests do, so that no test depends on how fast or busy the machine is). `chosen()` lists this
process's choices; every metrics file records them (`hardware.fast_paths`).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import statistics
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from rnmt.io import InputError

log = logging.getLogger(__name__)
MODES = ("measure", "default")
MARGIN = 0.05
_CHOSEN: dict[str, str] = {}
_LOCK = threading.Lock()


def mode() -> str:
    value = os.environ.get("RNMT_FASTPATH", "measure")
    if value not in MODES:
        raise InputError(f"RNMT_FASTPATH={value!r}: valid values are {', '.join(MODES)}")
    return value


def cache_path() -> Path:
    return Path(os.environ.get("RNMT_FASTPATH_CACHE") or Path.home() / ".cache/rnmt/fastpath.json")


def machine(device: torch.device) -> str:
    """What a measurement holds for: the processor, torch's version and the thread count."""
    return f"{_processor(device.type, device.index)} | torch {torch.__version__} | {torch.get_num_threads()} threads"


@functools.cache
def _processor(kind: str, index: int | None) -> str:
    from rnmt import hardware

    return torch.cuda.get_device_name(index) if kind == "cuda" else hardware.cpu_model()


def _read_cache() -> dict[str, dict[str, str]]:
    path = cache_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        log.warning("ignoring the fast-path cache %s (%s); measuring again", path, e)
        return {}


def _write_cache(section: str, key: str, winner: str) -> None:
    """Add one choice to the cache file, atomically (concurrent jobs at worst measure a key twice)."""
    from rnmt.io import write_json

    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = _read_cache()
        data.setdefault(section, {})[key] = winner
        write_json(path, data)
    except OSError as e:
        log.warning("could not keep the fast-path choice in %s (%s); it holds for this process", path, e)


def timings(candidates: Mapping[str, Callable[[], Any]], device: torch.device, reps: int = 3,
            timer: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """Median seconds of each candidate: one warm-up run each, then `reps` rounds with the candidates
    interleaved (a machine that speeds up or slows down meanwhile moves them alike)."""
    for fn in candidates.values():
        fn()
    seconds: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(reps):
        for name, fn in candidates.items():
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = timer()
            fn()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            seconds[name].append(timer() - t0)
    return {name: statistics.median(s) for name, s in seconds.items()}


def choose(key: str, candidates: Mapping[str, Callable[[], Any]], default: str, device: torch.device,
           reps: int = 3, timer: Callable[[], float] = time.perf_counter) -> str:
    """The name of the fastest of `candidates` (callables running the computation on inputs of the sizes
    that `key` stands for) on this machine; `default` without measuring under RNMT_FASTPATH=default or
    when it is the only candidate."""
    if default not in candidates:
        raise ValueError(f"default {default!r} is not a candidate of {key}: {', '.join(candidates)}")
    if mode() == "default" or len(candidates) == 1:
        return default
    section = machine(device)
    full = f"{section} | {key}"
    with _LOCK:
        if full in _CHOSEN:
            return _CHOSEN[full]
    kept = _read_cache().get(section, {}).get(key)
    if kept in candidates:
        winner = kept
    else:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):   # training's RNG untouched
            times = timings(candidates, device, reps, timer)
        best = min(times, key=lambda name: times[name])
        winner = best if times[best] < (1 - MARGIN) * times[default] else default
        log.info("fast path for %s: %s (%s)", key, winner,
                 ", ".join(f"{name} {t * 1e3:.2f} ms" for name, t in times.items()))
        _write_cache(section, key, winner)
    with _LOCK:
        _CHOSEN[full] = winner
    return winner


def chosen() -> dict[str, str]:
    """This process's choices, `machine | key` → the candidate taken."""
    with _LOCK:
        return dict(_CHOSEN)


def forget() -> None:
    """Drop this process's choices (the cache file stays): the next `choose` of each key reads or measures."""
    with _LOCK:
        _CHOSEN.clear()
