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

Where the time goes: each kernel (CUDA, its device time) or operator (CPU, its own CPU time) is put in
a kind by its name (`KINDS`, first match), and `Trace.top` names the kinds that took the most of it, so a
benchmark row says whether the products, the search's top-k or the small element-wise kernels dominate.
Which operators launch a decoder step's kernels: each kernel counts for the operator that launched it (the
profiler links the two; a kernel launched outside any operator, such as a Triton kernel, for its own name),
and `StepProfile.by_op` lists what one more target word adds by operator, the list to shorten first.
Which kernels take the time: `Trace.heaviest` names the kernels (operators on a CPU) with the most device
(own CPU) time, summed over their launches, with their launch counts: where a replayed CUDA graph, which
launches without the host, spends its step.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from rnmt.bench.timing import sync

# What a kernel or operator does, from lower-cased fragments of its name, the first kind that matches
# (cuBLAS's gemm kernels are named sgemm, xmma/cutlass gemm or nvjet by card and version; torch's top-k
# runs radix-select and sort kernels). A kernel named by a bare identifier that is no product is a Triton
# kernel (rnmt's are named by their functions: atr_step_forward, attention_step_backward, ...), since
# torch's own kernels carry their C++ signatures and copies their direction.
MATMUL = ("gemm", "cutlass", "xmma", "nvjet", "aten::mm", "aten::matmul", "aten::linear", "aten::addmm",
          "aten::bmm", "aten::baddbmm", "aten::addbmm", "mkldnn", "onednn")
# CPU operators that only make views or allocate (on CUDA they launch nothing): host time, no arithmetic
VIEWS = frozenset(f"aten::{op}" for op in (
    "as_strided", "slice", "view", "select", "empty", "empty_strided", "empty_like", "unsqueeze", "squeeze", "t",
    "transpose", "reshape", "expand", "permute", "detach", "alias", "contiguous", "unbind", "split", "chunk",
    "narrow", "resolve_conj", "resolve_neg", "_unsafe_view", "_reshape_alias", "result_type"))
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("top-k/sort", ("topk", "sort", "radix", "kthvalue")),
    ("softmax", ("softmax",)),
    ("gather/index", ("index", "gather", "scatter", "embedding")),
    ("copy/fill", ("memcpy", "memset", "copy", "fill", "aten::cat", "catarray")),
    ("reduce", ("reduce", "aten::sum", "aten::max", "aten::amax", "aten::min", "aten::argmax", "norm")),
    ("element-wise", ("elementwise", "aten::add", "aten::sub", "aten::mul", "aten::div", "aten::tanh",
                      "aten::sigmoid", "aten::exp", "aten::log", "aten::where", "aten::masked_fill",
                      "aten::clamp", "aten::neg", "aten::rsub", "aten::eq", "aten::ne", "aten::lt",
                      "aten::gt", "aten::le", "aten::ge", "aten::logical", "aten::bitwise", "aten::remainder",
                      "aten::floor_divide", "aten::abs", "aten::arange", "aten::relu", "aten::pow")),
)


def kind(name: str) -> str:
    """What the kernel or operator `name` does: "matmul", "triton", "views/allocation", a `KINDS` entry,
    or "other"."""
    low = name.lower()
    if any(f in low for f in MATMUL):
        return "matmul"
    if name in VIEWS:
        return "views/allocation"
    if name.isidentifier():
        return "triton"
    return next((k for k, fragments in KINDS if any(f in low for f in fragments)), "other")


@dataclass(frozen=True)
class Trace:
    launches: int                 # kernels on CUDA, leaf operators on a CPU
    busy_seconds: float           # union of the kernels' intervals on the device (0 on a CPU)
    by_kind: tuple[tuple[str, float], ...] = ()   # seconds by kind: device time (CUDA), own CPU time; largest first
    by_op: tuple[tuple[str, int], ...] = ()       # launches by the operator that launched them; most first
    by_name: tuple[tuple[str, float, int], ...] = ()   # (kernel or operator, seconds, launches); most time first

    def heaviest(self, n: int = 10) -> str:
        """The `n` kernels (operators) that took the most time, each with its microseconds and launches:
        "nvjet_tst_64x8_... 812 us x 58; atr_step_forward 402 us x 30; ..." (names cut at NAME_CHARS)."""
        return "; ".join(f"{name[:NAME_CHARS]} {seconds * 1e6:.0f} us x {count}"
                         for name, seconds, count in self.by_name[:n])

    def top(self, n: int = 3) -> str:
        """The `n` kinds that took the most time, with their shares: "matmul 61%, top-k/sort 12%, ..."."""
        total = sum(s for _, s in self.by_kind)
        if total <= 0:
            return ""
        return ", ".join(f"{k} {100 * s / total:.0f}%" for k, s in self.by_kind[:n])


