"""The whole-sequence ATR recurrence with a hand-written backward through time (time-major; the Triton
kernels for ATR and GRU take the same layout and reuse `time_major` and `_weight_grads`).

A step loop under autograd records every elementwise op of every step and, in backward, multiplies
the state gradient by W_hh once per step for the weight gradient too ([H, B] × [B, H] products, far
from the machine's peak). Here the forward loop runs without a graph, keeping only the gates, and the
backward loop computes per step only what the recurrence needs (the state gradient, one [B, G·H] ×
[G·H, H] product); the weight gradient of all steps is then ONE product,
∂L/∂W_hh = Σ_t δ_tᵀ h_{t−1} = Δᵀ H_prev over [T·B] rows, and ∂L/∂b_hh = Σ_t δ_t.

Equations (cells/atr.py): ATR (Zhang et al. 2018, eqs. 6-9), q = W_h h + b_h,
i = σ(p + q), f = σ(p − q), h' = i ⊙ p + f ⊙ h. The other cells' loops are their step kernels chained by
cells/fused_steps.py (batch-major); ATR keeps this one, 3-10% faster than its kernel's at hidden 256
(2 threads, same-process A/B; equal at 512 and 1000), while the GRU's time-major twin was dropped for its
kernel's loop (equal within noise: 94,491 vs 95,965 tokens/s at 256, 9,817 vs 9,881 at 1000).
Padded steps (mask False) carry the state: h' = m ⊙ new + (1 − m) ⊙ h.
All tensors are time-major: p [T, B, G·H], m [T, B, 1] (float) or None, h0 [B, H].
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from rnmt.matmul import addmm, mm


def _carry(new: Tensor, h: Tensor, m: Tensor | None, out: Tensor) -> Tensor:
    """out ← m ⊙ new + (1 − m) ⊙ h (just new without a mask)."""
    if m is None:
        return out.copy_(new)
    return torch.lerp(h, new, m, out=out)


def _weight_grads(delta: Tensor, hs: Tensor, h0: Tensor) -> tuple[Tensor, Tensor]:
    """Δ [T, B, G·H] and the states → (∂L/∂W_hh [G·H, H], ∂L/∂b_hh [G·H]) in one product each."""
    dw = mm(delta[0].t(), h0)                  # step 0 reads h0; steps 1.. read hs[:-1] (no copy of the states)
    if delta.size(0) > 1:
        dw = addmm(dw, delta[1:].flatten(0, 1).t(), hs[:-1].flatten(0, 1))
    return dw, delta.flatten(0, 1).sum(0)


def time_major(projected: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """[B, T, P] and mask [B, T] → contiguous [T, B, P] and a float mask [T, B, 1] (or None)."""
    p = projected.transpose(0, 1).contiguous()
    return p, None if mask is None else mask.t().unsqueeze(-1).to(p.dtype).contiguous()


class ATRSequence(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, p: Tensor, m: Tensor | None, h0: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        T = p.size(0)
        hs, i_all, f_all = torch.empty_like(p), torch.empty_like(p), torch.empty_like(p)
        wt, h = weight.t(), h0
        for t in range(T):
            q = addmm(bias, h, wt)
            i = torch.sigmoid(torch.add(p[t], q, out=i_all[t]), out=i_all[t])
            f = torch.sigmoid(torch.sub(p[t], q, out=f_all[t]), out=f_all[t])
            new = torch.addcmul(i * p[t], f, h)
            h = _carry(new, h, None if m is None else m[t], hs[t])
        ctx.save_for_backward(p, m, h0, weight, hs, i_all, f_all)
        return hs

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        p, m, h0, weight, hs, i_all, f_all = ctx.saved_tensors
        grad = grad.contiguous()
        T = p.size(0)
        dp, dq = torch.empty_like(p), torch.empty_like(p)
        g = torch.zeros_like(h0)
        for t in range(T - 1, -1, -1):
            g = g + grad[t]
            h = hs[t - 1] if t else h0
            gn = g if m is None else g * m[t]
            i, f = i_all[t], f_all[t]
            gi, gf = gn * i, gn * f                                  # gf: the state's direct path
            di = gi * (1 - i) * p[t]                                 # ∂L/∂(p + q) through i
            df = gf * (1 - f) * h                                    # ∂L/∂(p − q) through f
            torch.sub(di, df, out=dq[t])
            torch.add(gi + di, df, out=dp[t])
            carried = gf if m is None else torch.addcmul(gf, g, 1 - m[t])
            g = addmm(carried, dq[t], weight)
        dw, db = _weight_grads(dq, hs, h0)
        return dp, None, g, dw, db
