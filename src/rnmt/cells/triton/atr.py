"""ATR's recurrence on CUDA (Zhang et al. 2018, eqs. 6-9): one elementwise kernel a step, forward and
backward, around the per-step product W_h h (cells/triton/common.py says how the kernels work).

`TritonATR` takes the arguments of cells/atr.py's ATRSequence (time-major p [T, B, H], float mask
m [T, B, 1] or None, h0 [B, H], W_hh, b_hh) and gives the same states [T, B, H].
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor
from torch.autograd.function import once_differentiable

from rnmt.cells.kernel import weight_grads
from rnmt.cells.triton.common import STEP_BLOCK, on_device, step_grid


@triton.jit(do_not_specialize=["t"])
def atr_step_forward(p_ptr, q_ptr, h_ptr, m_ptr, hs_ptr, i_ptr, f_ptr, t, N, B, H,
                     HAS_MASK: tl.constexpr, BLOCK: tl.constexpr):
    """Step t: p [T, B, H], q = W_h h + b_h and h [B, H] → hs[t], and the gates i[t], f[t] for backward:
    i = σ(p + q), f = σ(p − q), h' = i ⊙ p + f ⊙ h (N = B·H)."""
    k = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = k < N
    at = t.to(tl.int64) * N + k
    p = tl.load(p_ptr + at, mask=ok, other=0.0)
    q = tl.load(q_ptr + k, mask=ok, other=0.0)
    h = tl.load(h_ptr + k, mask=ok, other=0.0)
    i = tl.sigmoid(p + q)
    f = tl.sigmoid(p - q)
    new = i * p + f * h
    if HAS_MASK:
        new = tl.where(tl.load(m_ptr + t * B + k // H, mask=ok, other=0.0) != 0, new, h)
    tl.store(hs_ptr + at, new, mask=ok)
    tl.store(i_ptr + at, i, mask=ok)
    tl.store(f_ptr + at, f, mask=ok)


@triton.jit(do_not_specialize=["t"])
def atr_step_backward(g_ptr, grad_ptr, m_ptr, p_ptr, h_ptr, i_ptr, f_ptr, dp_ptr, dq_ptr, carry_ptr, t, N, B, H,
                      HAS_MASK: tl.constexpr, BLOCK: tl.constexpr):
    """Step t backward. γ = g + grad[t] reaches h_t (where padded: zero dp, dq and carry = γ);
    ∂(p+q) = γ ⊙ i(1 − i) ⊙ p, ∂(p−q) = γ ⊙ f(1 − f) ⊙ h → dq[t] = ∂(p+q) − ∂(p−q),
    dp[t] = γ ⊙ i + ∂(p+q) + ∂(p−q), carry = γ ⊙ f (the caller adds dq[t] W_h for h_{t−1}'s gradient)."""
    k = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = k < N
    at = t.to(tl.int64) * N + k
    g = tl.load(g_ptr + k, mask=ok, other=0.0) + tl.load(grad_ptr + at, mask=ok, other=0.0)
    i = tl.load(i_ptr + at, mask=ok, other=0.0)
    f = tl.load(f_ptr + at, mask=ok, other=0.0)
    p = tl.load(p_ptr + at, mask=ok, other=0.0)
    h = tl.load(h_ptr + k, mask=ok, other=0.0)
    gi = g * i
    gf = g * f
    di = gi * (1.0 - i) * p
    df = gf * (1.0 - f) * h
    dq = di - df
    dp = gi + di + df
    if HAS_MASK:
        keep = tl.load(m_ptr + t * B + k // H, mask=ok, other=0.0) != 0
        dq = tl.where(keep, dq, 0.0)
        dp = tl.where(keep, dp, 0.0)
        gf = tl.where(keep, gf, g)
    tl.store(dq_ptr + at, dq, mask=ok)
    tl.store(dp_ptr + at, dp, mask=ok)
    tl.store(carry_ptr + k, gf, mask=ok)


class TritonATR(torch.autograd.Function):
    """ATR (Zhang et al. 2018, eqs. 6-9): q = W_h h + b_h, i = σ(p + q), f = σ(p − q), h' = i ⊙ p + f ⊙ h."""

    @staticmethod
    def forward(ctx: Any, p: Tensor, m: Tensor | None, h0: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        T, B, H = p.shape
        hs, i_all, f_all = torch.empty_like(p), torch.empty_like(p), torch.empty_like(p)
        q = p.new_empty(B, H)
        grid, opts = step_grid(B * H)
        wt, h = weight.t(), h0
        with on_device(p):
            for t in range(T):
                torch.addmm(bias, h, wt, out=q)
                atr_step_forward[grid](p, q, h, p if m is None else m, hs, i_all, f_all, t, B * H, B, H,
                                       HAS_MASK=m is not None, **opts)
                h = hs[t]
        ctx.save_for_backward(p, m, h0, weight, hs, i_all, f_all)
        return hs

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        p, m, h0, weight, hs, i_all, f_all = ctx.saved_tensors
        grad = grad.contiguous()
        T, B, H = p.shape
        dp, dq = torch.empty_like(p), torch.empty_like(p)
        g, carry = torch.zeros_like(h0), torch.empty_like(h0)
        grid, opts = step_grid(B * H)
        with on_device(p):
            for t in range(T - 1, -1, -1):
                atr_step_backward[grid](g, grad, p if m is None else m, p, hs[t - 1] if t else h0, i_all,
                                        f_all, dp, dq, carry, t, B * H, B, H, HAS_MASK=m is not None, **opts)
                torch.addmm(carry, dq[t], weight, out=g)
        dw, db = weight_grads(dq, hs, h0)
        return dp, None, g, dw, db


KERNELS = (atr_step_forward, atr_step_backward)
BLOCK = STEP_BLOCK
