"""The LSTM: torch's LSTMCell's equations, and its paths (the shared checks take `CASES`:
tests/cellcases.py)."""

import torch

from cellcases import Case
from cellpaths import assert_float32_paths_agree, float64, randomise  # noqa: F401 (float64: autouse fixture)
from rnmt.cells import build_cell

CASES = {"lstm": Case("lstm", gradcheck=True)}


def test_lstm_equals_torch_lstmcell() -> None:
    ours = randomise(build_cell("lstm", 3, 4))
    ref = torch.nn.LSTMCell(3, 4)
    ref.load_state_dict(ours.state_dict())
    x, h, c = torch.randn(2, 3), torch.randn(2, 4), torch.randn(2, 4)
    new = ours.step(ours.project_inputs(x), torch.cat([h, c], -1))
    rh, rc = ref(x, (h, c))
    torch.testing.assert_close(new, torch.cat([rh, rc], -1))


def test_float32_paths_agree_within_float_tolerance() -> None:
    assert_float32_paths_agree(lambda: build_cell("lstm", 128, 128))
