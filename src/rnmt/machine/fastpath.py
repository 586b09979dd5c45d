"""Which implementation of a computation runs, chosen by measuring the candidates on the machine at hand.

Some computations have several implementations that give the same numbers: a recurrent layer runs as
its step loop, as its cell's whole-sequence path, or (GRU, LSTM) as torch's own layer; a float32
product on the CPU goes to the BLAS or to oneDNN. Which is fastest depends on the CPU model (machines
disagree; benchmarks/README.md), the sizes, the thread count and the device, so it is measured, never
assumed: the first time a choice is needed, each candidate runs once to warm up and then `reps` times,
the candidates interleaved, and the lowest median time wins if it beats the default candidate's by more
than MARGIN (closer than that, the default stays: a choice made once should not follow the noise).

Choices are kept for the process and in a JSON file (`RNMT_FASTPATH_CACHE`, default
~/.cache/rnmt/fastpath.json), with the candidates' median times that decided them (its `medians_ms`, by
machine and key), under the machine's name (CPU model with its x86 family and model numbers, or
GPU name; torch and rnmt versions; threads; the RNMT_MATMUL, RNMT_TRITON and RNMT_ATR_PERSISTENT switches),
so a machine measures each key once: nodes of a cluster that share a home folder but not a CPU generation
measure apart. The first choice written for a key stands: a job that measured the same key meanwhile takes
the file's.

A run's choices are also fixed for the run itself: with `RNMT_FASTPATH_RUN` set (the workflow sets
results/<run>/fast_paths.json), the first choice made for a key in the run is written there, keyed by the
computation alone (not the machine), and every later job and rerun of the run takes it, on this machine or
on another one the run's folder was copied to. The paths round differently, so this is what makes a run's
numbers follow from its own record rather than from how busy a machine was when it first measured. A
training checkpoint also keeps its run's choices (`adopt` restores them), so a resumed run takes its
first start's paths even where both files are gone. Time spent measuring is not the computation's:
`measuring_seconds()` lets timed regions (training and decoding speed) leave it out. `RNMT_FASTPATH`:
`measure` (the default), or `default` to run without measuring: a cell takes its own whole-sequence path
(else its step loop), a product the default route (the demo's setting and the tests', so that their
numbers depend on no timing). `chosen()` lists this process's choices; every metrics file records them
(`hardware.fast_paths`).

Work that will run as a replayed CUDA graph (`choose(..., graphed=True)` on a GPU) is chosen apart from
the same work run eagerly: its key says so, and each candidate is timed as the replay of its own graph.
A graph launches its kernels without the host, so a path that wins eagerly by launching fewer kernels can
lose once replayed, where only the kernels' own work counts (benchmarks/gpu/README.md).
"""

from __future__ import annotations

import functools
import json
import logging
import statistics
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from rnmt.machine import hardware
from rnmt.machine.switches import Switches, switch, variable

log = logging.getLogger(__name__)
MODES = Switches.__dataclass_fields__["fastpath"].metadata["choices"]
MARGIN = 0.05
MEDIANS = "medians_ms"        # the machine file's section of each measured key's candidates' median milliseconds
CANDIDATE_SWITCHES = ("matmul", "triton", "atr_persistent")     # the switches that change what a choice weighs
_CHOSEN: dict[str, str] = {}
_LOCK = threading.Lock()
_SPENT = [0.0]                                  # seconds spent measuring in this process
_DEPTH = threading.local()                      # measurements under way in this thread (one inside another's
                                                # candidate: ATR's ways inside a cell's paths)
_CACHES: list[dict[Any, Any]] = []              # callers' own lookups of choices, cleared by `forget`


def mode() -> str:
    return switch("fastpath")


def cache_path() -> Path:
    return switch("fastpath_cache") or Path.home() / ".cache/rnmt/fastpath.json"


def machine(device: torch.device) -> str:
    """What a measurement holds for: the processor, the torch and rnmt versions, the thread count and the
    switches that change the candidates."""
    from rnmt import __version__

    now, default = Switches.read(), Switches()
    switches = ",".join(f"{variable(k)}={int(v) if isinstance(v, bool) else v}" for k in CANDIDATE_SWITCHES
                        if (v := getattr(now, k)) != getattr(default, k))
    return (f"{_processor(device.type, device.index)} | torch {torch.__version__} | rnmt {__version__} | "
            f"{torch.get_num_threads()} threads" + (f" | {switches}" if switches else ""))


@functools.cache
def _processor(kind: str, index: int | None) -> str:
    if kind == "cuda":
        return torch.cuda.get_device_name(index)
    family = hardware.cpu_family_model()
    return hardware.cpu_model() + (f" ({family})" if family else "")


def run_path() -> Path | None:
    """The run's own file of choices (RNMT_FASTPATH_RUN), if any."""
    return switch("fastpath_run")


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        log.warning("ignoring the fast-path file %s (%s); measuring again", path, e)
        return {}


def _read_cache() -> dict[str, dict[str, str]]:
    return _read(cache_path())


def _run_choices() -> dict[str, str]:
    path = run_path()
    paths = _read(path).get("paths") if path else None
    return paths if isinstance(paths, dict) else {}


def _first_written(path: Path, section: str, key: str, winner: str,
                   extra: Mapping[tuple[str, ...], Any] = {}) -> str:
    """Set data[section][key] = winner in the JSON file `path`, under a lock, unless another job wrote
    that key first: then the file's choice is returned (every job takes the same path). `extra`: entries
    written beside a new choice, each at data[*where][key] (where it was measured; the candidates' times)."""
    from filelock import FileLock

    from rnmt.io import write_json

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(path.with_name(path.name + ".lock")):       # one job at a time reads, decides, writes
            data = _read(path)
            section_data = data.setdefault(section, {})
            kept = section_data.setdefault(key, winner) if isinstance(section_data, dict) else winner
            if kept == winner:
                for where, value in extra.items():
                    node = data
                    for name in where:
                        node = node.setdefault(name, {})
                    node[key] = value
                write_json(path, data)
            return kept
    except OSError as e:
        log.warning("could not keep the fast-path choice in %s (%s); it holds for this process", path, e)
        return winner


