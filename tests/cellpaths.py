"""What the tests of the cells' whole-sequence paths share: float64 by default, a cell's outputs and
gradients from `run`, and the same computation under the step loop and under the whole-sequence path."""

import pytest
import torch

from rnmt.cells import run
from rnmt.cells.base import use_path


@pytest.fixture(autouse=True)
def float64():
    """float64 and one thread for every test of a module that imports this fixture."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    yield
    torch.set_default_dtype(old)


def outputs_and_grads(cell, x, mask, h0, reverse):
    """Outputs, final state and the gradients of x (unless it is empty), h0 and every parameter."""
    out, final = run(cell, x, mask, h0, reverse=reverse)
    loss = out.sin().sum() + (final * torch.linspace(-1, 1, final.size(1))).sum()
    wrt = ([x] if x.size(-1) else []) + [h0, *cell.parameters()]
    return [out, final, *torch.autograd.grad(loss, wrt)]


def both_paths(fn, seed=0):
    """fn() under the step loop and under the whole-sequence path, each after seeding the RNG."""
    out = []
    for path in ("loop", "sequence"):
        torch.manual_seed(seed)
        with use_path(path):
            out.append(fn())
    return out
