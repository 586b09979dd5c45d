"""What planning knows of the architectures without importing them: each one's model settings, and which
sets of model settings built. Every `snakemake` command plans the run (rnmt.planning.plan) and checks every
row against the architectures; importing them imports torch, 2-3 s of the command on a 2-core machine (half
of a `snakemake -n`, benchmarks/README.md). So what the registry says is kept per rnmt source and torch
version, in the folder of switch `model_catalog` (default ~/.cache/rnmt/models), and the registry is
imported only when either changes or settings not built before are checked."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from rnmt.io import InputError, atomic_writer
from rnmt.machine.switches import switch
from rnmt.provenance import source_digest


def _folder() -> Path:
    """This rnmt source's and torch version's folder of the catalog."""
    try:
        torch_version = version("torch")
    except PackageNotFoundError:
        torch_version = "none"
    key = hashlib.sha256(f"{source_digest()} {torch_version}".encode()).hexdigest()[:32]
    return (switch("model_catalog") or Path.home() / ".cache/rnmt/models") / key


def _write(path: Path, text: str) -> None:
    """`text` to `path` atomically (jobs of one run plan at once); where it cannot be written (a read-only or
    full disk), nothing is kept and the next command asks the registry again."""
    try:
        with atomic_writer(path) as f:
            f.write(text)
    except (OSError, InputError):
        pass


@cache
def architectures() -> dict[str, frozenset[str] | None]:
    """Every registered architecture and the model settings its constructor takes (None: any)."""
    path = _folder() / "architectures.json"
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        from rnmt.models.registry import MODELS, accepted_settings

        kept = {}
        for arch in sorted(MODELS):
            names = accepted_settings(arch)
            kept[arch] = None if names is None else sorted(names)
        _write(path, json.dumps(kept, indent=1))
    return {arch: None if names is None else frozenset(names) for arch, names in kept.items()}


def check_built(settings: list[dict[str, Any]], check: Callable[[], None]) -> None:
    """Run `check` (which builds models from `settings` and raises where one does not build) unless these
    settings built before with this source and torch; once it passes, they are noted as built."""
    key = hashlib.sha256(json.dumps(sorted(json.dumps(s, sort_keys=True, default=str) for s in settings))
                         .encode()).hexdigest()
    marker = _folder() / "built" / key
    if marker.is_file():
        return
    check()
    _write(marker, "")