def timings(candidates: Mapping[str, Callable[[], Any]], device: torch.device, reps: int = 3,
            timer: Callable[[], float] = time.perf_counter, graphed: bool = False) -> dict[str, float]:
    """Median seconds of each candidate: one warm-up run each, then `reps` rounds with the candidates
    interleaved (a machine that speeds up or slows down meanwhile moves them alike); `graphed` (CUDA): each
    candidate's replay as a CUDA graph (`as_replay`)."""
    if graphed:
        candidates = {name: as_replay(name, fn, device) for name, fn in candidates.items()}
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


def as_replay(name: str, fn: Callable[[], Any], device: torch.device) -> Callable[[], Any]:
    """`fn` captured as a CUDA graph on `device`, as the graph's replay (warmed up on a side stream first, as
    a capture needs); where it cannot be captured, `fn` itself, since a graphed step holding it is not
    captured either and runs eagerly (rnmt.train.graphs)."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with hardware.capture(graph, device):
            fn()
    except Exception as e:           # noqa: BLE001 - any failure to capture: the candidate runs eagerly
        log.info("fast path %s is not capturable as a CUDA graph (%s), so it is timed eagerly", name,
                 f"{type(e).__name__}: {e}".splitlines()[0][:200])
        return fn
    return graph.replay


def choose(key: str, candidates: Mapping[str, Callable[[], Any]], default: str, device: torch.device,
           reps: int = 3, timer: Callable[[], float] = time.perf_counter, graphed: bool = False) -> str:
    """The name of the fastest of `candidates` (callables running the computation on inputs of the sizes
    that `key` stands for): the run's choice where its run file has one, else this machine's (measured
    once); `default` without measuring under RNMT_FASTPATH=default or when it is the only candidate.
    `graphed`: the computation runs inside a replayed CUDA graph, so on CUDA it is a key of its own, timed
    as replays."""
    if default not in candidates:
        raise ValueError(f"default {default!r} is not a candidate of {key}: {', '.join(candidates)}")
    if mode() == "default" or len(candidates) == 1:
        return default
    graphed = graphed and device.type == "cuda"
    if graphed:
        key = f"{key}, as a CUDA graph"
    section = machine(device)
    full = f"{section} | {key}"
    with _LOCK:
        if full in _CHOSEN:
            return _CHOSEN[full]
    fixed = _run_choices().get(key)
    if fixed in candidates:                   # the run's own choice, wherever it was measured
        winner = fixed
    else:
        winner = _machine_choice(section, key, candidates, default, device, reps, timer, graphed)
        path = run_path()
        if path is not None:
            kept = _first_written(path, "paths", key, winner, {("measured_on",): section})
            if kept != winner and kept in candidates:
                log.debug("fast path for %s: %s, as the run had taken it", key, kept)
                winner = kept
    with _LOCK:
        _CHOSEN[full] = winner
    return winner


def _machine_choice(section: str, key: str, candidates: Mapping[str, Callable[[], Any]], default: str,
                    device: torch.device, reps: int, timer: Callable[[], float], graphed: bool) -> str:
    """This machine's choice for `key`: the machine cache's, else measured now and kept there."""
    kept = _read_cache().get(section, {}).get(key)
    if kept in candidates:
        return kept
    start, depth = time.perf_counter(), getattr(_DEPTH, "n", 0)
    _DEPTH.n = depth + 1
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):   # training's RNG untouched
            times = timings(candidates, device, reps, timer, graphed)
    finally:
        _DEPTH.n = depth
    best = min(times, key=lambda name: times[name])
    winner = best if times[best] < (1 - MARGIN) * times[default] else default
    log.debug("fast path for %s: %s (%s)", key, winner,
             ", ".join(f"{name} {t * 1e3:.2f} ms" for name, t in times.items()))
    medians = {name: round(t * 1e3, 4) for name, t in times.items()}
    kept = _first_written(cache_path(), section, key, winner, {(MEDIANS, section): medians})
    if kept != winner and kept in candidates:
        log.debug("fast path for %s: %s, as another job measured first", key, kept)
        winner = kept
    if depth == 0:                    # a measurement inside another's is in the outer one's time already
        _SPENT[0] += time.perf_counter() - start
    return winner


def chosen() -> dict[str, str]:
    """This process's choices, `machine | key` → the candidate taken."""
    with _LOCK:
        return dict(_CHOSEN)


def adopt(choices: Mapping[str, str]) -> None:
    """Take `choices` (a checkpoint's `chosen()`) as this process's own: a resumed run takes the paths
    its first start took, whatever the cache file says now."""
    with _LOCK:
        _CHOSEN.update(choices)


def measuring_seconds() -> float:
    """Seconds this process has spent measuring candidates, for timed regions to leave out."""
    return _SPENT[0]


def lookup(cache: dict[Any, Any]) -> dict[Any, Any]:
    """Register a caller's own dict of choices (looked up before `choose`), so that `forget` clears it."""
    _CACHES.append(cache)
    return cache


def forget() -> None:
    """Drop this process's choices and its callers' lookups (the cache file stays): the next `choose` of
    each key reads the file or measures."""
    with _LOCK:
        _CHOSEN.clear()
        for cache in _CACHES:
            cache.clear()
