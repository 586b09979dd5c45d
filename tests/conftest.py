import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def run_snakemake(args: list[str], cwd: Path, timeout: int = 900,
                  extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run this repository's Snakefile from `cwd` with the test's Python environment on PATH."""
    env = {**os.environ, **(extra_env or {})}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def root() -> Path:
    return ROOT


def jobs(dry_run_output: str) -> Counter[str]:
    """Job counts from the 'Job stats' block of a dry run."""
    lines = dry_run_output.split("Job stats:")[1].splitlines()
    counts: Counter[str] = Counter()
    for line in lines[3:]:
        parts = line.split()
        if len(parts) != 2 or parts[0] == "total":
            break
        counts[parts[0]] = int(parts[1])
    return counts


def greedy_loop(model, src, mask, steps: int) -> list[int]:
    """Greedy decoding of one padded sentence written out step by step (a reference for beam search)."""
    from rnmt.data.vocab import BOS_ID, EOS_ID

    state = model.start(src, mask)
    prev, out = torch.tensor([BOS_ID]), []
    for _ in range(steps):
        logp, state = model.step(prev, state)
        tok = int(logp.argmax(-1))
        if tok == EOS_ID:
            break
        out.append(tok)
        prev = torch.tensor([tok])
    return out
