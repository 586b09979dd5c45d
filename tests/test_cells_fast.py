"""The cells' whole-sequence paths (ATR/GRU loops, SRU/SR-NMT linear scans, the step-kernel loops of
cells/kernel.py) against the plain step loop, for every case the cells' own files declare
(tests/test_cell_<cell>.py, tests/cellcases.py): same outputs, final states and gradients, with padding,
reversal, initial states and seeded candidate dropout; under autocast; and whole models either way."""

import pytest
import torch

from cellcases import all_cases, names
from cellpaths import assert_same, both_paths, check, float64, inputs, outputs_and_grads, perturbed  # noqa: F401
from rnmt.cells import CELLS, build_cell, run
from rnmt.cells.gates import step_dropout
from rnmt.cells.scan import linear_scan
from rnmt.machine import matmul
from rnmt.models import build_model

PATHS = [(name, size) for name in names(lambda c: bool(c.path_inputs)) for size in all_cases()[name].path_inputs]


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("name,input_size", PATHS)
def test_sequence_path_equals_step_loop(name: str, input_size: int, padded: bool, reverse: bool) -> None:
    torch.manual_seed(0)
    check(perturbed(all_cases()[name].build(input_size)).eval(), padded, reverse)


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("name", names(lambda c: c.dropout))
def test_candidate_dropout_in_training_draws_the_step_loops_noise(name: str, padded: bool) -> None:
    torch.manual_seed(0)
    case = all_cases()[name]
    cell = perturbed(case.build(case.path_inputs[0], candidate_dropout=0.4)).train()
    check(cell, padded, reverse=False, seed=3)
    x, mask, h0 = inputs(cell, padded)
    with torch.no_grad():
        torch.manual_seed(3)
        train = run(cell, x, mask, h0)[0]
        eval_ = run(cell.eval(), x, mask, h0)[0]
    assert not torch.allclose(train, eval_), "the dropout did nothing: the test would not see its noise"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_the_step_loops_candidate_dropout_is_f_dropout_on_the_cpu(dtype: torch.dtype) -> None:
    """Drawing the candidate dropout's mask at float32 or wider (CUDA draws another for bfloat16) leaves a
    CPU run's numbers as F.dropout's: the same values and gradient, in every dtype."""
    x = torch.randn(7, 300, dtype=dtype, requires_grad=True)
    torch.manual_seed(5)
    want = torch.nn.functional.dropout(x, 0.3, training=True)
    (want_grad,) = torch.autograd.grad(want.float().sin().sum(), x)
    torch.manual_seed(5)
    got = step_dropout(x, 0.3, training=True)
    (got_grad,) = torch.autograd.grad(got.float().sin().sum(), x)
    assert got.dtype == dtype and torch.equal(got, want) and torch.equal(got_grad, want_grad)
    assert step_dropout(x, 0.3, training=False) is x


def test_linear_scan_is_the_recurrence() -> None:
    f, u, h0 = torch.rand(2, 5, 3), torch.randn(2, 5, 3), torch.randn(2, 3)
    h, expected = h0, []
    for t in range(5):
        h = f[:, t] * h + u[:, t]
        expected.append(h)
    torch.testing.assert_close(linear_scan(f, u, h0), torch.stack(expected, 1))
    args = tuple(a.clone().requires_grad_() for a in (f, u, h0))
    assert torch.autograd.gradcheck(linear_scan, args)


@pytest.mark.parametrize("arch,settings", [("rnnsearch", {"cell": "atr"}), ("rnnsearch-ca", {"cell": "atr"}),
                                           ("rnnsearch", {"cell": "gru"}),
                                           ("stacked", {"cell": "sru", "layers": 2, "input_feeding": False})])
