"""GPU ids for local multi-GPU runs: a pool of slots, one lock file per GPU.

`snakemake --cores N --resources gpu=K` only counts GPUs; it does not say which job gets which one.
A GPU job leases `n` slots by taking an exclusive `flock` on `gpu<id>.lock` in the pool folder, and
runs with CUDA_VISIBLE_DEVICES set to the leased ids. The kernel drops a lock when its holder exits,
so a crashed or killed job frees its GPUs without any clean-up. Under SLURM the allocation already
sets CUDA_VISIBLE_DEVICES, and no pool is used.

A model far smaller than its GPU (Multi30k's 256-wide RNNs on a GPU of 80 GB or more) leaves the GPU
idle between the small kernels of its recurrence, so several such jobs can share one GPU:
$RNMT_JOBS_PER_GPU=k gives every GPU k slots (`gpu<id>.lock`, `gpu<id>.1.lock`, ...). Slots are handed
out so that jobs spread over the GPUs before doubling up, and a job of n > 1 GPUs always gets n
different GPUs.
"""

from __future__ import annotations

import logging
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from rnmt.io import try_lock
from rnmt.machine.switches import switch, variable

log = logging.getLogger(__name__)
POOL_ENV = variable("gpu_pool")         # the pool folder; shared by every run on the machine by default
SHARE_ENV = variable("jobs_per_gpu")    # jobs that may share one GPU (default 1: a GPU per job)


def default_pool() -> Path:
    return switch("gpu_pool") or Path(tempfile.gettempdir()) / f"rnmt-gpu-slots-{os.getuid()}"


def jobs_per_gpu() -> int:
    """$RNMT_JOBS_PER_GPU as a positive integer (1 when unset)."""
    return switch("jobs_per_gpu")


def slot_file(pool: Path, gpu: str, slot: int) -> Path:
    return pool / (f"gpu{gpu}.lock" if slot == 0 else f"gpu{gpu}.{slot}.lock")


def visible_gpus() -> list[str]:
    """The GPU ids jobs may use: CUDA_VISIBLE_DEVICES when set, else every GPU nvidia-smi lists."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [x.strip() for x in env.split(",") if x.strip()]
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


@dataclass
class Lease:
    """Leased GPU ids; the locks are held until release() or until this process exits."""

    ids: list[str]
    _fds: list[int] = field(default_factory=list, repr=False)

    def release(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def acquire(n: int, gpus: list[str], pool: Path | None = None, timeout: float | None = None,
            poll: float = 1.0, per_gpu: int | None = None) -> Lease:
    """Lease `n` different GPUs of `gpus`, one slot on each, waiting while other jobs hold the slots (up to
    `timeout` seconds, None: forever). `per_gpu` slots a GPU (default $RNMT_JOBS_PER_GPU, else 1)."""
    if n > len(gpus):
        raise RuntimeError(f"{n} GPUs asked for, but only {len(gpus)} are visible ({','.join(gpus) or 'none'}): "
                           "lower the rule's gpu resource or run where more GPUs are")
    per_gpu = jobs_per_gpu() if per_gpu is None else per_gpu
    pool = Path(pool or default_pool())
    pool.mkdir(parents=True, exist_ok=True)
    start, warned = time.monotonic(), False
    while True:
        held: dict[str, int] = {}
        for slot in range(per_gpu):           # slot 0 of every GPU first: jobs spread before they share
            for gpu in gpus:
                if gpu in held:
                    continue
                fd = try_lock(slot_file(pool, gpu, slot))
                if fd is not None:
                    held[gpu] = fd
                    if len(held) == n:
                        return Lease(list(held), list(held.values()))
        for fd in held.values():              # not enough free: give back what we took, try again later
            os.close(fd)
        if timeout is not None and time.monotonic() - start >= timeout:
            raise TimeoutError(f"no {n} free GPU slots in {pool} after {timeout:.0f} s (other jobs hold them)")
        if not warned:
            log.warning("waiting for %d free GPU slot(s) in %s", n, pool)
            warned = True
        time.sleep(poll)
