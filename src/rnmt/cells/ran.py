"""Recurrent additive network (Lee et al. 2017; ATR paper section 2 and Table 1).

    c̃ = W_c x                       (content; absent in the simplest version, where c̃ = x)
    [i, f] = σ(W_x x + U h + b)
    c' = i ⊙ c̃ + f ⊙ c,   h' = tanh(c')   (or h' = c' with `output_tanh=False`)

The state is c; h is computed from it. The content projection is used when the input size differs
from the hidden size (or when `content_projection=True`); the simplest version has the 4 weight
matrices of the ATR paper's Table 1.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from rnmt.cells.base import RecurrentCell
from rnmt.cells.kernel import StepKernel, product_grad, sigmoid_grad, tanh, tanh_grad
from rnmt.cells.registry import register_cell
from rnmt.io import InputError
from rnmt.machine.matmul import addmm, linear, mm


@register_cell("ran")
class RAN(RecurrentCell):
    def __init__(self, input_size: int, hidden_size: int, content_projection: bool | None = None,
                 output_tanh: bool = True) -> None:
        super().__init__(input_size, hidden_size)
        if content_projection is None:
            content_projection = input_size != hidden_size
        if not content_projection and input_size != hidden_size:
            raise InputError(f"ran: without a content projection the input size ({input_size}) must equal the "
                             f"hidden size ({hidden_size}); set content_projection: true")
        self.output_tanh = output_tanh
        self.weight_content = nn.Parameter(torch.empty(hidden_size, input_size)) if content_projection else None
        self.weight_ih = nn.Parameter(torch.empty(2 * hidden_size, input_size))
        self.weight_hh = nn.Parameter(torch.empty(2 * hidden_size, hidden_size))
        self.bias = nn.Parameter(torch.empty(2 * hidden_size))
        bound = hidden_size ** -0.5
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    @property
    def projection_size(self) -> int:
        return 3 * self.hidden_size

    def project_inputs(self, x: Tensor) -> Tensor:
        content = x if self.weight_content is None else linear(x, self.weight_content)
        return torch.cat([content, linear(x, self.weight_ih, self.bias)], -1)

    def step(self, p: Tensor, state: Tensor) -> Tensor:
        content, gx = p.split([self.hidden_size, 2 * self.hidden_size], -1)
        i, f = torch.sigmoid(gx + linear(self.output(state), self.weight_hh)).chunk(2, -1)
        return i * content + f * state

    def output(self, state: Tensor) -> Tensor:
        return torch.tanh(state) if self.output_tanh else state

    def step_kernel(self) -> RANKernel:
        return RANKernel(self.weight_hh, self.output_tanh)


class RANKernel(StepKernel):
    """The RAN step with a hand-written backward for cells/kernel.py's loop.

        p = [c̃, W_x x + b],   r = tanh(c) (or r = c without `output_tanh`)
        [i, f] = σ(p_g + U r),   c' = i ⊙ c̃ + f ⊙ c                                 (state c)

    Backward at step t from ∂c':  ∂c̃ = ∂c' ⊙ i,  ∂a_i = ∂c' ⊙ c̃ ⊙ σ'(a_i),  ∂a_f = ∂c' ⊙ c ⊙ σ'(a_f),
    ∂c = ∂c' ⊙ f + (∂a U) ⊙ (1 − r²)  (without `output_tanh`: + ∂a U);  after the loop ∂U = Σ_t ∂a_tᵀ r_t.
    """

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
