"""Long short-term memory (Hochreiter & Schmidhuber 1997), without peepholes, as torch.nn.LSTMCell.

    [i, f, g, o] = [σ, σ, tanh, σ](W x + b + U h + c)
    c' = f ⊙ c + i ⊙ g,   h' = o ⊙ tanh(c')

The state is [h; c]; weights are laid out as torch.nn.LSTMCell's (gate order i, f, g, o).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from rnmt.cells.base import RecurrentCell
from rnmt.cells.fused_lstm import LSTMKernel
from rnmt.cells.registry import register_cell
from rnmt.matmul import linear


@register_cell("lstm")
class LSTM(RecurrentCell):
    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__(input_size, hidden_size)
        self.weight_ih = nn.Parameter(torch.empty(4 * hidden_size, input_size))
        self.weight_hh = nn.Parameter(torch.empty(4 * hidden_size, hidden_size))
        self.bias_ih = nn.Parameter(torch.empty(4 * hidden_size))
        self.bias_hh = nn.Parameter(torch.empty(4 * hidden_size))
        bound = hidden_size ** -0.5
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    @property
    def state_size(self) -> int:
        return 2 * self.hidden_size

    @property
    def projection_size(self) -> int:
        return 4 * self.hidden_size

    def project_inputs(self, x: Tensor) -> Tensor:
        return linear(x, self.weight_ih, self.bias_ih)

    def step(self, p: Tensor, state: Tensor) -> Tensor:
        h, c = state.chunk(2, -1)
        i, f, g, o = (p + linear(h, self.weight_hh, self.bias_hh)).chunk(4, -1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.cat([torch.sigmoid(o) * torch.tanh(c), c], -1)

    def output(self, state: Tensor) -> Tensor:
        return state[..., : self.hidden_size]

    def step_kernel(self) -> LSTMKernel:
        return LSTMKernel(self.weight_hh, self.bias_hh, "ifgo")
