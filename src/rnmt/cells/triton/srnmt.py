"""SR-NMT's weakly-recurrent state on CUDA (Di Gangi & Federico 2018, section 3): one kernel runs the whole
sequence forward and one runs it backward (cells/triton/common.py says how the kernels work). `sequence`
takes the cell's `sequence` arguments (projected [B, T, 2H] = [x̃; g], bool mask [B, T] or None, h₀) and
returns h of every step [B, T, H].
"""

from __future__ import annotations

import triton
import triton.language as tl
from torch import Tensor

from rnmt.cells.triton.common import SCAN_BLOCK, TritonScan, float_mask, lerp, unit_stride


@triton.jit
def weak_forward(p_ptr, m_ptr, h0_ptr, out_ptr, T, H, sp_b, sp_t, sm_b, sm_t,
                 HAS_MASK: tl.constexpr, BLOCK: tl.constexpr):
    """p [B, T, 2H] = [x̃; g], h0 [B, H] (contiguous) → out [B, T, H]: h_t = (1 − σ(g)) ⊙ h_{t−1} + σ(g) ⊙ x̃."""
    b = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = j < H
    h = tl.load(h0_ptr + b * H + j, mask=ok, other=0.0)
    p = p_ptr + b * sp_b + j
    out = out_ptr + b * T * H + j
    for t in range(T):
        x = tl.load(p + t * sp_t, mask=ok, other=0.0)
        a = tl.sigmoid(tl.load(p + t * sp_t + H, mask=ok, other=0.0))
        new = lerp(h, x, a)
        if HAS_MASK:
            new = tl.where(tl.load(m_ptr + b * sm_b + t * sm_t) != 0, new, h)
        h = new
        tl.store(out + t * H, h, mask=ok)


@triton.jit
def weak_backward(p_ptr, m_ptr, h0_ptr, out_ptr, grad_ptr, dp_ptr, dh0_ptr, T, H, sp_b, sp_t, sm_b, sm_t,
                  HAS_MASK: tl.constexpr, BLOCK: tl.constexpr):
    """Reverse loop of `weak_forward`; grad [B, T, H] (contiguous) → dp [B, T, 2H], dh0 [B, H]. With γ the
    gradient reaching h_t and a = σ(g): ∂x̃ = γ ⊙ a, ∂g = γ ⊙ (x̃ − h_{t−1}) ⊙ a(1 − a), γ ← γ ⊙ (1 − a)."""
    b = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = j < H
    h0 = tl.load(h0_ptr + b * H + j, mask=ok, other=0.0)
    p = p_ptr + b * sp_b + j
    dp = dp_ptr + b * T * 2 * H + j
    out = out_ptr + b * T * H + j
    grad = grad_ptr + b * T * H + j
    gh = tl.zeros([BLOCK], dtype=h0.dtype)
    for s in range(T):
        t = T - 1 - s
        h_prev = tl.where(t > 0, tl.load(out + tl.maximum(t - 1, 0) * H, mask=ok, other=0.0), h0)
        gh += tl.load(grad + t * H, mask=ok, other=0.0)
        x = tl.load(p + t * sp_t, mask=ok, other=0.0)
        a = tl.sigmoid(tl.load(p + t * sp_t + H, mask=ok, other=0.0))
        dx = gh * a
        dg = gh * (x - h_prev) * a * (1.0 - a)
        if HAS_MASK:
            keep = tl.load(m_ptr + b * sm_b + t * sm_t) != 0
            dx = tl.where(keep, dx, 0.0)
            dg = tl.where(keep, dg, 0.0)
            gh = tl.where(keep, gh * (1.0 - a), gh)
        else:
            gh = gh * (1.0 - a)
        tl.store(dp + t * 2 * H, dx, mask=ok)
        tl.store(dp + t * 2 * H + H, dg, mask=ok)
    tl.store(dh0_ptr + b * H + j, gh, mask=ok)


def sequence(projected: Tensor, mask: Tensor | None, state: Tensor) -> Tensor:
    """SR-NMT Recurrence.sequence on the kernels (Di Gangi & Federico 2018, section 3),
    h_t = (1 − σ(g)) ⊙ h_{t−1} + σ(g) ⊙ x̃: projected [B, T, 2H] = [x̃; g], state h₀ → h [B, T, H]."""
    return TritonScan.apply(weak_forward, weak_backward, 2, unit_stride(projected),
                            float_mask(mask, projected), state.contiguous())


KERNELS = (weak_forward, weak_backward)
BLOCK = SCAN_BLOCK
