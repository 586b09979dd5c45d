"""ATR (Zhang et al. 2018, eqs. 6-9): its equations, options and paths (the shared checks take `CASES`:
tests/cellcases.py)."""

import pytest
import torch

from cellcases import Case
from cellpaths import both_paths, float64, outputs_and_grads  # noqa: F401 (float64: autouse fixture)
from rnmt.cells import build_cell, run
from rnmt.cells.base import use_path
from rnmt.io import InputError


def ref_atr(c, x, h, state_tanh=False, twin="add"):
    p = x @ c.weight_ih.T + (c.bias_ih if c.bias_ih is not None else 0)      # eq. 6 has no biases
    q = h @ c.weight_hh.T + (c.bias_hh if c.bias_hh is not None else 0)
    f = torch.sigmoid(p - q)
    i = 1 - f if twin == "one_minus" else torch.sigmoid(p + q)
    out = i * p + f * h
    return torch.tanh(out) if state_tanh else out


CASES = {
    "atr": Case("atr", reference=ref_atr, gradcheck=True, path_inputs=(5, 6), autocast=True, triton=True),
    "atr-tanh": Case("atr", {"state_tanh": True}, lambda c, x, h: ref_atr(c, x, h, state_tanh=True),
                     path_inputs=()),
    "atr-one-minus": Case("atr", {"twin": "one_minus"}, lambda c, x, h: ref_atr(c, x, h, twin="one_minus"),
                          path_inputs=()),
    "atr-no-bias": Case("atr", {"bias": False}, ref_atr, gradcheck=True, path_inputs=(5, 6), autocast=True,
                        triton=True),
    "atr-output-tanh": Case("atr", {"bias": False, "output_tanh": True}, ref_atr, gradcheck=True,
                            path_inputs=(5, 6), autocast=True, triton=True),
}


def test_eq6_without_biases_has_two_h_fewer_parameters() -> None:
    """ATR's eq. 6 without biases has 2·H fewer parameters than the reference code's ATR."""
    with_bias, without = build_cell("atr", 3, 4), build_cell("atr", 3, 4, bias=False)
    assert sum(p.numel() for p in with_bias.parameters()) - sum(p.numel() for p in without.parameters()) == 8


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


def test_output_tanh_passes_tanh_of_the_state_on_and_keeps_the_state() -> None:
    """With `output_tanh` the next layer sees tanh(h) while the recurrence carries eq. 9's h, by every path:
    the same weights give tanh of the plain cell's outputs and the same final state."""
    torch.manual_seed(0)
    plain, squashed = build_cell("atr", 5, 6, bias=False), build_cell("atr", 5, 6, bias=False, output_tanh=True)
    squashed.load_state_dict(plain.state_dict())
    x = 3 * torch.randn(3, 7, 5)
    mask = torch.tensor([[True] * 7, [True] * 4 + [False] * 3, [True] * 2 + [False] * 5])
    for path in ("loop", "sequence"):
        with use_path(path):
            (out, last), (ref, ref_last) = run(squashed, x, mask), run(plain, x, mask)
        torch.testing.assert_close(out, torch.tanh(ref))
        torch.testing.assert_close(last, ref_last)
        assert ref.abs().max() > 1 >= out.abs().max()
    assert plain.passes_state() and not squashed.passes_state()


def test_an_unknown_twin_is_refused() -> None:
    with pytest.raises(InputError, match="twin must be 'add'"):
        build_cell("atr", 2, 2, twin="sub")
