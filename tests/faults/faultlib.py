"""Helpers of the fault-injection suite: fill a disk, run the rnmt command as a rule would."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def fill(disk: Path, leave: int) -> Path:
    """Fill `disk` until about `leave` bytes are free; returns the filler file (delete it to free space)."""
    filler = disk / "filler"
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    with open(filler, "wb") as f, contextlib.suppress(OSError):
        f.write(b"\0" * max(free - leave, 0))
    return filler


def rnmt(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run `python -m rnmt ARGS` from this checkout's src/ (what a Snakemake rule runs)."""
    full = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "rnmt", *args], capture_output=True, text=True, env=full,
                          timeout=timeout)


def log_messages(stderr: str) -> list[str]:
    """The messages of rnmt's INFO log lines in a job's stderr."""
    return [line.split(" INFO: ", 1)[1] for line in stderr.splitlines() if " INFO: " in line]
