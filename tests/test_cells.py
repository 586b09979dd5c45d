"""Every cell against an independent step-by-step reference, gradients, padding, Table 1's counts."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from rnmt.cells import CELLS, build_cell, run
from rnmt.cells.composite import TransitionCell, TwoInputCell
from rnmt.io import InputError


@pytest.fixture(autouse=True)
def float64():
    """Exact comparisons and gradcheck need double precision; restored for the other test modules."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def ln(x, norm):
    return F.layer_norm(x, x.shape[-1:], norm.weight, norm.bias, norm.eps)


# ---- references written from the papers' equations, one timestep each -------------------------
def ref_atr(c, x, h, state_tanh=False, twin="add"):
    p = x @ c.weight_ih.T + (c.bias_ih if c.bias_ih is not None else 0)      # eq. 6 has no biases
    q = h @ c.weight_hh.T + (c.bias_hh if c.bias_hh is not None else 0)
    f = torch.sigmoid(p - q)
    i = 1 - f if twin == "one_minus" else torch.sigmoid(p + q)
    out = i * p + f * h
    return torch.tanh(out) if state_tanh else out


def ref_ran(c, x, cstate):
    H = c.hidden_size
    content = x @ c.weight_content.T if c.weight_content is not None else x
    h = torch.tanh(cstate)
    gates = torch.sigmoid(x @ c.weight_ih.T + h @ c.weight_hh.T + c.bias)
    return gates[:, :H] * content + gates[:, H:] * cstate


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


def _lgru_parts(c, x, h):
    H = c.hidden_size
    Wx, Wh = c.weight_ih, c.weight_hh
    g = [torch.sigmoid(ln(x @ Wx[k * H:(k + 1) * H].T + h @ Wh[k * H:(k + 1) * H].T, c.norms[k])) for k in range(3)]
    cand = x @ Wx[3 * H:4 * H].T + g[0] * (h @ Wh[3 * H:].T + c.bias_hh)
    return g, cand, x @ Wx[4 * H:].T


def ref_lgru(c, x, h):          # DTMT eqs. 14-16
    (r, z, lin), cand, hx = _lgru_parts(c, x, h)
    return (1 - z) * h + z * (torch.tanh(cand) + lin * hx)


def ref_lau(c, x, h):
    (r, z, g), cand, hx = _lgru_parts(c, x, h)
    return (1 - g) * ((1 - z) * h + z * torch.tanh(cand)) + g * hx


def ref_tgru(c, h):             # DTMT eqs. 10-13
    H = c.hidden_size
    W = c.weight_hh
    r = torch.sigmoid(ln(h @ W[:H].T, c.norm_r))
    z = torch.sigmoid(ln(h @ W[H:2 * H].T, c.norm_z))
    return (1 - z) * h + z * torch.tanh(r * (h @ W[2 * H:].T + c.bias_hh))


CASES = {
    "atr": (lambda: build_cell("atr", 3, 4), ref_atr),
    "atr-tanh": (lambda: build_cell("atr", 3, 4, state_tanh=True), lambda c, x, h: ref_atr(c, x, h, state_tanh=True)),
    "atr-one-minus": (lambda: build_cell("atr", 3, 4, twin="one_minus"),
                      lambda c, x, h: ref_atr(c, x, h, twin="one_minus")),
    "atr-no-bias": (lambda: build_cell("atr", 3, 4, bias=False), ref_atr),
    "gru-reset-before": (lambda: build_cell("gru", 3, 4, reset="before"), ref_gru_atr_eq4),
    "gru-reset-after": (lambda: build_cell("gru", 3, 4), ref_gru_dtmt_eq7),
    "ran": (lambda: build_cell("ran", 3, 4), ref_ran),
    "ran-simplest": (lambda: build_cell("ran", 4, 4), ref_ran),
    "gru-gate-norm": (lambda: build_cell("gru", 3, 4, gate_norm=True), ref_gru_ln),
    "lgru": (lambda: build_cell("lgru", 3, 4), ref_lgru),
    "lau": (lambda: build_cell("lau", 3, 4), ref_lau),
}


def randomise(cell):
    torch.manual_seed(0)
    for p in cell.parameters():
        torch.nn.init.normal_(p, 0, 0.5)
    return cell


@pytest.mark.parametrize("name", sorted(CASES))
def test_cell_equals_its_equations(name: str) -> None:
    make, ref = CASES[name]
    cell = randomise(make())
    torch.manual_seed(1)
    x, h = torch.randn(5, 3, cell.input_size), torch.randn(3, cell.state_size)
    out, final = run(cell, x.transpose(0, 1), torch.ones(3, 5, dtype=torch.bool), h)
    for t in range(5):
        h = ref(cell, x[t], h)
        torch.testing.assert_close(out[:, t], cell.output(h))
    torch.testing.assert_close(final, h)


def test_lstm_equals_torch_lstmcell() -> None:
    ours = randomise(build_cell("lstm", 3, 4))
    ref = torch.nn.LSTMCell(3, 4)
    ref.load_state_dict(ours.state_dict())
    x, h, c = torch.randn(2, 3), torch.randn(2, 4), torch.randn(2, 4)
    new = ours.step(ours.project_inputs(x), torch.cat([h, c], -1))
    rh, rc = ref(x, (h, c))
    torch.testing.assert_close(new, torch.cat([rh, rc], -1))


