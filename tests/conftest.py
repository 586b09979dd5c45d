import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_snakemake(args: list[str], cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    """Run this repository's Snakefile from `cwd` with the test's Python environment on PATH."""
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def root() -> Path:
    return ROOT
