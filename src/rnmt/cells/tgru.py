"""Transition GRU (T-GRU; Meng & Zhang 2019, DTMT eqs. 10-13), with per-gate layer normalisation.

    r = σ(LN_r(W_hr h)),  z = σ(LN_z(W_hz h))          (12, 13)
    h̃ = tanh(r ⊙ (W_hh h + b))                         (11)
    h' = (1 − z) ⊙ h + z ⊙ h̃                            (10)

It has no input: it transforms the state inside a deep transition block (cells/composite.py).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from rnmt.cells.base import RecurrentCell
from rnmt.cells.gates import dropout_rate, sigmoid_gates, step_dropout
from rnmt.cells.gru import GRUKernel
from rnmt.cells.registry import register_cell
from rnmt.io import InputError
from rnmt.machine.matmul import linear


@register_cell("tgru")
class TGRU(RecurrentCell):
    def __init__(self, input_size: int, hidden_size: int, gate_norm: bool = True,
                 candidate_dropout: float = 0.0) -> None:
        if input_size != 0:
            raise InputError("tgru reads no input (it transforms the state of a transition block); "
                             "use it inside the dtmt architecture, not as a layer's cell")
        super().__init__(0, hidden_size)
        H = hidden_size
        self.gate_norm, self.candidate_dropout = gate_norm, candidate_dropout
        self.weight_hh = nn.Parameter(torch.empty(3 * H, H))
        self.bias_hh = nn.Parameter(torch.zeros(H))
        if gate_norm:
            self.norm_r, self.norm_z = nn.LayerNorm(H), nn.LayerNorm(H)
        else:
            self.gate_bias = nn.Parameter(torch.zeros(2 * H))
        nn.init.uniform_(self.weight_hh, -H ** -0.5, H ** -0.5)

    @property
    def projection_size(self) -> int:
        return 0

    def project_inputs(self, x: Tensor) -> Tensor:
        return x.new_zeros(*x.shape[:-1], 0)

    def step(self, p: Tensor, state: Tensor) -> Tensor:
        a_r, a_z, a_h = linear(state, self.weight_hh).chunk(3, -1)
        if self.gate_norm:
            r, z = torch.sigmoid(self.norm_r(a_r)), torch.sigmoid(self.norm_z(a_z))
        else:
            b_r, b_z = self.gate_bias.chunk(2)
            r, z = torch.sigmoid(a_r + b_r), torch.sigmoid(a_z + b_z)
        h_tilde = torch.tanh(r * (a_h + self.bias_hh))
        if self.candidate_dropout:
            h_tilde = step_dropout(h_tilde, self.candidate_dropout, self.training)
        return state + z * (h_tilde - state)

    def step_kernel(self) -> GRUKernel | None:
        gates = sigmoid_gates(self.hidden_size, [self.norm_r, self.norm_z] if self.gate_norm else None,
                              None if self.gate_norm else self.gate_bias)
        rate = dropout_rate(self.candidate_dropout, self.training)
        if gates is None or rate is None:
            return None
        return GRUKernel(self.weight_hh, self.bias_hh, gates, rate, transition=True)
