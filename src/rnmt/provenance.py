"""Which code produced a result, and on what: rnmt's version and, in a git checkout, its commit, recorded
in every metrics file (train.json, metrics.json, a bundle's manifest) so a table's numbers can be traced
back; and the machine and the computation paths a run took (`describe`, every metrics file's `hardware`)."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from rnmt import __version__

CHECKOUT = Path(__file__).resolve().parents[2]          # src/rnmt/ → the repository root


@lru_cache(maxsize=1)
def provenance() -> dict[str, Any]:
    """{"rnmt_version", "git_commit" (None outside a git checkout), "git_dirty" (uncommitted changes to
    tracked files; None outside a checkout)}."""
    commit = dirty = None
    if (CHECKOUT / ".git").exists():
        def git(*args: str) -> str | None:
            try:
                r = subprocess.run(["git", "-C", str(CHECKOUT), *args], capture_output=True, text=True, timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                return None
            return r.stdout.strip() if r.returncode == 0 else None

        commit = git("rev-parse", "HEAD")
        status = git("status", "--porcelain", "--untracked-files=no")
        dirty = bool(status) if status is not None and commit else None
    return {"rnmt_version": __version__, "git_commit": commit, "git_dirty": dirty}


@cache
def source_digest(*parts: str) -> str:
    """sha256 of rnmt's own source files (every .py under the package, or under `parts`: folders or files
    relative to it), by path and content: what a result that depends on that code alone can be keyed by,
    checkout or installed package alike."""
    root = Path(__file__).resolve().parent
    files = set()
    for part in parts or ("",):
        where = root / part
        if not where.exists():
            raise FileNotFoundError(f"{where}: no such part of rnmt's source")
        files |= {where} if where.is_file() else set(where.rglob("*.py"))
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def describe(device: Any) -> dict[str, Any]:
    """The machine a result was made on and the computation paths it took (every metrics file's
    `hardware`); torch is imported here, as the scoring jobs' environment records provenance without it."""
    import torch

    from rnmt.machine import allocator, fastpath, hardware, matmul

    info: dict[str, Any] = {
        "device": str(device),
        "cpu": hardware.cpu_model(),
        "cpu_family_model": hardware.cpu_family_model(),
        "cpu_isa": hardware.cpu_isa(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        # the 1-minute load average now (a training replaces it with its mean over the log steps): what
        # else shared the machine while the run was timed
        "load_avg": hardware.load_average(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "malloc_tuned": allocator.tuned,
        "matmul": matmul.mode(),           # how CPU float32 products are computed (rnmt.machine.matmul)
        # measure (each computation's path measured, or the run's own choice) or default (no measuring)
        "fast_path_mode": fastpath.mode(),
        # the paths measured fastest for this run's computations, "<machine> | <computation>: <path>" (a
        # list, so that runs.csv keeps it in one column)
        "fast_paths": [f"{key}: {path}" for key, path in fastpath.chosen().items()],
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info
