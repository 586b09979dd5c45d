"""How `rnmt train --gpus N` runs: on its own GPU ids, and as N torch.distributed processes when N > 1.

- Locally (no SLURM job) with GPUs: N ids are leased from the slot pool (rnmt.cluster.gpus) and set as
  CUDA_VISIBLE_DEVICES, so that side-by-side Snakemake jobs never share a GPU.
- In a SLURM job the allocation sets CUDA_VISIBLE_DEVICES; it is used as it is.
- N > 1: the command is rerun under torchrun (`python -m torch.distributed.run --standalone`) with N
  processes, one per GPU (NCCL), or N CPU processes (gloo) where there is no GPU. SIGTERM/SIGUSR1 are
  passed on, and a signalled run exits 75 ("rerun to resume") like a single-process one.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from rnmt.cluster import gpus as slots

log = logging.getLogger(__name__)
EXIT_INTERRUPTED = 75       # EX_TEMPFAIL: the checkpoint is saved, a rerun resumes


def is_worker() -> bool:
    """True inside a torchrun worker (the launcher sets WORLD_SIZE)."""
    return "WORLD_SIZE" in os.environ


def exit_worker(code: int = 0) -> None:
    """End a torchrun worker that has finished its work and written its files: flush the logs and leave
    without running the interpreter's teardown. Left to it, a worker whose gloo process group was still
    alive sometimes aborted at exit ("terminate called without an active exception", SIGABRT), after
    its training had finished and its model was saved; torchrun then failed the whole job and Snakemake
    deleted the finished outputs (tests/test_multigpu.py, about 1 run in 10, before this and with
    `destroy_process_group` alike)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def lease_gpus(n: int) -> slots.Lease | None:
    """Lease n GPU ids for this process (and its children) unless SLURM already assigned them."""
    if n < 1 or os.environ.get("SLURM_JOB_ID"):
        return None
    visible = slots.visible_gpus()
    if not visible:
        log.warning("%d GPU(s) asked for but none is visible: running on the CPU", n)
        return None
    lease = slots.acquire(n, visible)
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(lease.ids)
    log.info("GPU slot(s) %s leased from %s", ",".join(lease.ids), slots.default_pool())
    return lease


def torchrun_command(nproc: int, rnmt_args: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", "rnmt", *rnmt_args]


def run_distributed(nproc: int, rnmt_args: Sequence[str]) -> int:
    """Run `python -m rnmt <rnmt_args>` as nproc torchrun workers; the exit status to report."""
    proc = subprocess.Popen(torchrun_command(nproc, rnmt_args))
    signalled: list[int] = []

    def forward(signum: int, frame: Any) -> None:
        signalled.append(signum)
        proc.send_signal(signum)

    old = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGUSR1)}
    try:
        rc = proc.wait()
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    if rc != 0 and signalled:
        log.warning("stopped by signal %d: rerun the same command to resume from last.pt", signalled[0])
        return EXIT_INTERRUPTED
    return rc
