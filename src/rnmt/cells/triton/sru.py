"""SRU's recurrence on CUDA (Lei et al. 2017, eqs. 3-7): one kernel runs the whole sequence forward and one
runs it backward (cells/triton/common.py says how the kernels work). `sequence` takes the SRU cell's
`sequence` arguments (projected [B, T, 4H], bool mask [B, T] or None, state [c₀; h₀]) and returns [c; h] of
every step [B, T, 2H].
"""

from __future__ import annotations

import triton
import triton.language as tl
from torch import Tensor

from rnmt.cells.triton.common import SCAN_BLOCK, TritonScan, float_mask, tanh, unit_stride


@triton.jit
def sru_forward(u_ptr, m_ptr, s0_ptr, out_ptr, T, H, su_b, su_t, sm_b, sm_t,
                HAS_MASK: tl.constexpr, BLOCK: tl.constexpr):
    """u [B, T, 4H] = [U₀, U₁ + b_f, U₂ + b_r, x'], s0 [B, 2H] = [c₀; h₀] (contiguous) → out [B, T, 2H] = [c; h]:
    f = σ(U₁ + b_f), r = σ(U₂ + b_r), c_t = f ⊙ c_{t−1} + (1 − f) ⊙ U₀, h_t = r ⊙ tanh(c_t) + (1 − r) ⊙ x'."""
    b = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = j < H
    c = tl.load(s0_ptr + b * 2 * H + j, mask=ok, other=0.0)
    h = tl.load(s0_ptr + b * 2 * H + H + j, mask=ok, other=0.0)
    u = u_ptr + b * su_b + j
    out = out_ptr + b * T * 2 * H + j
    for t in range(T):
        u0 = tl.load(u + t * su_t, mask=ok, other=0.0)
        f = tl.sigmoid(tl.load(u + t * su_t + H, mask=ok, other=0.0))
        r = tl.sigmoid(tl.load(u + t * su_t + 2 * H, mask=ok, other=0.0))
        x = tl.load(u + t * su_t + 3 * H, mask=ok, other=0.0)
        c_new = f * c + (1.0 - f) * u0
        h_new = r * tanh(c_new) + (1.0 - r) * x
        if HAS_MASK:
            keep = tl.load(m_ptr + b * sm_b + t * sm_t) != 0
            c = tl.where(keep, c_new, c)
            h = tl.where(keep, h_new, h)
        else:
            c = c_new
            h = h_new
        tl.store(out + t * 2 * H, c, mask=ok)
        tl.store(out + t * 2 * H + H, h, mask=ok)


@triton.jit
def sru_backward(u_ptr, m_ptr, s0_ptr, out_ptr, grad_ptr, du_ptr, ds0_ptr, T, H, su_b, su_t, sm_b, sm_t,
                 HAS_MASK: tl.constexpr, BLOCK: tl.constexpr):
    """Reverse loop of `sru_forward`; grad [B, T, 2H] = ∂L/∂out (contiguous) → du [B, T, 4H], ds0 [B, 2H].

    With γ_c, γ_h the gradients reaching c_t, h_t (from the output and from step t + 1):
        γ̂ = γ_c + γ_h ⊙ r ⊙ (1 − tanh²c_t)
        ∂U₀ = γ̂ ⊙ (1 − f),  ∂U₁ = γ̂ ⊙ (c_{t−1} − U₀) ⊙ f(1 − f),  ∂U₂ = γ_h ⊙ (tanh c_t − x') ⊙ r(1 − r),
        ∂x' = γ_h ⊙ (1 − r),  γ_c ← γ̂ ⊙ f,  γ_h ← 0 (h_t does not read h_{t−1}).
    A padded step passes γ_c, γ_h on unchanged and has zero ∂U."""
    b = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = j < H
    c0 = tl.load(s0_ptr + b * 2 * H + j, mask=ok, other=0.0)
    u = u_ptr + b * su_b + j
    du = du_ptr + b * T * 4 * H + j
    out = out_ptr + b * T * 2 * H + j
    grad = grad_ptr + b * T * 2 * H + j
    gc = tl.zeros([BLOCK], dtype=c0.dtype)
    gh = tl.zeros([BLOCK], dtype=c0.dtype)
    c = tl.load(out + (T - 1) * 2 * H, mask=ok, other=0.0)
    for s in range(T):
        t = T - 1 - s
        c_prev = tl.where(t > 0, tl.load(out + tl.maximum(t - 1, 0) * 2 * H, mask=ok, other=0.0), c0)
        gc += tl.load(grad + t * 2 * H, mask=ok, other=0.0)
        gh += tl.load(grad + t * 2 * H + H, mask=ok, other=0.0)
        u0 = tl.load(u + t * su_t, mask=ok, other=0.0)
        f = tl.sigmoid(tl.load(u + t * su_t + H, mask=ok, other=0.0))
        r = tl.sigmoid(tl.load(u + t * su_t + 2 * H, mask=ok, other=0.0))
        x = tl.load(u + t * su_t + 3 * H, mask=ok, other=0.0)
        tc = tanh(c)
        g = gc + gh * r * (1.0 - tc * tc)
        d0 = g * (1.0 - f)
        df = g * (c_prev - u0) * f * (1.0 - f)
        dr = gh * (tc - x) * r * (1.0 - r)
        dx = gh * (1.0 - r)
        if HAS_MASK:
            keep = tl.load(m_ptr + b * sm_b + t * sm_t) != 0
            d0 = tl.where(keep, d0, 0.0)
            df = tl.where(keep, df, 0.0)
            dr = tl.where(keep, dr, 0.0)
            dx = tl.where(keep, dx, 0.0)
            gc = tl.where(keep, g * f, gc)
            gh = tl.where(keep, 0.0, gh)
        else:
            gc = g * f
            gh = tl.zeros([BLOCK], dtype=c0.dtype)
        tl.store(du + t * 4 * H, d0, mask=ok)
        tl.store(du + t * 4 * H + H, df, mask=ok)
        tl.store(du + t * 4 * H + 2 * H, dr, mask=ok)
        tl.store(du + t * 4 * H + 3 * H, dx, mask=ok)
        c = c_prev
    tl.store(ds0_ptr + b * 2 * H + j, gc, mask=ok)
    tl.store(ds0_ptr + b * 2 * H + H + j, gh, mask=ok)


def sequence(projected: Tensor, mask: Tensor | None, state: Tensor) -> Tensor:
    """SRU.sequence on the kernels (Lei et al. 2017, eqs. 3-7): projected [B, T, 4H] = [U₀, U₁ + b_f, U₂ + b_r,
    x'], state [c₀; h₀] → [c; h] of every step [B, T, 2H] (padded steps carry both c and h)."""
    return TritonScan.apply(sru_forward, sru_backward, 4, unit_stride(projected),
                            float_mask(mask, projected), state.contiguous())


KERNELS = (sru_forward, sru_backward)
BLOCK = SCAN_BLOCK