def _by_kind(named_seconds: list[tuple[str, float]]) -> tuple[tuple[str, float], ...]:
    totals: dict[str, float] = {}
    for name, seconds in named_seconds:
        k = kind(name)
        totals[k] = totals.get(k, 0.0) + seconds
    return tuple(sorted(totals.items(), key=lambda item: -item[1]))


def busy_fraction(busy_seconds: float, wall_seconds: float) -> float | str:
    """The device-busy share of a run's unprofiled wall time, at most 1; "" where nothing ran on a device."""
    return round(min(1.0, busy_seconds / wall_seconds), 3) if busy_seconds else ""


def _by_name(named_seconds: list[tuple[str, float]]) -> tuple[tuple[str, float, int], ...]:
    seconds: Counter[str] = Counter()
    launches: Counter[str] = Counter()
    for name, t in named_seconds:
        seconds[name] += t
        launches[name] += 1
    return tuple(sorted(((name, t, launches[name]) for name, t in seconds.items()), key=lambda item: -item[1]))


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
        by_op: Counter[str] = Counter()
        launched: Counter[str] = Counter()
        for e in events:
            if e.device_type == DeviceType.CPU and e.kernels:
                by_op[e.name] += len(e.kernels)
                launched.update(k.name for k in e.kernels)
        by_op.update(Counter(e.name for e in kernels) - launched)       # kernels of no operator, by name
        timed = [(e.name, e.time_range.elapsed_us() / 1e6) for e in kernels]
        return Trace(len(kernels), _merged_seconds([(e.time_range.start, e.time_range.end) for e in kernels]),
                     _by_kind(timed), _most(by_op), _by_name(timed))
    leaves = [e for e in events if e.device_type == DeviceType.CPU and not e.cpu_children
              and e.name.startswith("aten::")]
    # time by kind from every operator's own time (a product's operator is no leaf: it calls small ones)
    ops = [(e.name, e.self_cpu_time_total / 1e6) for e in events if e.device_type == DeviceType.CPU and "::" in e.name]
    return Trace(len(leaves), 0.0, _by_kind(ops), _most(Counter(e.name for e in leaves)), _by_name(ops))


def _most(counts: Counter[str]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


@dataclass(frozen=True)
class StepProfile:
    forward_per_step: float       # launches one more target word adds to the forward pass
    backward_per_step: float      # ... to the rest of the training step (backward, clipping, update)
    forward_launches: int         # the whole forward pass at the longer target length
    step_launches: int            # the whole training step at the longer target length
    busy_seconds: float           # device busy time of the whole step at the longer length
    time_by_kind: str = ""        # the kinds that took most of that step's time (Trace.top)
    by_op: tuple[tuple[str, float], ...] = ()   # launches one more target word adds, by operator; most first

    def row(self, step_seconds: float) -> dict[str, Any]:
        """Columns for a benchmark row, given the step's unprofiled wall time."""
        return {"kernels_per_decoder_step": round(self.forward_per_step + self.backward_per_step, 1),
                "kernels_per_step_forward": round(self.forward_per_step, 1),
                "kernels_per_step_backward": round(self.backward_per_step, 1),
                "kernels_per_training_step": self.step_launches,
                "gpu_busy_fraction": busy_fraction(self.busy_seconds, step_seconds),
                "time_by_kind": self.time_by_kind,
                "kernels_per_decoder_step_by_op": ", ".join(f"{op} {n:g}" for op, n in self.by_op[:BY_OP])}


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
    added = Counter(dict(s2.by_op))
    added.subtract(dict(s1.by_op))
    by_op = sorted(((op, round(n / extra, 2)) for op, n in added.items() if n > 0),
                   key=lambda item: (-item[1], item[0]))
    return StepProfile(fwd, rest, f2.launches, s2.launches, s2.busy_seconds, s2.top(), tuple(by_op))


BY_OP = 12             # operators a benchmark row names with the launches a decoder step adds
NAME_CHARS = 60        # of a kernel's name in `Trace.heaviest` (cuBLAS's and torch's carry long signatures)
