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


def randomise(cell):
    """The cell's parameters drawn from N(0, 0.5²), seeded: far from the initialisation's small values."""
    torch.manual_seed(0)
    for p in cell.parameters():
        torch.nn.init.normal_(p, 0, 0.5)
    return cell


def perturbed(cell):
    """The cell with every parameter moved off its initial value (layer norms' γ = 1 and β = 0 and the
    zero biases would hide mistakes in their gradients)."""
    torch.manual_seed(1)
    with torch.no_grad():
        for p in cell.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return cell


def inputs(cell, padded, batch=3, time=7):
    """x [batch, time, input], a mask (padded: sentence 1 ends at 4, sentence 2 at 1) and h0, needing grads."""
    x = torch.randn(batch, time, cell.input_size, requires_grad=True)
    mask = torch.ones(batch, time, dtype=torch.bool)
    if padded:
        mask[1, 4:] = False
        mask[2, 1:] = False
    h0 = torch.randn(batch, cell.state_size, requires_grad=True)
    return x, mask, h0


def assert_same(loop, fast, rtol=1e-10, atol=1e-12):
    assert len(loop) == len(fast)
    for a, b in zip(loop, fast, strict=True):
        torch.testing.assert_close(b, a, rtol=rtol, atol=atol)


def check(cell, padded, reverse, seed=0):
    """The cell's whole-sequence path equals its step loop on `inputs`, outputs and every gradient."""
    torch.manual_seed(0)
    x, mask, h0 = inputs(cell, padded)
    assert cell.sequence(cell.project_inputs(x), mask, h0) is not None, "no whole-sequence path"
    assert_same(*both_paths(lambda: outputs_and_grads(cell, x, mask, h0, reverse), seed))


def assert_float32_paths_agree(make):
    """In float32 at width 128, the whole-sequence path of the cell `make()` builds is its step loop's within
    float tolerance (1e-4 relative, 1e-4 of the largest value absolute)."""
    torch.set_default_dtype(torch.float32)
    torch.manual_seed(0)
    cell = perturbed(make()).eval()
    x, mask, h0 = inputs(cell, padded=True, batch=16, time=12)
    loop, fast = both_paths(lambda: outputs_and_grads(cell, x, mask, h0, False))
    for a, b in zip(loop, fast, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4 * float(a.detach().abs().max()))