def test_transition_block_is_bottom_then_tgrus() -> None:
    torch.manual_seed(2)
    block = randomise(TransitionCell(build_cell("lgru", 3, 4), [build_cell("tgru", 0, 4) for _ in range(2)]))
    x, h = torch.randn(2, 3), torch.randn(2, 4)
    expect = ref_tgru(block.transitions[1], ref_tgru(block.transitions[0], ref_lgru(block.bottom, x, h)))
    torch.testing.assert_close(block.step(block.project_inputs(x), h), expect)


def test_two_input_cell_runs_lower_then_higher() -> None:
    cell = randomise(TwoInputCell(build_cell("atr", 3, 4), build_cell("atr", 4, 4)))
    a, b, h = torch.randn(2, 3), torch.randn(2, 4), torch.randn(2, 4)
    expect = ref_atr(cell.higher, b, ref_atr(cell.lower, a, h))
    torch.testing.assert_close(cell.step(cell.project_inputs(torch.cat([a, b], -1)), h), expect)


GRADCHECK = {"gru": {}, "gru-reset-before": {"reset": "before"}, "lstm": {}, "ran": {}, "atr": {},
             "atr-no-bias": {"bias": False}, "lgru": {}, "lau": {}}


@pytest.mark.parametrize("name", sorted(GRADCHECK))
def test_gradcheck(name: str) -> None:
    cell = randomise(build_cell(name.split("-")[0], 2, 3, **GRADCHECK[name]))
    x = torch.randn(2, 3, 2, requires_grad=True)
    mask = torch.tensor([[True, True, True], [True, True, False]])
    assert torch.autograd.gradcheck(lambda inp: run(cell, inp, mask, reverse=True)[0], (x,))


@pytest.mark.parametrize("name", sorted(n for n in CELLS if n != "tgru"))
@pytest.mark.parametrize("reverse", [False, True])
def test_padding_never_changes_real_positions(name: str, reverse: bool) -> None:
    try:
        cell = randomise(build_cell(name, 4, 4))
    except (InputError, TypeError) as e:
        pytest.skip(f"{name} is not a plain (input, hidden) cell: {e}")
    cell.eval()
    x = torch.randn(2, 6, 4)
    mask = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])
    out, final = run(cell, x, mask, reverse=reverse)
    alone, alone_final = run(cell, x[1:, :3], torch.ones(1, 3, dtype=torch.bool), reverse=reverse)
    torch.testing.assert_close(out[1, :3], alone[0])
    torch.testing.assert_close(final[1], alone_final[0])


def test_the_reset_gates_two_places_are_two_cells_with_the_same_parameters() -> None:
    """ATR's eq. 4 (U(r ⊙ h)) and DTMT's eq. 7 (r ⊙ (U h)) give different states from the same weights;
    ATR's eq. 6 without biases has 2·H fewer parameters than the reference code's ATR."""
    before, after = build_cell("gru", 3, 4, reset="before"), randomise(build_cell("gru", 3, 4))
    before.load_state_dict(after.state_dict())       # torch's [3H, H] layout loads into U_rz and U_n
    torch.testing.assert_close(torch.cat([before.weight_hh_rz, before.weight_hh_n]), after.weight_hh)
    torch.testing.assert_close(torch.cat([before.bias_hh_rz, before.bias_hh_n]), after.bias_hh)
    x, h = torch.randn(2, 3), torch.randn(2, 4)
    assert not torch.allclose(before.step(before.project_inputs(x), h), after.step(after.project_inputs(x), h))
    with_bias, without = build_cell("atr", 3, 4), build_cell("atr", 3, 4, bias=False)
    assert sum(p.numel() for p in with_bias.parameters()) - sum(p.numel() for p in without.parameters()) == 8


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


def test_weight_matrix_counts_of_atr_table1() -> None:
    """ATR paper Table 1: LSTM 8, GRU 6, RAN 4 (its simplest version), ATR 2, counted from the code."""
    counts = {name: build_cell(name, 8, 8).weight_matrix_count for name in ("lstm", "gru", "ran", "atr")}
    assert counts == {"lstm": 8, "gru": 6, "ran": 4, "atr": 2}


def test_option_errors_are_clear() -> None:
    with pytest.raises(InputError, match="twin must be 'add'"):
        build_cell("atr", 2, 2, twin="sub")
    with pytest.raises(InputError, match="reset must be 'after' .* or 'before'"):
        build_cell("gru", 2, 2, reset="inside")
    with pytest.raises(InputError, match="content_projection: true"):
        build_cell("ran", 3, 4, content_projection=False)
    with pytest.raises(InputError, match="tgru reads no input"):
        build_cell("tgru", 3, 4)


def test_every_cell_and_architecture_file_registers_itself_when_the_package_is_imported() -> None:
    """A new file in cells/ or models/ is found by auto-import: no list of modules to keep by hand."""
    import re
    from pathlib import Path

    from rnmt.models import MODELS

    src = Path(__file__).resolve().parents[1] / "src" / "rnmt"
    for package, decorator, registry in (("cells", "register_cell", CELLS), ("models", "register_model", MODELS)):
        declared = {name for path in (src / package).glob("*.py") if path.name != "registry.py"
                    for name in re.findall(rf'@{decorator}\("([^"]+)"\)', path.read_text())}
        assert declared, f"no @{decorator} found in {package}/"
        missing = declared - set(registry)
        assert not missing, f"{package}: registered in the source but not imported: {missing}"


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
