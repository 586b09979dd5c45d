"""The GRU (ATR eqs. 2-5 with the reset gate inside the product; DTMT eqs. 6-9 with it outside, and with
per-gate layer norm): its equations, options and paths (the shared checks take `CASES`: tests/cellcases.py)."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from cellcases import Case
from cellpaths import float64, randomise  # noqa: F401 (float64: autouse fixture)
from rnmt.cells import build_cell
from rnmt.io import InputError


def ln(x, norm):
    return F.layer_norm(x, x.shape[-1:], norm.weight, norm.bias, norm.eps)


def ref_gru_atr_eq4(c, x, h):  # ATR eqs. 2-5: the reset gate inside the product, U_h (r ⊙ h)
    H = c.hidden_size
    Wx, bx, Urz, brz, Un, bn = c.weight_ih, c.bias_ih, c.weight_hh_rz, c.bias_hh_rz, c.weight_hh_n, c.bias_hh_n
    r = torch.sigmoid(x @ Wx[:H].T + bx[:H] + h @ Urz[:H].T + brz[:H])
    z = torch.sigmoid(x @ Wx[H:2 * H].T + bx[H:2 * H] + h @ Urz[H:].T + brz[H:])
    n = torch.tanh(x @ Wx[2 * H:].T + bx[2 * H:] + (r * h) @ Un.T + bn)
    return z * h + (1 - z) * n


def ref_gru_dtmt_eq7(c, x, h):  # DTMT eqs. 6-9: the reset gate outside the product, r ⊙ (W_hh h)
    H = c.hidden_size
    Wx, Wh, bx, bh = c.weight_ih, c.weight_hh, c.bias_ih, c.bias_hh
    r = torch.sigmoid(x @ Wx[:H].T + bx[:H] + h @ Wh[:H].T + bh[:H])
    z = torch.sigmoid(x @ Wx[H:2 * H].T + bx[H:2 * H] + h @ Wh[H:2 * H].T + bh[H:2 * H])
    n = torch.tanh(x @ Wx[2 * H:].T + bx[2 * H:] + r * (h @ Wh[2 * H:].T + bh[2 * H:]))
    return (1 - z) * n + z * h


def ref_gru_ln(c, x, h):
    H = c.hidden_size
    Wx, Wh = c.weight_ih, c.weight_hh
    r = torch.sigmoid(ln(x @ Wx[:H].T + h @ Wh[:H].T, c.norm_r))
    z = torch.sigmoid(ln(x @ Wx[H:2 * H].T + h @ Wh[H:2 * H].T, c.norm_z))
    n = torch.tanh(x @ Wx[2 * H:].T + r * (h @ Wh[2 * H:].T + c.bias_hh))
    return (1 - z) * n + z * h


CASES = {
    "gru": Case("gru", reference=ref_gru_dtmt_eq7, gradcheck=True, path_inputs=(5, 6), dropout=True,
                autocast=True, triton=True),
    "gru-reset-before": Case("gru", {"reset": "before"}, ref_gru_atr_eq4, gradcheck=True, path_inputs=(5, 6),
                             autocast=True, triton=True),
    "gru-gate-norm": Case("gru", {"gate_norm": True}, ref_gru_ln, dropout=True, triton=True),
}


def test_the_reset_gates_two_places_are_two_cells_with_the_same_parameters() -> None:
    """ATR's eq. 4 (U(r ⊙ h)) and DTMT's eq. 7 (r ⊙ (U h)) give different states from the same weights."""
    before, after = build_cell("gru", 3, 4, reset="before"), randomise(build_cell("gru", 3, 4))
    before.load_state_dict(after.state_dict())       # torch's [3H, H] layout loads into U_rz and U_n
    torch.testing.assert_close(torch.cat([before.weight_hh_rz, before.weight_hh_n]), after.weight_hh)
    torch.testing.assert_close(torch.cat([before.bias_hh_rz, before.bias_hh_n]), after.bias_hh)
    x, h = torch.randn(2, 3), torch.randn(2, 4)
    assert not torch.allclose(before.step(before.project_inputs(x), h), after.step(after.project_inputs(x), h))


def test_a_seeded_reset_before_gru_draws_the_weights_of_the_one_matrix_layout() -> None:
    """U_rz and U_n are two parameters (autocast casts each once a forward), drawn in the order of torch's
    one [3H, H] matrix: a seeded model starts where it did with that layout, for every init scheme that
    draws per parameter in order."""
    torch.manual_seed(3)
    before = build_cell("gru", 3, 4, reset="before")
    torch.manual_seed(3)
    after = build_cell("gru", 3, 4)
    assert torch.equal(torch.cat([before.weight_hh_rz, before.weight_hh_n]), after.weight_hh)
    assert torch.equal(torch.cat([before.bias_hh_rz, before.bias_hh_n]), after.bias_hh)
    assert sum(p.numel() for p in before.parameters()) == sum(p.numel() for p in after.parameters())
    assert before.weight_matrix_count == after.weight_matrix_count == 6


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.__name__)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize(("reset", "products"), [("before", 2), ("after", 1)])
def test_a_gru_step_under_autocast_casts_its_states_and_no_weights(reset: str, products: int) -> None:
    """Autocast keeps one low-precision copy of each whole parameter per forward pass, but casts a slice of one
    at every step: a decoder's GRU step casts only what its products read from the state (h, and r ⊙ h
    where the reset gate is inside the product), none of its weights or biases."""
    cell = build_cell("gru", 8, 8, reset=reset).float()          # autocast leaves this file's float64 alone
    p, h = cell.project_inputs(torch.randn(2, 8, dtype=torch.float32)), torch.randn(2, 8, dtype=torch.float32)
    with torch.autocast("cpu", torch.bfloat16):
        h = cell.step(p, h)                          # the first step fills autocast's cache
        with _Ops() as ops:
            cell.step(p, h)
    assert ops.names.count("_to_copy.default") == products, " ".join(ops.names)


def test_an_unknown_reset_place_is_refused() -> None:
    with pytest.raises(InputError, match="reset must be 'after' .* or 'before'"):
        build_cell("gru", 2, 2, reset="inside")
