"""Gated recurrent unit (Cho et al. 2014; ATR paper eqs. 2-5; DTMT eqs. 6-9).

    r = σ(W_r x + b_r + U_r h + c_r)
    z = σ(W_z x + b_z + U_z h + c_z)
    n = tanh(W_n x + b_n + r ⊙ (U_n h + c_n))
    h' = (1 − z) ⊙ n + z ⊙ h

The reset gate multiplies U_n h after the product (cuDNN's and torch.nn.GRUCell's form; the
paper's eq. 4 writes U_h (r ⊙ h), which has the same parameters). Weights are laid out as in
torch.nn.GRUCell (gate order r, z, n), so the two can share a state dict.

With `gate_norm=True` (DTMT's "per-gate layer normalisation"), r = σ(LN(W_r x + U_r h)) and
z = σ(LN(W_z x + U_z h)) without biases, and the candidate has one bias: n = tanh(W_n x + r ⊙ (U_n h + c)).
`candidate_dropout` drops out n during training (DTMT).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rnmt.cells.base import RecurrentCell
from rnmt.cells.fused import time_major
from rnmt.cells.fused_dtmt import GRUKernel
from rnmt.cells.fused_gates import dropout_rate, sigmoid_gates
from rnmt.cells.registry import register_cell
from rnmt.cells.triton import triton_path
from rnmt.matmul import linear


@register_cell("gru")
class GRU(RecurrentCell):
    def __init__(self, input_size: int, hidden_size: int, gate_norm: bool = False,
                 candidate_dropout: float = 0.0) -> None:
        super().__init__(input_size, hidden_size)
        self.gate_norm, self.candidate_dropout = gate_norm, candidate_dropout
        H = hidden_size
        self.weight_ih = nn.Parameter(torch.empty(3 * H, input_size))
        self.weight_hh = nn.Parameter(torch.empty(3 * H, H))
        if gate_norm:
            self.bias_ih = None
            self.bias_hh = nn.Parameter(torch.zeros(H))          # the candidate's bias c
            self.norm_r, self.norm_z = nn.LayerNorm(H), nn.LayerNorm(H)
        else:
            self.bias_ih = nn.Parameter(torch.empty(3 * H))
            self.bias_hh = nn.Parameter(torch.empty(3 * H))
        bound = H ** -0.5
        for name, p in self.named_parameters():
            if "norm" not in name:
                nn.init.uniform_(p, -bound, bound)

    @property
    def projection_size(self) -> int:
        return 3 * self.hidden_size

    def project_inputs(self, x: Tensor) -> Tensor:
        return linear(x, self.weight_ih, self.bias_ih)

    def step(self, p: Tensor, state: Tensor) -> Tensor:
        p_r, p_z, p_n = p.chunk(3, -1)
        if self.gate_norm:
            g = linear(state, self.weight_hh)
            g_r, g_z, g_n = g.chunk(3, -1)
            r = torch.sigmoid(self.norm_r(p_r + g_r))
            z = torch.sigmoid(self.norm_z(p_z + g_z))
            g_n = g_n + self.bias_hh
        else:
            g_r, g_z, g_n = linear(state, self.weight_hh, self.bias_hh).chunk(3, -1)
            r = torch.sigmoid(p_r + g_r)
            z = torch.sigmoid(p_z + g_z)
        n = torch.tanh(p_n + r * g_n)
        if self.candidate_dropout:
            n = F.dropout(n, self.candidate_dropout, self.training)
        return n + z * (state - n)

    def step_kernel(self) -> GRUKernel | None:
        """The step for the whole-sequence loop of cells/fused_steps.py, any options (cells/fused_dtmt.py)."""
        H = self.hidden_size
        gates = sigmoid_gates(H, [self.norm_r, self.norm_z] if self.gate_norm else None,
                              None if self.gate_norm else self.bias_hh[: 2 * H])
        rate = dropout_rate(self.candidate_dropout, self.training)
        if gates is None or rate is None:
            return None
        return GRUKernel(self.weight_hh, self.bias_hh if self.gate_norm else self.bias_hh[2 * H:], gates, rate,
                         transition=False)

    def sequence(self, projected: Tensor, mask: Tensor | None, state: Tensor) -> Tensor | None:
        """The recurrence over all steps: Triton kernels on CUDA (cells/triton; without gate norm and
        candidate dropout), else the loop of `step_kernel` (cells/fused_steps.py, any options)."""
        plain = not (self.gate_norm or (self.candidate_dropout and self.training))
        kernels = triton_path(projected) if plain else None
        if kernels is None:
            return super().sequence(projected, mask, state)
        p, m = time_major(projected, mask)
        return kernels.TritonGRU.apply(p, m, state.contiguous(), self.weight_hh, self.bias_hh).transpose(0, 1)
