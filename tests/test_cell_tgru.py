"""DTMT's transition GRU (T-GRU, eqs. 10-13; no input): its equations, options and paths (the shared checks
take `CASES`: tests/cellcases.py)."""

import pytest
import torch
import torch.nn.functional as F

from cellcases import Case
from rnmt.cells import build_cell
from rnmt.io import InputError


def ln(x, norm):
    return F.layer_norm(x, x.shape[-1:], norm.weight, norm.bias, norm.eps)


def ref_tgru(c, h):             # DTMT eqs. 10-13
    H = c.hidden_size
    W = c.weight_hh
    r = torch.sigmoid(ln(h @ W[:H].T, c.norm_r))
    z = torch.sigmoid(ln(h @ W[H:2 * H].T, c.norm_z))
    return (1 - z) * h + z * torch.tanh(r * (h @ W[2 * H:].T + c.bias_hh))


CASES = {
    "tgru": Case("tgru", reference=lambda c, x, h: ref_tgru(c, h), eq_input=0, path_inputs=(0,), dropout=True,
                 triton=True),
    "tgru-no-gate-norm": Case("tgru", {"gate_norm": False}, path_inputs=(0,), dropout=True, triton=True),
}


def test_a_tgru_reads_no_input() -> None:
    with pytest.raises(InputError, match="tgru reads no input"):
        build_cell("tgru", 3, 4)
