"""What every benchmark shares: a synchronised median clock, the measured matrix-multiply peak and a
record of where the numbers were taken (device, threads, load).

Timings follow DESIGN.md's speed rules: warm-up runs first, the device is synchronised around every
timed run, start-up is excluded, and the median of several repetitions is reported.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from rnmt import hardware


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


def matmul_peak(device: torch.device, sizes: tuple[int, ...] = (1024, 2048), reps: int = 3) -> float:
    """This machine's float32 matrix-multiply rate in GFLOP/s at the current thread count: the best
    median over square products of the given sizes (2n³ FLOPs each; on a GPU 4096 and 8192, since
    small products cannot fill it)."""
    if device.type == "cuda":
        sizes = (4096, 8192)
    best = 0.0
    for n in sizes:
        a = torch.randn(n, n, device=device)
        b = torch.randn(n, n, device=device)
        t = measure(lambda a=a, b=b: torch.mm(a, b), device, warmup=1, reps=reps)
        best = max(best, 2 * n**3 / t.median / 1e9)
    return best


class Peak:
    """The matmul peak of a whole benchmark run: sampled at its start, between groups of measurements and
    at its end, keeping the best (on a shared machine a single sample taken while others compute would
    understate it, and every fraction of peak would be inflated)."""

    def __init__(self, device: torch.device, quick: bool = False) -> None:
        self.device, self.sizes, self.best = device, (1024,) if quick else (1024, 2048), 0.0
        self.load_start = load_average()
        self.sample()

    def sample(self) -> float:
        self.best = max(self.best, matmul_peak(self.device, self.sizes))
        return self.best


def load_average() -> float:
    """The 1-minute load average (other processes on the machine make CPU timings noisy), -1 if unknown."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return -1.0


def environment(device: torch.device, peak: Peak) -> dict[str, Any]:
    """Columns every result row carries (call it at the end of the run: the load then and at the start)."""
    info = hardware.describe(device)
    return {"device": info.get("gpu", info["device"]) if device.type == "cuda" else "cpu",
            "cpu": info["cpu"], "threads": info["torch_threads"], "torch": info["torch"],
            "peak_gflops": round(peak.best, 1), "load_1min_start": round(peak.load_start, 2),
            "load_1min_end": round(load_average(), 2)}


def setup(device: str = "auto", threads: int = 0) -> torch.device:
    """Pick the device (CUDA when present) and fix the thread count for the whole run."""
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    return hardware.pick_device(device)
