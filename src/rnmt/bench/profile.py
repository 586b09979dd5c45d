"""Where a training step's time goes: kernels per decoder step, how busy the device is, from torch's profiler.

A recurrent decoder steps once per target word, so its cost has a part that grows with the target length
and a part that does not (the encoder, the output layer's setup, the optimizer). Profiling one step at two
target lengths and taking the difference per extra word isolates the decoder step: `per_decoder_step`
counts what one more target word adds to the forward pass and to the rest of the step (backward, clipping,
the optimizer update).

What is counted as a launch: on CUDA each kernel the device ran (copies and fills included, as each costs
a launch); on a CPU, where nothing is launched, each leaf operator (a profiler event without operator
children), the closest thing to a kernel there. The device-busy fraction is the union of the kernels'
device-time intervals over the step's wall time measured without the profiler (the profiler slows the host,
not the device).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from rnmt.bench.timing import sync


@dataclass(frozen=True)
class Trace:
    launches: int                 # kernels on CUDA, leaf operators on a CPU
    busy_seconds: float           # union of the kernels' intervals on the device (0 on a CPU)


def _merged_seconds(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end] intervals given in microseconds, in seconds."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total / 1e6


def trace(fn: Callable[[], Any], device: torch.device) -> Trace:
    """Run `fn` once under torch's profiler and count what it launched."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sync(device)
    with profile(activities=activities) as prof:
        fn()
        sync(device)
    events = prof.events()
    if device.type == "cuda":
        kernels = [e for e in events if e.device_type == DeviceType.CUDA]
        return Trace(len(kernels), _merged_seconds([(e.time_range.start, e.time_range.end) for e in kernels]))
    leaves = [e for e in events if e.device_type == DeviceType.CPU and not e.cpu_children
              and e.name.startswith("aten::")]
    return Trace(len(leaves), 0.0)


@dataclass(frozen=True)
class StepProfile:
    forward_per_step: float       # launches one more target word adds to the forward pass
    backward_per_step: float      # ... to the rest of the training step (backward, clipping, update)
    forward_launches: int         # the whole forward pass at the longer target length
    step_launches: int            # the whole training step at the longer target length
    busy_seconds: float           # device busy time of the whole step at the longer length

    def row(self, step_seconds: float) -> dict[str, Any]:
        """Columns for a benchmark row, given the step's unprofiled wall time."""
        return {"kernels_per_decoder_step": round(self.forward_per_step + self.backward_per_step, 1),
                "kernels_per_step_forward": round(self.forward_per_step, 1),
                "kernels_per_step_backward": round(self.backward_per_step, 1),
                "kernels_per_training_step": self.step_launches,
                "gpu_busy_fraction": round(min(1.0, self.busy_seconds / step_seconds), 3) if self.busy_seconds
                else ""}


def step_profile(forward: Callable[[int], Any], step: Callable[[int], Any], lengths: tuple[int, int],
                 device: torch.device) -> StepProfile:
    """Profile `forward(T)` (the forward pass at target length T) and `step(T)` (a whole training step) at
    the two `lengths`, each once after one untraced run (so one-time costs stay out)."""
    short, long = lengths
    if long <= short:
        raise ValueError(f"step_profile needs two increasing target lengths, got {lengths}")
    counts = {}
    for T in lengths:
        forward(T)
        f = trace(lambda T=T: forward(T), device)
        step(T)
        s = trace(lambda T=T: step(T), device)
        counts[T] = (f, s)
    (f1, s1), (f2, s2) = counts[short], counts[long]
    extra = long - short
    fwd = (f2.launches - f1.launches) / extra
    rest = ((s2.launches - f2.launches) - (s1.launches - f1.launches)) / extra
    return StepProfile(fwd, rest, f2.launches, s2.launches, s2.busy_seconds)
