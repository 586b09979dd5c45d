"""Triton kernels for the recurrences of cells on CUDA (ATR, GRU, SRU, SR-NMT), one file a cell named after
it (`<cell>.py`: its kernels, its autograd function or `sequence`, its `KERNELS` and launch `BLOCK`) beside
what they share (`common.py`) and the row kernels of DTMT's gated cells (`gated.py`: the L-GRU, LAU, T-GRU
and gate-normalised GRU, whose step kernels share cells/gru.py's `GatedKernel`), and when the cells use them.

A cell's `sequence` asks `triton_path(tensor, cell)`: it returns the cell's module when the tensor is on
CUDA, is float32 or float64, the environment does not say `RNMT_TRITON=0`, and triton imports (CUDA builds
of torch on Linux ship it); otherwise None, and the cell takes its CPU path (cells/kernel.py,
cells/scan.py). triton is imported on first use only, so CPU runs never load it. A new cell's kernels are
a new file here; `CELLS` finds it, and the tests run it through triton's interpreter.

Tests run the kernels on CPU tensors through triton's interpreter: `TRITON_INTERPRET=1` in the
environment before the kernels are first imported (in practice a fresh process), and `force_on_cpu()`
around the code (tests/test_cells_triton.py).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import ModuleType

import torch
from torch import Tensor

from rnmt.machine.switches import switch

_FORCE: ContextVar[bool] = ContextVar("rnmt_triton_on_cpu", default=False)
DTYPES = (torch.float32, torch.float64)
# cells with kernels; `common` is what they share and `gated` the row kernels of DTMT's gated cells' step
# kernels (the L-GRU, LAU, T-GRU and the gate-normalised GRU: cells/gru.py `GatedKernel`)
CELLS = tuple(m.name for m in pkgutil.iter_modules(__path__) if m.name not in ("common", "gated"))


@functools.cache
def imported(module: str) -> ModuleType | None:
    """The Triton kernels' module `module` (a dotted name; importing triton and compiling nothing yet; once);
    None without triton."""
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def load(cell: str) -> ModuleType | None:
    """rnmt.cells.triton.<cell> (`imported`)."""
    return imported(f"rnmt.cells.triton.{cell}")


def available() -> bool:
    """Whether triton imports here."""
    return all(load(cell) is not None for cell in (*CELLS, "gated"))


def enabled() -> bool:
    """False when the environment sets RNMT_TRITON=0 (read at every call)."""
    return switch("triton")


def wanted(x: Tensor) -> bool:
    """Whether work on `x` should run as Triton kernels: on CUDA (or forced, in tests), float32 or float64,
    and not switched off."""
    return (x.is_cuda or _FORCE.get()) and x.dtype in DTYPES and enabled()


def triton_path(x: Tensor, cell: str) -> ModuleType | None:
    """The cell's Triton module if its recurrence over `x` should run as Triton kernels, else None."""
    return load(cell) if wanted(x) else None


def kernels_for(x: Tensor, module: str) -> ModuleType | None:
    """The Triton kernels' module `module` (the models' and the search's, outside this package) if work on `x`
    should run as Triton kernels and triton imports, else None."""
    return imported(module) if wanted(x) else None


@contextmanager
def force_on_cpu() -> Iterator[None]:
    """For tests only: within the block, CPU tensors take the Triton path too. The kernels then run only
    if triton's interpreter was switched on (TRITON_INTERPRET=1 before `load` first imported the kernels)."""
    token = _FORCE.set(True)
    try:
        yield
    finally:
        _FORCE.reset(token)


def uses_triton(t: Tensor) -> bool:
    """Whether the autograd graph behind `t` contains one of the Triton functions (tests and the benchmark's
    `path` column use it to see which path a cell took)."""
    return kind(t) is not None


def kind(t: Tensor, inputs: tuple[Tensor | None, ...] = ()) -> str | None:
    """"Triton" where the autograd graph behind `t` contains one of the Triton functions or a chained loop of step
    kernels that ran on their row kernels (cells/kernel.py `StepSequence`), "Triton, persistent"
    where one of them ran persistent kernels (ATR's), None where none: what a run records of its path. The walk
    stops at `inputs` (a cell's input and initial state), so work before them (another cell's) does not count."""
    seen = {x.grad_fn for x in inputs if x is not None and x.grad_fn is not None}
    todo, found = [t.grad_fn], None
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if type(node).__name__.startswith("Triton") or getattr(node, "triton", False):
            if getattr(node, "persistent", False):
                return "Triton, persistent"
            found = "Triton"
        todo += [n for n, _ in node.next_functions]
    return found
