"""Every environment variable rnmt reads (`RNMT_*`), written once: its type, default and meaning, and the
check of a value with a message that names the variable and what it takes. Modules read them through
`Switches.read()` (all of them) or `switch(name)` (one, on paths taken at every batch), the environment as
it is at the call, never `os.environ` directly.

Which code runs is decided by three of them, each over the one before: `RNMT_FASTPATH` (how a computation
with several paths picks one), then within the candidates `RNMT_MATMUL` (the CPU's route for float32
products, fixed when rnmt.machine.matmul is imported), `RNMT_TRITON` (whether CUDA recurrences may take
Triton kernels) and `RNMT_ATR_PERSISTENT` (whether ATR's may take its persistent ones). The run's file of
choices (`RNMT_FASTPATH_RUN`) fixes what was picked for every job.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from rnmt.io import InputError


def _switch(default: Any, meaning: str, choices: tuple[str, ...] = ()) -> Any:
    return field(default=default, metadata={"meaning": meaning, "choices": choices})


@dataclass(frozen=True)
class Switches:
    fastpath: str = _switch("measure", "how a computation with several paths picks one: measure (time the "
                            "candidates once per machine and run, keep the fastest) or default (each "
                            "computation's own default, no timing)", ("measure", "default"))
    fastpath_cache: Path | None = _switch(None, "the machine's file of measured choices (default "
                                          "~/.cache/rnmt/fastpath.json)")
    model_catalog: Path | None = _switch(None, "the folder where planning keeps each architecture's model "
                                         "settings and the settings that built, per rnmt source and torch version "
                                         "(default ~/.cache/rnmt/models; rnmt.models.catalog)")
    fastpath_run: Path | None = _switch(None, "the run's file of choices (results/<run>/fast_paths.json, set "
                                        "by the Snakefile): every job of the run takes the paths it holds")
    matmul: str = _switch("auto", "the CPU's route for float32 products: auto (oneDNN where it is faster), "
                          "onednn or blas; read once, when rnmt.machine.matmul is imported", ("auto", "onednn", "blas"))
    triton: bool = _switch(True, "0: CUDA recurrences never take the Triton kernels")
    atr_persistent: str = _switch("auto", "ATR's Triton recurrence as one persistent kernel per direction where its "
                                  "programs fit the GPU at once (rnmt.cells.triton.atr): auto (timed against the "
                                  "per-step kernels as a fast path, rnmt.machine.fastpath), 1 (always where it fits) "
                                  "or 0 (never)", ("auto", "0", "1"))
    malloc_tuning: bool = _switch(True, "0: leave glibc's allocator as it is (rnmt.machine.allocator)")
    allow_unpinned: bool = _switch(False, "1: download files without a pinned sha256 (rnmt.data.download)")
    registry: Path | None = _switch(None, "the corpus registry instead of workflow/corpora.yaml (a site's "
                                    "mirror)")
    gpu_pool: Path | None = _switch(None, "the folder of GPU slot locks shared by the machine's jobs "
                                    "(rnmt.cluster.gpus)")
    jobs_per_gpu: int = _switch(1, "training jobs that may share one GPU")
    job: bool = _switch(False, "set by the Snakefile in every job: warnings also go to Snakemake's console")

    @classmethod
    def read(cls, environ: Mapping[str, str] | None = None) -> Switches:
        """The switches as `environ` (default: the process' environment) sets them, each checked."""
        env = os.environ if environ is None else environ
        return cls(**{f.name: _parse(f, env[variable(f.name)]) for f in fields(cls) if env.get(variable(f.name))})


_FIELDS = {f.name: f for f in fields(Switches)}


def switch(name: str) -> Any:
    """One switch as the environment sets it now, read and checked alone (what a path taken at every
    batch asks: `Switches.read()` reads them all)."""
    f = _FIELDS[name]
    raw = os.environ.get(variable(name), "")
    return _parse(f, raw) if raw else f.default


def _parse(f: Any, raw: str) -> Any:
    """A set variable's value as its field's type, or an InputError naming the variable and what it takes."""
    name, meaning, choices = variable(f.name), f.metadata["meaning"], f.metadata["choices"]
    if choices and raw not in choices:
        raise InputError(f"{name}={raw!r}: valid values are {', '.join(choices)} ({meaning})")
    if f.type in ("bool", bool):
        if raw not in ("0", "1"):
            raise InputError(f"{name}={raw!r}: give 0 or 1 ({meaning})")
        return raw == "1"
    if f.type == "int":
        if not raw.strip().isdigit() or int(raw) < 1:
            raise InputError(f"{name}={raw!r} must be a whole number >= 1 ({meaning})")
        return int(raw)
    return Path(raw) if "Path" in str(f.type) else raw


def variable(name: str) -> str:
    """A switch's environment variable: fastpath -> RNMT_FASTPATH."""
    return f"RNMT_{name.upper()}"


def describe() -> list[tuple[str, str, str]]:
    """(variable, default, meaning) of every switch, for the documentation."""
    return [(variable(f.name), "" if f.default is None else str(int(f.default) if isinstance(f.default, bool)
                                                                  else f.default), f.metadata["meaning"])
            for f in fields(Switches)]
