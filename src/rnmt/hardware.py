"""Where a run happened: device, CPU, thread count and library versions, recorded in every metrics file."""

from __future__ import annotations

import os
import platform
import resource
from typing import Any

import torch

from rnmt import allocator, matmul


def pick_device(requested: str = "auto", local_rank: int = 0) -> torch.device:
    """CUDA when present (the process's own GPU under torchrun), else the CPU."""
    if requested == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", local_rank)) % torch.cuda.device_count())
        return torch.device("cpu")
    return torch.device(requested)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe(device: torch.device) -> dict[str, Any]:
    info: dict[str, Any] = {
        "device": str(device),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "malloc_tuned": allocator.tuned,
        "matmul": matmul.mode(),           # how CPU float32 products are computed (rnmt.matmul)
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def peak_memory_mb(device: torch.device) -> float:
    """This process's peak memory: allocated on the GPU, resident on the CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
