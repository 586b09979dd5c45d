"""Where a run happened: device, CPU, thread count and library versions, recorded in every metrics file."""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import resource
from collections.abc import Iterator
from typing import Any

import torch


def pick_device(requested: str = "auto", local_rank: int = 0) -> torch.device:
    """CUDA when present (the process's own GPU under torchrun), else the CPU. A GPU picked becomes the
    process's current one: CUDA graphs record the current device's stream only, and kernels launch there."""
    if requested == "auto":
        if not torch.cuda.is_available():
            return torch.device("cpu")
        requested = "cuda"
    device = torch.device(requested)
    if device.type == "cuda":
        if device.index is None:         # "cuda": the process's own GPU, as for "auto"
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", local_rank)) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    return device


CPUINFO = "/proc/cpuinfo"


def _cpuinfo(key: str) -> str | None:
    """The first CPU's `key` line of Linux's /proc/cpuinfo (None elsewhere or where it has none)."""
    try:
        with open(CPUINFO, encoding="utf-8") as f:
            for line in f:
                name, colon, value = line.partition(":")
                if colon and name.strip() == key:
                    return value.strip()
    except OSError:
        pass
    return None


def load_average() -> float | None:
    """The machine's 1-minute load average (runnable processes, the caller's included; None where the
    system does not keep one): how much else a timed run shared the machine with."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def cpu_model() -> str:
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def cpu_family_model() -> str | None:
    """An x86 CPU's family and model numbers, 'family 25, model 17' (None where /proc/cpuinfo gives none):
    they name its microarchitecture where a virtual machine's model name does not, so that two CPU
    generations of one name are two machines for speeds and fast-path choices."""
    family, model = _cpuinfo("cpu family"), _cpuinfo("model")
    return f"family {family}, model {model}" if family and model else None


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (empty where /proc/cpuinfo is not there); read once."""
    return frozenset((_cpuinfo("flags") or "").split())


def cpu_isa() -> str:
    """The widest vector instructions the CPU has (avx512, avx2, or other): the kernels oneDNN runs, and so
    how a CPU's products round, follow it, whatever the CPU's model name says."""
    flags = cpu_flags()
    return "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "other"


def native_bf16(device: torch.device) -> bool:
    """Whether `device` multiplies bfloat16 in hardware: a CUDA GPU that supports it, or a CPU with
    AVX512-BF16 or AMX (elsewhere torch emulates bfloat16 on the CPU, slower than float32)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})


def autocast(device: torch.device, enabled: bool) -> torch.autocast:
    """Training's forward pass in bfloat16 autocast where `enabled` (see `bf16_training`)."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=enabled)


def tf32_on(device: torch.device | str, enabled: bool) -> bool:
    """Whether asking for TF32 products (`enabled`) makes them so on `device`: on CUDA only."""
    return enabled and torch.device(device).type == "cuda"


@contextlib.contextmanager
def tf32_products(device: torch.device, enabled: bool) -> Iterator[bool]:
    """Within the block, the float32 products torch hands to cuBLAS on TF32 tensor cores where `enabled` and
    `device` is CUDA (operands rounded to 10 bits of mantissa, float32 sums); yields whether they are. The flag
    is the process's (`torch.backends.cuda.matmul.allow_tf32`: the API of the cuDNN flag that cells/base.py
    `cudnn_in_float32` sets, since torch refuses to read a flag set through both its old and its new API),
    restored on leaving. cuDNN's recurrences and rnmt's Triton kernels keep their own precision; a CUDA graph
    holds the products' precision as it was at its capture (rnmt.decode.graphs keys its graphs by it)."""
    on = tf32_on(device, enabled)
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = on
    try:
        yield on
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


# Below this many parameters a CPU model's products are too small for bfloat16 to pay for its casts
# (measured on RNNSearch+GRU at three sizes: benchmarks/README.md, "Training on the CPU").
CPU_BF16_MIN_PARAMS = 1_500_000


def bf16_training(device: torch.device, amp: bool, params: int) -> bool:
    """Whether training autocasts to bfloat16: the `amp` setting asks for it, `device` multiplies bfloat16
    in hardware and, on a CPU, the model has at least CPU_BF16_MIN_PARAMS parameters."""
    if not (amp and native_bf16(device)):
        return False
    return device.type != "cpu" or params >= CPU_BF16_MIN_PARAMS


def after_failed_capture(device: torch.device) -> None:
    """Leave `device` usable for eager work after a CUDA graph capture that failed. torch keeps the GPU's
    default random generator marked as capturing then, and every later random draw (dropout) fails with
    "Offset increment outside graph capture"; a clone of its state (the same seed and offset) carries no such
    mark, so it takes the generator's place."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    generator = torch.cuda.default_generators[index]
    generator.graphsafe_set_state(generator.clone_state())
    torch.cuda.synchronize(device)


_CAPTURE_STREAMS: dict[int, torch.cuda.Stream] = {}


@contextlib.contextmanager
def capture(graph: torch.cuda.CUDAGraph, device: torch.device, pool: Any = None) -> Iterator[None]:
    """`torch.cuda.graph(graph, pool=pool)` on a capture stream of `device`'s own, leaving the device as it
    found it where the capture fails. torch.cuda.graph captures on one stream of whichever GPU was current
    when it first ran (a model on another GPU would record an empty graph), and where ending a capture
    raises (as it does after any failure inside the block, which invalidates the capture) it gives back
    neither the current stream nor a usable random generator (`after_failed_capture`). A pool that a failed
    capture recorded into stays marked as recording: the next capture takes a new one
    (`torch.cuda.graph_pool_handle`)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _CAPTURE_STREAMS:
        _CAPTURE_STREAMS[index] = torch.cuda.Stream(index)
    before = torch.cuda.current_stream(index)
    try:
        with torch.cuda.device(index), torch.cuda.graph(graph, pool=pool, stream=_CAPTURE_STREAMS[index]):
            yield
    except BaseException:
        torch.cuda.set_stream(before)
        after_failed_capture(torch.device("cuda", index))
        raise


def peak_memory_mb(device: torch.device) -> float:
    """This process's peak memory: allocated on the GPU, resident on the CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
