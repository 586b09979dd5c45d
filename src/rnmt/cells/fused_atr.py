"""The ATR step with a hand-written backward (cells/fused_steps.py; the cell: cells/atr.py, Zhang et al.
2018 eqs. 6-9), for composite cells that chain it (the context-aware encoder's backward pass runs two ATR
steps per timestep). The single cell keeps its own loop, cells/fused.py's `ATRSequence`.

    q = U h + b,   i = σ(p + q),   f = σ(p − q),   h' = i ⊙ p + f ⊙ h

Backward at step t from ∂h':  ∂a_i = ∂h' ⊙ p ⊙ σ'(a_i),  ∂a_f = ∂h' ⊙ h ⊙ σ'(a_f),
∂p = ∂h' ⊙ i + ∂a_i + ∂a_f,  δ = ∂q = ∂a_i − ∂a_f,  ∂h = ∂h' ⊙ f + δ U;
after the loop ∂U = Σ_t δ_tᵀ h_t and ∂b = Σ_t δ_t.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rnmt.cells.fused_steps import StepKernel, product_grad, row_sum, sigmoid_grad
from rnmt.matmul import addmm, mm


class ATRKernel(StepKernel):
    def __init__(self, weight: Tensor, bias: Tensor) -> None:
        """U = weight [H, H], b = bias [H]; the projection is p = W x + b_x (H)."""
        super().__init__([weight, bias], weight.size(0))
        self.weight, self.bias = weight, bias

    def begin(self, p: Tensor, h0: Tensor) -> None:
        B, T, H = h0.size(0), p.size(1), h0.size(1)
        self.wt = self.weight.t()
        self.gates = h0.new_empty(B, T, 2 * H)                          # i, f
        self.delta = h0.new_empty(B, T, H)                              # ∂q of every step

    def forward(self, t: int, p: Tensor, h: Tensor, out: Tensor) -> None:
        H = h.size(1)
        q = addmm(self.bias, h, self.wt)
        i, f = self.gates[:, t].split(H, 1)
        torch.sigmoid(torch.add(p, q, out=i), out=i)
        torch.sigmoid(torch.sub(p, q, out=f), out=f)
        torch.mul(i, p, out=out).addcmul_(f, h)

    def backward(self, t: int, p: Tensor, h: Tensor, g: Tensor, dp: Tensor) -> Tensor:
        H = h.size(1)
        gates = self.gates[:, t]
        i, f = gates.split(H, 1)
        ds_i, ds_f = sigmoid_grad(gates).split(H, 1)
        d_i = g * p * ds_i
        d_f = g * h * ds_f
        torch.addcmul(d_i + d_f, g, i, out=dp)
        delta = torch.sub(d_i, d_f, out=self.delta[:, t])
        return mm(delta, self.weight).addcmul_(g, f)

    def grads(self, ins: Tensor, dp: Tensor) -> list[Tensor]:
        return [product_grad(self.delta, ins), row_sum(self.delta)]
