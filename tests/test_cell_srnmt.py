"""SR-NMT's weakly-recurrent unit (the `srnmt` cell, and the encoder and decoder units of the SR-NMT model):
its paths (the shared checks take `CASES`: tests/cellcases.py); the model is tests/test_srnmt.py's."""

import torch

from cellcases import Case
from cellpaths import both_paths, float64  # noqa: F401 (float64: autouse fixture)
from rnmt.cells.srnmt import DecoderUnit, EncoderUnit

CASES = {"srnmt": Case("srnmt", path_inputs=(5, 6), autocast=True, triton=True)}


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
