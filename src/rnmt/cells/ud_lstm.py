"""The UD paper's single-product LSTM (section 2, Figure 1), the LSTM of the Theano tutorial the paper
follows: no peephole connections, every gate from the input and the previous output only:

    [ĩ; f̃; õ; c̃] = W [x_t; h_{t-1}] + b              (one product, `SingleProductCell`; tutorial order)
    c_t = σ(f̃) ⊙ c_{t-1} + σ(ĩ) ⊙ tanh(c̃)
    h_t = σ(õ) ⊙ tanh(c_t)

The state is [h; c] (2n); the next layer sees h. Weights: 4n(m + n) (+ 4n biases): the paper's LSTM
count 3(n² + n² + nm) + (n² + nm) (section 1) less the three n² cell-to-gate matrices it removes.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rnmt.cells.lstm import LSTMKernel
from rnmt.cells.registry import register_cell
from rnmt.cells.single_product import SingleProductCell


@register_cell("ud-lstm")
class UDLSTM(SingleProductCell):
    blocks = 4

    @property
    def state_size(self) -> int:
        return 2 * self.hidden_size

    def output(self, state: Tensor) -> Tensor:
        return state[..., : self.hidden_size]

    def step(self, p: Tensor, state: Tensor) -> Tensor:
        a_i, a_f, a_o, a_c = self.preactivations(p, state)
        c = torch.sigmoid(a_f) * state[:, self.hidden_size:] + torch.sigmoid(a_i) * torch.tanh(a_c)
        return torch.cat([torch.sigmoid(a_o) * torch.tanh(c), c], -1)

    def step_kernel(self) -> LSTMKernel:
        return LSTMKernel(self.weight_hh, None, "ifog")
