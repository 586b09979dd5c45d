"""The recurrent additive network (RAN; ATR Table 1's simplest version, with or without the content
projection): its equations, options and paths (the shared checks take `CASES`: tests/cellcases.py)."""

import pytest
import torch

from cellcases import Case
from rnmt.cells import build_cell
from rnmt.io import InputError


def ref_ran(c, x, cstate):
    H = c.hidden_size
    content = x @ c.weight_content.T if c.weight_content is not None else x
    h = torch.tanh(cstate)
    gates = torch.sigmoid(x @ c.weight_ih.T + h @ c.weight_hh.T + c.bias)
    return gates[:, :H] * content + gates[:, H:] * cstate


CASES = {
    "ran": Case("ran", reference=ref_ran, gradcheck=True),
    "ran-simplest": Case("ran", reference=ref_ran, eq_input=4, path_inputs=(6,)),      # input = hidden
    "ran-content-projection": Case("ran", {"content_projection": True}, path_inputs=(6,)),
    "ran-linear-output": Case("ran", {"output_tanh": False}),
}


def test_a_content_projection_is_needed_where_input_and_hidden_differ() -> None:
    with pytest.raises(InputError, match="content_projection: true"):
        build_cell("ran", 3, 4, content_projection=False)
