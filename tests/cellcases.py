"""The cells' test cases, found in their files: each cell's tests live in `tests/test_cell_<cell>.py`, which
also declares `CASES`, its option sets, each with what the shared checks run on it. The shared checks
(tests/test_cells.py: equations, gradients; tests/test_cells_fast.py: whole-sequence paths; tests/test_cuda.py:
CUDA; tests/test_cells_triton.py: the Triton kernels) take every case from here, so a new cell is its source
file, its Triton file, its test file and a row, with no list of cells to extend."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import torch

from rnmt.cells import build_cell

HIDDEN = 6          # the path checks' hidden size
EQ_HIDDEN = 4       # the equation checks'


@dataclass(frozen=True)
class Case:
    kind: str                                            # the registered cell
    options: dict[str, Any] = field(default_factory=dict)
    # one step by the paper's equations, (cell, x, h) -> h', checked at input `eq_input`, hidden 4
    reference: Callable[..., torch.Tensor] | None = None
    eq_input: int = 3
    gradcheck: bool = False                              # torch.autograd.gradcheck through `run`
    path_inputs: tuple[int, ...] = (5,)                  # input sizes the whole-sequence path is checked at
    dropout: bool = False                                # takes candidate_dropout: its noise is checked too
    autocast: bool = False                               # its whole-sequence path under autocast is checked
    triton: bool = False                                 # its whole-sequence path on CUDA runs Triton kernels

    def build(self, input_size: int, hidden: int = HIDDEN, **extra: Any) -> torch.nn.Module:
        return build_cell(self.kind, input_size, hidden, **self.options, **extra)


@cache
def all_cases() -> dict[str, Case]:
    """Every case of every tests/test_cell_*.py, by name (names are unique across the files)."""
    out: dict[str, Case] = {}
    for path in sorted(Path(__file__).parent.glob("test_cell_*.py")):
        module = importlib.import_module(path.stem)
        for name, case in module.CASES.items():
            assert name not in out, f"case {name!r} of {path.name} is also another file's"
            out[name] = case
    return out


def names(keep: Callable[[Case], bool] = lambda c: True) -> list[str]:
    return sorted(n for n, c in all_cases().items() if keep(c))
