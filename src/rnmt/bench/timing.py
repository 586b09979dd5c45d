"""What every benchmark shares: a synchronised median clock, the measured matrix-multiply peak and a
record of where the numbers were taken (device, threads, load).

Every timing: warm-up runs first, the device is synchronised around every timed run, start-up is
excluded, and the median of several repetitions is reported (benchmarks/README.md).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from rnmt import provenance
from rnmt.machine import hardware, matmul


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass(frozen=True)
class Timing:
    seconds: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


def measure(fn: Callable[[], Any], device: torch.device, warmup: int = 1, reps: int = 3) -> Timing:
    """Run `fn` `warmup` times untimed, then `reps` times timed (device synchronised before and after)."""
    if reps < 1:
        raise ValueError(f"reps must be at least 1, got {reps}")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return Timing(times)


SHAPES = ((1024, 1024, 1024), (2048, 2048, 2048), (4000, 1000, 4000))
QUICK_SHAPES = ((1024, 1024, 1024),)
GPU_SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192))


def matmul_peak(device: torch.device, shapes: tuple[tuple[int, int, int], ...] = SHAPES, reps: int = 3,
                route: str = "blas", dtype: torch.dtype = torch.float32) -> float:
    """This machine's matrix-multiply rate in `dtype` (float32 unless given) in GFLOP/s at the current thread
    count: the best median
    over products [m, k] × [k, n] of the given shapes (2mkn FLOPs each): square ones and the shape of a
    batch-80 × length-50 input projection at hidden 1000; on a GPU 4096² and 8192², since small products
    cannot fill it. `route`: torch's own product ("blas") or oneDNN's ("onednn", rnmt.machine.matmul)."""
    if device.type == "cuda":
        shapes = GPU_SHAPES
    best = 0.0
    for m, k, n in shapes:
        a = torch.randn(m, k, device=device, dtype=dtype)
        b = torch.randn(k, n, device=device, dtype=dtype)
        with matmul.backend(route):
            t = measure(lambda a=a, b=b: matmul.mm(a, b), device, warmup=1, reps=reps)
        best = max(best, 2 * m * k * n / t.median / 1e9)
    return best


def routes(device: torch.device) -> tuple[str, ...]:
    """The product routes a run can take on `device`: torch's own, and oneDNN's on a CPU that has it."""
    return ("blas", "onednn") if device.type == "cpu" and matmul.available() else ("blas",)


class Peak:
    """The matmul peak of a whole benchmark run: sampled at its start, between groups of measurements and
    at its end, keeping the best (on a shared machine a single sample taken while others compute would
    understate it, and every fraction of peak would be inflated). Every product route is sampled (on an
    AMD CPU torch's own BLAS reaches about half of what oneDNN does, and torch's nn.LSTM runs on oneDNN),
    and the peak is the best of them; `by_route` keeps each route's best."""

    def __init__(self, device: torch.device, quick: bool = False) -> None:
        self.device, self.shapes = device, QUICK_SHAPES if quick else SHAPES
        self.by_route = dict.fromkeys(routes(device), 0.0)
        self.load_start = load_average()
        self.sample()

    @property
    def best(self) -> float:
        return max(self.by_route.values())

    def sample(self, quick: bool = False) -> float:
        """Measure again (`quick`: the 1024² product only, cheap enough after every measurement)."""
        for route in self.by_route:
            rate = matmul_peak(self.device, QUICK_SHAPES if quick else self.shapes, route=route)
            self.by_route[route] = max(self.by_route[route], rate)
        return self.best


def load_average() -> float:
    """The 1-minute load average (other processes on the machine make CPU timings noisy), -1 if unknown."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return -1.0


def environment(device: torch.device, peak: Peak) -> dict[str, Any]:
    """Columns every result row carries (call it at the end of the run: the load then and at the start)."""
    info = provenance.describe(device)
    return {"device": info.get("gpu", info["device"]) if device.type == "cuda" else "cpu",
            "cpu": info["cpu"], "cpu_family_model": info["cpu_family_model"], "threads": info["torch_threads"],
            "torch": info["torch"],
            "peak_gflops": round(peak.best, 1),
            **{f"peak_{route}_gflops": round(rate, 1) for route, rate in peak.by_route.items()},
            "matmul": info["matmul"], "load_1min_start": round(peak.load_start, 2),
            "load_1min_end": round(load_average(), 2), "malloc_tuned": info["malloc_tuned"]}


def setup(device: str = "auto", threads: int = 0) -> torch.device:
    """Pick the device (CUDA when present) and fix the thread count for the whole run."""
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    return hardware.pick_device(device)