def test_models_train_the_same_with_either_path(arch: str, settings: dict) -> None:
    torch.manual_seed(0)
    model = build_model(arch, 20, 20, emb=8, hidden=8, dropout=0.0, **settings)
    src = torch.randint(4, 20, (3, 6))
    mask = torch.ones(3, 6, dtype=torch.bool)
    mask[1, 4:] = False
    tgt = torch.randint(4, 20, (3, 5))

    def go():
        logits = model(src, mask, tgt)
        return [logits, *torch.autograd.grad(logits.logsumexp(-1).sum(), list(model.parameters()))]

    for a, b in zip(*both_paths(go), strict=True):
        torch.testing.assert_close(b, a)


@pytest.mark.parametrize("name", names(lambda c: c.autocast))
def test_sequence_path_runs_in_float32_under_autocast(name: str) -> None:
    """CUDA training's bfloat16 autocast keeps the whole-sequence path: the recurrence runs in float32 on
    the autocast input projection, its recurrent products taking bfloat16 operands (rnmt.machine.matmul
    `products_in`), so it equals a float32 run on that projection with those products."""
    torch.set_default_dtype(torch.float32)
    torch.manual_seed(0)
    cell = all_cases()[name].build(16, 16)
    x = torch.randn(3, 9, 16, requires_grad=True)
    mask = torch.ones(3, 9, dtype=torch.bool)
    mask[2, 5:] = False
    seen = []
    original = cell.sequence

    def spy(projected, m, state):
        seen.append((projected.dtype, torch.is_autocast_enabled("cpu")))
        return original(projected, m, state)

    cell.sequence = spy
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, final = run(cell, x, mask)
        projected = cell.project_inputs(x)
    assert seen and seen[0] == (torch.float32, False)           # float32 in, autocast off inside
    assert out.dtype == final.dtype == torch.float32
    with matmul.products_in(torch.bfloat16):
        states = original(projected.float(), mask, cell.initial_state(3, projected.float()))
    torch.testing.assert_close(out, cell.output(states) * mask.unsqueeze(-1))
    out.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


@pytest.mark.parametrize("name", sorted(n for n in CELLS if n != "tgru"))
def test_every_registered_cells_default_fast_path_equals_its_step_loop(name: str) -> None:
    """A new cell's whole-sequence path is checked here without a row of its own."""
    torch.manual_seed(0)
    cell = build_cell(name, 5, 5)
    x = torch.randn(3, 6, 5, requires_grad=True)
    mask = torch.ones(3, 6, dtype=torch.bool)
    mask[1, 3:] = False
    h0 = torch.randn(3, cell.state_size, requires_grad=True)
    if cell.sequence(cell.project_inputs(x), mask, h0) is None:
        pytest.skip(f"{name} runs its step loop only")
    loop, fast = both_paths(lambda: outputs_and_grads(cell, x, mask, h0, False))
    for a, b in zip(loop, fast, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-12)


def test_run_records_the_kind_of_path_each_training_recurrence_took(monkeypatch: pytest.MonkeyPatch) -> None:
    """train.json's `paths` (and the tables' note on speeds) come from here: what `run` actually took, once
    per cell, when gradients are on; forward-only runs (validation, decoding) are not training's."""
    from rnmt.cells import taken
    from rnmt.cells.base import use_path
    from rnmt.cells.taken import taken_paths

    monkeypatch.setattr(taken, "_TAKEN", {})
    x, mask = torch.randn(2, 3, 4, requires_grad=True), torch.ones(2, 3, dtype=torch.bool)
    atr, lstm, ran_cell = build_cell("atr", 4, 4), build_cell("lstm", 4, 4), build_cell("ran", 4, 4)
    with torch.no_grad():
        run(atr, x, mask)
    assert taken_paths() == {}
    with use_path("sequence"):
        run(atr, x, mask)
    with use_path("torch"):
        run(lstm, x, mask)
    with use_path("loop"):
        run(ran_cell, x, mask)
    assert taken_paths() == {atr.path_key(): "rnmt kernel", lstm.path_key(): "torch layer (oneDNN)",
                             ran_cell.path_key(): "step loop"}
