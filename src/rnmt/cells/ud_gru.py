"""The UD paper's single-product GRU (section 2, Figure 1): Cho et al.'s GRU with its reset gate turned
into an LSTM-style forget gate, so that the candidate needs no second product with r ⊙ h:

    [u; f; ñ] = W [x_t; h_{t-1}] + b                 (one product, `SingleProductCell`)
    u = σ(u),  f = σ(f),  n = tanh(ñ)
    h_t = (1 − u) ⊙ f ⊙ h_{t-1} + u ⊙ n              (coupled=True: the GRU's update gate kept)
    h_t = f ⊙ h_{t-1} + u ⊙ n                        (coupled=False: u and f independent, as in an LSTM)

The paper gives the change in words only ("for the GRU this only means changing the reset gate into an
LSTM-style forget gate"); the coupled form changes nothing else and is the default. Weights: 3n(m + n)
(+ 3n biases), the same as the paper's GRU count 2(n² + nm) + (n² + nm) (section 1).
"""

from __future__ import annotations

import torch
from torch import Tensor

from rnmt.cells.fused_ud_gru import UDGRUKernel
from rnmt.cells.registry import register_cell
from rnmt.cells.single_product import SingleProductCell


@register_cell("ud-gru")
class UDGRU(SingleProductCell):
    blocks = 3

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, coupled: bool = True) -> None:
        super().__init__(input_size, hidden_size, bias)
        self.coupled = coupled

    def step(self, p: Tensor, state: Tensor) -> Tensor:
        a_u, a_f, a_n = self.preactivations(p, state)
        u, f, n = torch.sigmoid(a_u), torch.sigmoid(a_f), torch.tanh(a_n)
        kept = f * state
        if self.coupled:
            kept = (1 - u) * kept
        return kept + u * n

    def step_kernel(self) -> UDGRUKernel:
        return UDGRUKernel(self.weight_hh, self.coupled)
