"""Simple recurrent unit (Lei et al. 2017, "Training RNNs as fast as CNNs", eqs. 3-7; SR-NMT paper
section 2 and its "SRU 3L" baseline).

    U = x W                       all timesteps in one product; U = [U₀, U₁, U₂(, U₃)]
    f_t = σ(U₁ + b_f),  r_t = σ(U₂ + b_r)
    c_t = f_t ⊙ c_{t−1} + (1 − f_t) ⊙ U₀
    h_t = r_t ⊙ tanh(c_t) + (1 − r_t) ⊙ x'_t       (highway)

x' = x when the input size equals the hidden size, else the extra projection U₃ (W has 4 blocks).
Only the gates have biases. The projection handed to `step` is [U₀, U₁, U₂, x'], and the state is
[c; h], since `output` (h) needs x' and cannot be rebuilt from c alone.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from rnmt.cells.base import RecurrentCell
from rnmt.cells.registry import register_cell
from rnmt.cells.scan import masked_scan
from rnmt.cells.triton import triton_path
from rnmt.machine.matmul import linear


@register_cell("sru")
class SRU(RecurrentCell):
    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__(input_size, hidden_size)
        self.reduces = input_size != hidden_size
        blocks = 4 if self.reduces else 3
        self.weight = nn.Parameter(torch.empty(blocks * hidden_size, input_size))
        self.bias = nn.Parameter(torch.zeros(2 * hidden_size))      # [b_f; b_r]
        bound = (3.0 / input_size) ** 0.5
        nn.init.uniform_(self.weight, -bound, bound)

    @property
    def state_size(self) -> int:
        return 2 * self.hidden_size

    @property
    def projection_size(self) -> int:
        return 4 * self.hidden_size

    def project_inputs(self, x: Tensor) -> Tensor:
        u = linear(x, self.weight)
        h = self.hidden_size
        gates = u[..., h:3 * h] + self.bias
        highway = u[..., 3 * h:] if self.reduces else x
        return torch.cat([u[..., :h], gates, highway], -1)

    def step(self, p: Tensor, state: Tensor) -> Tensor:
        u0, uf, ur, x = p.chunk(4, -1)
        c = state[..., : self.hidden_size]
        f, r = torch.sigmoid(uf), torch.sigmoid(ur)
        c = f * c + (1 - f) * u0
        return torch.cat([c, r * torch.tanh(c) + (1 - r) * x], -1)

    def sequence(self, projected: Tensor, mask: Tensor | None, state: Tensor) -> Tensor:
        """c of all steps as one linear scan (eq. 5, cells/scan.py), then h of all steps at once; on CUDA
        one Triton kernel for all of it (cells/triton)."""
        kernels = triton_path(projected, "sru")
        if kernels:
            return kernels.sequence(projected, mask, state)
        u0, uf, ur, x = projected.chunk(4, -1)
        f, r = torch.sigmoid(uf), torch.sigmoid(ur)
        c = masked_scan(f, (1 - f) * u0, state[..., : self.hidden_size], mask)
        return torch.cat([c, r * torch.tanh(c) + (1 - r) * x], -1)

    def output(self, state: Tensor) -> Tensor:
        return state[..., self.hidden_size:]
