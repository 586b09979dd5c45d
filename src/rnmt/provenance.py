"""Which code produced a result: rnmt's version and, in a git checkout, its commit, recorded in every
metrics file (train.json, metrics.json, a bundle's manifest) so a table's numbers can be traced back."""

from __future__ import annotations

import subprocess
from functools import lru_cache
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
