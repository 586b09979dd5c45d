"""Every cell against its paper's equations and gradcheck (the cases each cell's own file declares:
tests/test_cell_<cell>.py, tests/cellcases.py), padding, Table 1's counts, and the composite cells."""

import pytest
import torch

from cellcases import EQ_HIDDEN, all_cases, names
from cellpaths import float64, randomise  # noqa: F401 (float64: autouse fixture)
from rnmt.cells import CELLS, build_cell, run
from rnmt.cells import triton as triton_cells
from rnmt.cells.composite import TransitionCell, TwoInputCell
from rnmt.io import InputError
from test_cell_atr import ref_atr
from test_cell_lgru import ref_lgru
from test_cell_tgru import ref_tgru


def test_every_registered_cell_has_its_test_file_with_cases() -> None:
    """A new cell's file (src/rnmt/cells) needs its tests/test_cell_<cell>.py with `CASES`: the shared checks
    here, in tests/test_cells_fast.py, tests/test_cells_triton.py and tests/test_cuda.py take them from there;
    and every cell with a Triton file, or whose step kernels run on the gated cells' row kernels
    (cells/triton/gated.py), has a case that runs them."""
    cases = all_cases()
    assert {c.kind for c in cases.values()} == set(CELLS)
    assert {c.kind for c in cases.values() if c.triton} == set(triton_cells.CELLS) | {"lgru", "lau", "tgru"}


@pytest.mark.parametrize("name", names(lambda c: c.reference is not None))
def test_cell_equals_its_equations(name: str) -> None:
    case = all_cases()[name]
    cell = randomise(case.build(case.eq_input, EQ_HIDDEN))
    torch.manual_seed(1)
    x, h = torch.randn(5, 3, cell.input_size), torch.randn(3, cell.state_size)
    out, final = run(cell, x.transpose(0, 1), torch.ones(3, 5, dtype=torch.bool), h)
    for t in range(5):
        h = case.reference(cell, x[t], h)
        torch.testing.assert_close(out[:, t], cell.output(h))
    torch.testing.assert_close(final, h)


@pytest.mark.parametrize("name", names(lambda c: c.gradcheck))
def test_gradcheck(name: str) -> None:
    cell = randomise(all_cases()[name].build(2, 3))
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


def test_weight_matrix_counts_of_atr_table1() -> None:
    """ATR paper Table 1: LSTM 8, GRU 6, RAN 4 (its simplest version), ATR 2, counted from the code."""
    counts = {name: build_cell(name, 8, 8).weight_matrix_count for name in ("lstm", "gru", "ran", "atr")}
    assert counts == {"lstm": 8, "gru": 6, "ran": 4, "atr": 2}


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
