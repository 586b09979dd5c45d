"""The RAN step with a hand-written backward (cells/fused_steps.py; the cell: cells/ran.py, Lee et al. 2017).

    p = [c̃, W_x x + b],   r = tanh(c) (or r = c without `output_tanh`)
    [i, f] = σ(p_g + U r),   c' = i ⊙ c̃ + f ⊙ c                                 (state c)

Backward at step t from ∂c':  ∂c̃ = ∂c' ⊙ i,  ∂a_i = ∂c' ⊙ c̃ ⊙ σ'(a_i),  ∂a_f = ∂c' ⊙ c ⊙ σ'(a_f),
∂c = ∂c' ⊙ f + (∂a U) ⊙ (1 − r²)  (without `output_tanh`: + ∂a U);  after the loop ∂U = Σ_t ∂a_tᵀ r_t.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rnmt.cells.fused_steps import StepKernel, product_grad, sigmoid_grad, tanh, tanh_grad
from rnmt.matmul import addmm, mm


class RANKernel(StepKernel):
    def __init__(self, weight: Tensor, output_tanh: bool) -> None:
        """U = weight [2H, H]; the projection is [c̃, p_i, p_f] (3H)."""
        super().__init__([weight], 3 * weight.size(1))
        self.weight, self.output_tanh = weight, output_tanh
        self.H = weight.size(1)

    def begin(self, p: Tensor, h0: Tensor) -> None:
        B, T, H = h0.size(0), p.size(1), self.H
        self.wt = self.weight.t()
        self.gates = h0.new_empty(B, T, 2 * H)                         # i, f
        self.reads = h0.new_empty(B, T, H) if self.output_tanh else None

    def forward(self, t: int, p: Tensor, h: Tensor, out: Tensor) -> None:
        H = self.H
        r = tanh(h, out=self.reads[:, t]) if self.reads is not None else h
        i, f = torch.sigmoid(addmm(p[:, H:], r, self.wt), out=self.gates[:, t]).split(H, 1)
        torch.mul(i, p[:, :H], out=out).addcmul_(f, h)

    def backward(self, t: int, p: Tensor, h: Tensor, g: Tensor, dp: Tensor) -> Tensor:
        H = self.H
        i, f = self.gates[:, t].split(H, 1)
        ds = sigmoid_grad(self.gates[:, t])
        torch.mul(g, i, out=dp[:, :H])
        torch.mul(g * p[:, :H], ds[:, :H], out=dp[:, H:2 * H])
        torch.mul(g * h, ds[:, H:], out=dp[:, 2 * H:])
        back = mm(dp[:, H:], self.weight)
        if self.reads is not None:
            back.mul_(tanh_grad(self.reads[:, t]))
        return back.addcmul_(g, f)

    def grads(self, ins: Tensor, dp: Tensor) -> list[Tensor]:
        return [product_grad(dp[..., self.H:], ins if self.reads is None else self.reads)]
