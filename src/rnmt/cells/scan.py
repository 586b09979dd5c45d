"""The elementwise linear recurrence h_t = f_t ⊙ h_{t−1} + u_t over a whole sequence, with its own backward.

SRU's cell state (c_t = f_t ⊙ c_{t−1} + (1 − f_t) ⊙ U₀, Lei et al. 2017 eq. 5) and the SR-NMT
weakly-recurrent state (h_t = (1 − σ(g_t)) ⊙ h_{t−1} + σ(g_t) ⊙ x̃_t, Di Gangi & Federico 2018 section 3)
are such recurrences: nothing in them multiplies a matrix, so the autograd graph of a step loop costs
more than the arithmetic. `linear_scan` runs the loop without a graph and differentiates it in one
backward loop:

    g_t = ∂L/∂h_t + f_{t+1} ⊙ g_{t+1},   ∂L/∂u_t = g_t,   ∂L/∂f_t = g_t ⊙ h_{t−1},   ∂L/∂h_0 = f_1 ⊙ g_1

A padded timestep is f = 1, u = 0 (the state is carried unchanged), see `masked_scan`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable


class _LinearScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, f: Tensor, u: Tensor, h0: Tensor) -> Tensor:
        """f, u [T, B, H] (time-major, contiguous), h0 [B, H] → h [T, B, H]."""
        hs = torch.empty_like(u)
        h = h0
        for t in range(u.size(0)):
            h = torch.addcmul(u[t], f[t], h, out=hs[t])
        ctx.save_for_backward(f, hs, h0)
        return hs

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        f, hs, h0 = ctx.saved_tensors
        grad = grad.contiguous()
        du = torch.empty_like(grad)
        T = grad.size(0)
        g = du[T - 1].copy_(grad[T - 1])
        for t in range(T - 2, -1, -1):
            g = torch.addcmul(grad[t], f[t + 1], g, out=du[t])
        df = du * torch.cat([h0.unsqueeze(0), hs[:-1]])
        return df, du, f[0] * du[0]


def linear_scan(f: Tensor, u: Tensor, h0: Tensor) -> Tensor:
    """h_t = f_t ⊙ h_{t−1} + u_t for f, u [B, T, H] and h0 [B, H] → h [B, T, H]."""
    return _LinearScan.apply(f.transpose(0, 1).contiguous(), u.transpose(0, 1).contiguous(),
                             h0.contiguous()).transpose(0, 1)


def masked_scan(f: Tensor, u: Tensor, h0: Tensor, mask: Tensor | None) -> Tensor:
    """`linear_scan` where mask [B, T] is False at padding: there f = 1 and u = 0, so h is carried."""
    if mask is not None:
        m = mask.unsqueeze(-1)
        f = torch.where(m, f, torch.ones_like(f))
        u = torch.where(m, u, torch.zeros_like(u))
    return linear_scan(f, u, h0)
