"""Linear associative unit (LAU; Wang et al. 2017), as the DTMT paper compares it with L-GRU
(DTMT section "L-GRU", Table 3; same parameters as L-GRU, here also with per-gate layer norm).

    r, z, g = σ(LN(W_x· x + W_h· h))
    h̃ = tanh(W_xh x + r ⊙ (W_hh h + b))
    h' = (1 − g) ⊙ ((1 − z) ⊙ h + z ⊙ h̃) + g ⊙ H x

Unlike L-GRU, the linear path H x is gated by g alone, and g also scales the GRU part: the two
differences the DTMT paper names.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rnmt.cells.lgru import GatedLinearBase
from rnmt.cells.registry import register_cell


@register_cell("lau")
class LAU(GatedLinearBase):
    lau = True

    def step(self, p: Tensor, state: Tensor) -> Tensor:
        r, z, g, candidate, hx = self.parts(p, state)
        gru = state + z * (self.dropped(torch.tanh(candidate)) - state)
        return gru + g * (hx - gru)
