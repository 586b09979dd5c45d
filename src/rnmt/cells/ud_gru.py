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

from rnmt.cells.kernel import StepKernel, product_grad, sigmoid_grad, tanh, tanh_grad
from rnmt.cells.registry import register_cell
from rnmt.cells.single_product import SingleProductCell
from rnmt.machine.matmul import addmm


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


class UDGRUKernel(StepKernel):
    """The UD paper's single-product GRU step with a hand-written backward for cells/kernel.py's loop.

        [a_u, a_f, a_n] = p + W_h h,   u, f, n = σ(a_u), σ(a_f), tanh(a_n)
        h' = (1 − u) ⊙ f ⊙ h + u ⊙ n        (coupled)        h' = f ⊙ h + u ⊙ n        (not coupled)

    Backward at step t from ∂h', with k = ∂h' ⊙ (1 − u) (coupled) or ∂h':
        ∂a_u = ∂h' ⊙ (n − f ⊙ h) ⊙ σ'(a_u)   (not coupled: ∂h' ⊙ n ⊙ σ'(a_u)),   ∂a_f = k ⊙ h ⊙ σ'(a_f),
        ∂a_n = ∂h' ⊙ u ⊙ (1 − n²),   ∂h = k ⊙ f + ∂a W_h;   after the loop ∂W_h = Σ_t ∂a_tᵀ h_{t−1}.
    """

    def __init__(self, weight: Tensor, coupled: bool) -> None:
        """W_h = weight [3H, H]; the projection p = W_x x + b is [3H]."""
        super().__init__([weight], weight.size(0))
        self.weight, self.coupled = weight, coupled
        self.H = weight.size(1)

    def begin(self, p: Tensor, h0: Tensor) -> None:
        self.wt = self.weight.t()
        self.acts = h0.new_empty(h0.size(0), p.size(1), 3 * self.H)      # u, f, n

    def forward(self, t: int, p: Tensor, h: Tensor, out: Tensor) -> None:
        H, acts = self.H, self.acts[:, t]
        a = addmm(p, h, self.wt)
        torch.sigmoid(a[:, : 2 * H], out=acts[:, : 2 * H])
        u, f, n = acts.split(H, 1)
        tanh(a[:, 2 * H:], out=n)
        kept = f * h
        if self.coupled:
            kept.addcmul_(u, kept, value=-1)
        torch.addcmul(kept, u, n, out=out)

    def backward(self, t: int, p: Tensor, h: Tensor, g: Tensor, dp: Tensor) -> Tensor:
        H, acts = self.H, self.acts[:, t]
        u, f, n = acts.split(H, 1)
        ds = sigmoid_grad(acts[:, : 2 * H])
        k = torch.addcmul(g, g, u, value=-1) if self.coupled else g
        du = torch.addcmul(n, f, h, value=-1) if self.coupled else n
        torch.mul(g * du, ds[:, :H], out=dp[:, :H])
        torch.mul(k * h, ds[:, H:], out=dp[:, H:2 * H])
        torch.mul(g * u, tanh_grad(n), out=dp[:, 2 * H:])
        return addmm(k * f, dp, self.weight)

    def grads(self, ins: Tensor, dp: Tensor) -> list[Tensor]:
        return [product_grad(dp, ins)]
