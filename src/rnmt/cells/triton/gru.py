"""The GRU's recurrence on CUDA (Cho et al. 2014), gates as torch.nn.GRUCell: one elementwise kernel a
step, forward and backward, around the per-step product U h (cells/triton/common.py says how the kernels
work). `TritonGRU` takes the arguments of cells/atr.py's ATRSequence with p [T, B, 3H] and gives the
states [T, B, H].
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor
from torch.autograd.function import once_differentiable

from rnmt.cells.kernel import weight_grads
from rnmt.cells.triton.common import STEP_BLOCK, on_device, step_grid, tanh


@triton.jit(do_not_specialize=["t"])
def gru_step_forward(p_ptr, gates_ptr, h_ptr, m_ptr, hs_ptr, r_ptr, z_ptr, n_ptr, gn_ptr, t, N, B, H,
                     HAS_MASK: tl.constexpr, BLOCK: tl.constexpr):
    """Step t: p [T, B, 3H], gates = U h + c [B, 3H], h [B, H] → hs[t] and r, z, n, g_n at [t] (all [T, B, H]):
    r = σ(p_r + g_r), z = σ(p_z + g_z), n = tanh(p_n + r ⊙ g_n), h' = n + z ⊙ (h − n)."""
    k = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = k < N
    row = k // H
    col = row * 3 * H + k % H                          # the r-gate entry of unit k in a [B, 3H] row
    at = t.to(tl.int64) * N + k
    pt = p_ptr + t.to(tl.int64) * 3 * N + col
    r = tl.sigmoid(tl.load(pt, mask=ok, other=0.0) + tl.load(gates_ptr + col, mask=ok, other=0.0))
    z = tl.sigmoid(tl.load(pt + H, mask=ok, other=0.0) + tl.load(gates_ptr + col + H, mask=ok, other=0.0))
    g_n = tl.load(gates_ptr + col + 2 * H, mask=ok, other=0.0)
    n = tanh(tl.load(pt + 2 * H, mask=ok, other=0.0) + r * g_n)
    h = tl.load(h_ptr + k, mask=ok, other=0.0)
    new = n + z * (h - n)
    if HAS_MASK:
        new = tl.where(tl.load(m_ptr + t * B + row, mask=ok, other=0.0) != 0, new, h)
    tl.store(hs_ptr + at, new, mask=ok)
    tl.store(r_ptr + at, r, mask=ok)
    tl.store(z_ptr + at, z, mask=ok)
    tl.store(n_ptr + at, n, mask=ok)
    tl.store(gn_ptr + at, g_n, mask=ok)


@triton.jit(do_not_specialize=["t"])
def gru_step_backward(g_ptr, grad_ptr, m_ptr, h_ptr, r_ptr, z_ptr, n_ptr, gn_ptr, dp_ptr, dg_ptr, carry_ptr,
                      t, N, B, H, HAS_MASK: tl.constexpr, BLOCK: tl.constexpr):
    """Step t backward. γ = g + grad[t] reaches h_t (where padded: zero dp, dg and carry = γ); ∂n = γ ⊙ (1 − z)(1 − n²),
    ∂z = γ ⊙ (h − n) ⊙ z(1 − z), ∂r = ∂n ⊙ g_n ⊙ r(1 − r) → dp[t] = [∂r, ∂z, ∂n] (pre-activations),
    dg[t] = [∂r, ∂z, ∂n ⊙ r] (the gates' U h + c), carry = γ ⊙ z (the caller adds dg[t] U)."""
    k = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = k < N
    row = k // H
    at = t.to(tl.int64) * N + k
    wide = t.to(tl.int64) * 3 * N + row * 3 * H + k % H
    g = tl.load(g_ptr + k, mask=ok, other=0.0) + tl.load(grad_ptr + at, mask=ok, other=0.0)
    r = tl.load(r_ptr + at, mask=ok, other=0.0)
    z = tl.load(z_ptr + at, mask=ok, other=0.0)
    n = tl.load(n_ptr + at, mask=ok, other=0.0)
    h = tl.load(h_ptr + k, mask=ok, other=0.0)
    dn = g * (1.0 - z) * (1.0 - n * n)
    dz = g * (h - n) * z * (1.0 - z)
    dr = dn * tl.load(gn_ptr + at, mask=ok, other=0.0) * r * (1.0 - r)
    carry = g * z
    if HAS_MASK:
        keep = tl.load(m_ptr + t * B + row, mask=ok, other=0.0) != 0
        dn = tl.where(keep, dn, 0.0)
        dz = tl.where(keep, dz, 0.0)
        dr = tl.where(keep, dr, 0.0)
        carry = tl.where(keep, carry, g)
    tl.store(dp_ptr + wide, dr, mask=ok)
    tl.store(dp_ptr + wide + H, dz, mask=ok)
    tl.store(dp_ptr + wide + 2 * H, dn, mask=ok)
    tl.store(dg_ptr + wide, dr, mask=ok)
    tl.store(dg_ptr + wide + H, dz, mask=ok)
    tl.store(dg_ptr + wide + 2 * H, dn * r, mask=ok)
    tl.store(carry_ptr + k, carry, mask=ok)


class TritonGRU(torch.autograd.Function):
    """GRU (Cho et al. 2014), gates r, z, n as torch.nn.GRUCell: [g_r, g_z, g_n] = U h + c, r = σ(p_r + g_r),
    z = σ(p_z + g_z), n = tanh(p_n + r ⊙ g_n), h' = n + z ⊙ (h − n)."""

    @staticmethod
    def forward(ctx: Any, p: Tensor, m: Tensor | None, h0: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        T, (B, H) = p.size(0), h0.shape
        hs = p.new_empty(T, B, H)
        r_all, z_all, n_all, gn_all = (torch.empty_like(hs) for _ in range(4))
        gates = p.new_empty(B, 3 * H)
        grid, opts = step_grid(B * H)
        wt, h = weight.t(), h0
        with on_device(p):
            for t in range(T):
                torch.addmm(bias, h, wt, out=gates)
                gru_step_forward[grid](p, gates, h, p if m is None else m, hs, r_all, z_all, n_all, gn_all,
                                       t, B * H, B, H, HAS_MASK=m is not None, **opts)
                h = hs[t]
        ctx.save_for_backward(m, h0, weight, hs, r_all, z_all, n_all, gn_all)
        return hs

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        m, h0, weight, hs, r_all, z_all, n_all, gn_all = ctx.saved_tensors
        grad = grad.contiguous()
        T, (B, H) = hs.size(0), h0.shape
        dp = hs.new_empty(T, B, 3 * H)
        dg = torch.empty_like(dp)
        g, carry = torch.zeros_like(h0), torch.empty_like(h0)
        grid, opts = step_grid(B * H)
        with on_device(hs):
            for t in range(T - 1, -1, -1):
                gru_step_backward[grid](g, grad, hs if m is None else m, hs[t - 1] if t else h0, r_all, z_all,
                                        n_all, gn_all, dp, dg, carry, t, B * H, B, H,
                                        HAS_MASK=m is not None, **opts)
                torch.addmm(carry, dg[t], weight, out=g)
        dw, db = weight_grads(dg, hs, h0)
        return dp, None, g, dw, db


KERNELS = (gru_step_forward, gru_step_backward)
BLOCK = STEP_BLOCK
