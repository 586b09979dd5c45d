"""The cells' whole-sequence paths (ATR/GRU loops, SRU/SR-NMT linear scans) against the plain step
loop: same outputs, final states and gradients, with padding, reversal and initial states."""

import pytest
import torch

from cellpaths import both_paths, float64, outputs_and_grads  # noqa: F401 (float64: autouse fixture)
from rnmt.cells import CELLS, build_cell, run
from rnmt.cells.scan import linear_scan
from rnmt.cells.srnmt import DecoderUnit, EncoderUnit
from rnmt.models import build_model

# each cell with a whole-sequence path, with the options that have their own
FAST = {"atr": ("atr", {}), "atr-no-bias": ("atr", {"bias": False}), "gru": ("gru", {}),
        "gru-reset-before": ("gru", {"reset": "before"}), "sru": ("sru", {}), "srnmt": ("srnmt", {})}


@pytest.mark.parametrize("name", sorted(FAST))
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("input_size", [5, 6])
def test_sequence_path_equals_step_loop(name: str, reverse: bool, padded: bool, input_size: int) -> None:
    torch.manual_seed(0)
    kind, options = FAST[name]
    cell = build_cell(kind, input_size, 6, **options)
    x = torch.randn(3, 7, input_size, requires_grad=True)
    mask = torch.ones(3, 7, dtype=torch.bool)
    if padded:
        mask[1, 4:] = False
        mask[2, 1:] = False
    h0 = torch.randn(3, cell.state_size, requires_grad=True)
    assert cell.sequence(cell.project_inputs(x), mask, h0) is not None, f"{name} has no whole-sequence path"
    loop, fast = both_paths(lambda: outputs_and_grads(cell, x, mask, h0, reverse))
    for a, b in zip(loop, fast, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-12)


def test_float32_paths_agree_within_float_tolerance() -> None:
    torch.set_default_dtype(torch.float32)
    torch.manual_seed(0)
    cell = build_cell("atr", 32, 32)
    x = torch.randn(4, 20, 32, requires_grad=True)
    mask = torch.ones(4, 20, dtype=torch.bool)
    h0 = torch.zeros(4, 32, requires_grad=True)
    loop, fast = both_paths(lambda: outputs_and_grads(cell, x, mask, h0, False))
    for a, b in zip(loop, fast, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)


def test_options_without_a_fused_form_use_the_step_loop() -> None:
    x = torch.randn(2, 3, 4)
    for cell in (build_cell("atr", 4, 4, state_tanh=True), build_cell("atr", 4, 4, twin="one_minus")):
        assert cell.sequence(cell.project_inputs(x), None, torch.zeros(2, 4)) is None
    # the GRU with gate norm or candidate dropout takes the step-kernel loop (tests/test_cells_fast_more.py)


def test_linear_scan_is_the_recurrence() -> None:
    f, u, h0 = torch.rand(2, 5, 3), torch.randn(2, 5, 3), torch.randn(2, 3)
    h, expected = h0, []
    for t in range(5):
        h = f[:, t] * h + u[:, t]
        expected.append(h)
    torch.testing.assert_close(linear_scan(f, u, h0), torch.stack(expected, 1))
    args = tuple(a.clone().requires_grad_() for a in (f, u, h0))
    assert torch.autograd.gradcheck(linear_scan, args)


def test_srnmt_units_same_with_either_path() -> None:
    torch.manual_seed(0)
    enc, dec = EncoderUnit(6, 6, dropout=0.0), DecoderUnit(6, 6, dropout=0.0)
    x, y = torch.randn(2, 5, 6, requires_grad=True), torch.randn(2, 4, 6, requires_grad=True)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])

    def go():
        h = enc(x, mask)
        s, last = dec(y, torch.zeros(2, 6), dec.attention.keys(h), h, mask)
        loss = s.pow(2).sum() + last.sum()
        return [s, last, *torch.autograd.grad(loss, [x, y, *enc.parameters(), *dec.parameters()])]

    for a, b in zip(*both_paths(go), strict=True):
        torch.testing.assert_close(b, a)


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


@pytest.mark.parametrize("name", sorted(FAST))
def test_sequence_path_runs_in_float32_under_autocast(name: str) -> None:
    """CUDA training's bfloat16 autocast keeps the whole-sequence path: the recurrence runs in float32 on
    the autocast input projection, so it equals a float32 run on that projection."""
    torch.set_default_dtype(torch.float32)
    torch.manual_seed(0)
    kind, options = FAST[name]
    cell = build_cell(kind, 16, 16, **options)
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
