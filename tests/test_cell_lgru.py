"""DTMT's linear-transformation GRU (L-GRU, eqs. 14-16) and the linear associative unit (LAU, Wang et al.
2017), an L-GRU variant (cells/lau.py): their equations, options and paths (the shared checks take `CASES`:
tests/cellcases.py)."""

import torch
import torch.nn.functional as F

from cellcases import Case
from cellpaths import assert_float32_paths_agree, float64  # noqa: F401 (float64: autouse fixture)
from rnmt.cells import build_cell


def ln(x, norm):
    return F.layer_norm(x, x.shape[-1:], norm.weight, norm.bias, norm.eps)


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


CASES = {
    "lgru": Case("lgru", reference=ref_lgru, gradcheck=True, dropout=True, triton=True),
    "lgru-no-gate-norm": Case("lgru", {"gate_norm": False}, dropout=True, triton=True),
    "lau": Case("lau", reference=ref_lau, gradcheck=True, dropout=True, triton=True),
    "lau-no-gate-norm": Case("lau", {"gate_norm": False}, dropout=True, triton=True),
}


def test_float32_paths_agree_within_float_tolerance() -> None:
    assert_float32_paths_agree(lambda: build_cell("lgru", 128, 128))
