"""Gated recurrent unit (Cho et al. 2014; ATR paper eqs. 2-5).

    r = σ(W_r x + b_r + U_r h + c_r)
    z = σ(W_z x + b_z + U_z h + c_z)
    n = tanh(W_n x + b_n + r ⊙ (U_n h + c_n))
    h' = (1 − z) ⊙ n + z ⊙ h

The reset gate multiplies U_n h after the product (cuDNN's and torch.nn.GRUCell's form; the
paper's eq. 4 writes U_h (r ⊙ h), which has the same parameters). Weights are laid out as in
torch.nn.GRUCell (gate order r, z, n), so the two can share a state dict.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rnmt.cells.base import RecurrentCell
from rnmt.cells.registry import register_cell


@register_cell("gru")
class GRU(RecurrentCell):
    weight_matrices = 6

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__(input_size, hidden_size)
        self.weight_ih = nn.Parameter(torch.empty(3 * hidden_size, input_size))
        self.weight_hh = nn.Parameter(torch.empty(3 * hidden_size, hidden_size))
        self.bias_ih = nn.Parameter(torch.empty(3 * hidden_size))
        self.bias_hh = nn.Parameter(torch.empty(3 * hidden_size))
        bound = hidden_size ** -0.5
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def project_inputs(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight_ih, self.bias_ih)

    def step(self, p: Tensor, state: Tensor) -> Tensor:
        g = F.linear(state, self.weight_hh, self.bias_hh)
        p_r, p_z, p_n = p.chunk(3, -1)
        g_r, g_z, g_n = g.chunk(3, -1)
        r = torch.sigmoid(p_r + g_r)
        z = torch.sigmoid(p_z + g_z)
        n = torch.tanh(p_n + r * g_n)
        return n + z * (state - n)
