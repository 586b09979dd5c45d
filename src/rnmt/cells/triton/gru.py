"""The GRU's recurrence on CUDA (Cho et al. 2014), gates as torch.nn.GRUCell: one elementwise kernel a
step, forward and backward, around the per-step product U h (cells/triton/common.py says how the kernels
work). `TritonGRU` takes the arguments of cells/atr.py's ATRSequence with p [T, B, 3H] and gives the
states [T, B, H].

The GRU with the reset gate inside the product (the ATR paper's eq. 4, cells/gru.py `ResetBeforeKernel`) has
two products a step, U_rz h and U_n (r ⊙ h), the second reading what the first's gates made: its step on rows
of the batch-major buffers is two kernels each way around them (`reset_before_forward`,
`reset_before_backward`), where torch's operations took seven forward and about ten backward.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor
from torch.autograd.function import once_differentiable

from rnmt.cells.kernel import weight_grads
from rnmt.cells.triton.common import STEP_BLOCK, check_rows, on_device, row_units, step_grid, tanh
from rnmt.machine.matmul import addmm, mm, narrow, products_dtype


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


@triton.jit
def gru_gates_rows(p_ptr, q_ptr, b_ptr, h_ptr, s_ptr, rh_ptr, B, H, p_row, h_row, s_row, rh_row,
                   BLOCK: tl.constexpr):
    """[r, z] = σ(p_rz + q_rz + c_rz) (q = U_rz h dense [B, 2H], c_rz [2H]) into s's rows and r ⊙ h into rh's,
    over B rows of H units."""
    k, ok, r_, c = row_units(B, H, BLOCK)
    r = tl.sigmoid(tl.load(p_ptr + r_ * p_row + c, mask=ok, other=0.0) + tl.load(q_ptr + r_ * 2 * H + c, mask=ok,
                                                                                 other=0.0)
                   + tl.load(b_ptr + c, mask=ok, other=0.0))
    z = tl.sigmoid(tl.load(p_ptr + r_ * p_row + c + H, mask=ok, other=0.0) +
                   tl.load(q_ptr + r_ * 2 * H + c + H, mask=ok, other=0.0) + tl.load(b_ptr + c + H, mask=ok, other=0.0))
    tl.store(s_ptr + r_ * s_row + c, r, mask=ok)
    tl.store(s_ptr + r_ * s_row + c + H, z, mask=ok)
    tl.store(rh_ptr + r_ * rh_row + c, r * tl.load(h_ptr + r_ * h_row + c, mask=ok, other=0.0), mask=ok)


@triton.jit
def gru_candidate_rows(p_ptr, q_ptr, b_ptr, h_ptr, s_ptr, n_ptr, out_ptr, B, H, p_row, h_row, s_row, n_row,
                       out_row, BLOCK: tl.constexpr):
    """n = tanh(p_n + q_n + c_n) (p_n at [2H, 3H) of p's rows, q_n = U_n (r ⊙ h) dense [B, H], c_n [H]) into n's
    rows, and the new state h' = n + z ⊙ (h − n) into out's."""
    k, ok, r_, c = row_units(B, H, BLOCK)
    n = tanh(tl.load(p_ptr + r_ * p_row + c + 2 * H, mask=ok, other=0.0) + tl.load(q_ptr + k, mask=ok, other=0.0)
             + tl.load(b_ptr + c, mask=ok, other=0.0))
    z = tl.load(s_ptr + r_ * s_row + c + H, mask=ok, other=0.0)
    h = tl.load(h_ptr + r_ * h_row + c, mask=ok, other=0.0)
    tl.store(n_ptr + r_ * n_row + c, n, mask=ok)
    tl.store(out_ptr + r_ * out_row + c, n + z * (h - n), mask=ok)


@triton.jit
def gru_candidate_rows_backward(g_ptr, h_ptr, s_ptr, n_ptr, d_ptr, B, H, g_row, h_row, s_row, n_row, d_row,
                                BLOCK: tl.constexpr):
    """From g = ∂L/∂h': ∂q_n = g (1 − z)(1 − n²) and ∂q_z = g (h − n) z(1 − z) into d's rows ([∂q_r, ∂q_z, ∂q_n])."""
    k, ok, r_, c = row_units(B, H, BLOCK)
    g = tl.load(g_ptr + r_ * g_row + c, mask=ok, other=0.0)
    z = tl.load(s_ptr + r_ * s_row + c + H, mask=ok, other=0.0)
    n = tl.load(n_ptr + r_ * n_row + c, mask=ok, other=0.0)
    h = tl.load(h_ptr + r_ * h_row + c, mask=ok, other=0.0)
    tl.store(d_ptr + r_ * d_row + c + 2 * H, (g - g * z) * (1.0 - n * n), mask=ok)
    tl.store(d_ptr + r_ * d_row + c + H, g * (h - n) * (z - z * z), mask=ok)


@triton.jit
def gru_gates_rows_backward(g_ptr, d_rh_ptr, h_ptr, s_ptr, d_ptr, dp_ptr, carry_ptr, B, H, g_row, h_row, s_row,
                            d_row, dp_row, BLOCK: tl.constexpr):
    """From g and ∂(r ⊙ h) = ∂q_n U_n (dense): ∂q_r = ∂(r ⊙ h) h r(1 − r) into d's rows, all of d's row copied
    to dp's (∂p = ∂q: p and q enter the gates alike), and the state's direct paths g ⊙ z + ∂(r ⊙ h) ⊙ r (dense)."""
    k, ok, r_, c = row_units(B, H, BLOCK)
    g = tl.load(g_ptr + r_ * g_row + c, mask=ok, other=0.0)
    d_rh = tl.load(d_rh_ptr + k, mask=ok, other=0.0)
    r = tl.load(s_ptr + r_ * s_row + c, mask=ok, other=0.0)
    z = tl.load(s_ptr + r_ * s_row + c + H, mask=ok, other=0.0)
    d_r = d_rh * tl.load(h_ptr + r_ * h_row + c, mask=ok, other=0.0) * (r - r * r)
    tl.store(d_ptr + r_ * d_row + c, d_r, mask=ok)
    tl.store(dp_ptr + r_ * dp_row + c, d_r, mask=ok)
    for part in tl.static_range(1, 3):
        tl.store(dp_ptr + r_ * dp_row + c + part * H, tl.load(d_ptr + r_ * d_row + c + part * H, mask=ok, other=0.0),
                 mask=ok)
    tl.store(carry_ptr + k, g * z + d_rh * r, mask=ok)


def reset_before_forward(p: Tensor, h: Tensor, w_rz_t: Tensor, b_rz: Tensor, w_n_t: Tensor, b_n: Tensor,
                         s: Tensor, rh: Tensor, n: Tensor, out: Tensor) -> None:
    """One step of the GRU with the reset gate inside the product, on rows: p [B, 3H], h [B, H] → the gates
    s = [r, z], r ⊙ h, the candidate n and the new state out (rows of the kernel's buffers)."""
    B, H = h.shape
    check_rows(p, h, s, rh, n, out)
    grid, opts = step_grid(B * H)
    b_rz, b_n = b_rz.contiguous(), b_n.contiguous()
    with on_device(h):                              # the biases are added by the kernels, not by the products
        gru_gates_rows[grid](p, mm(h, w_rz_t), b_rz, h, s, rh, B, H, p.stride(0), h.stride(0), s.stride(0),
                             rh.stride(0), **opts)
        gru_candidate_rows[grid](p, mm(rh, w_n_t), b_n, h, s, n, out, B, H, p.stride(0), h.stride(0), s.stride(0),
                                 n.stride(0), out.stride(0), **opts)


def reset_before_backward(g: Tensor, h: Tensor, s: Tensor, n: Tensor, w_rz: Tensor, w_n: Tensor, delta: Tensor,
                          dp: Tensor) -> Tensor:
    """One step backwards from g = ∂L/∂h' [B, H]: writes ∂[q_r, q_z, q_n] into delta's rows and ∂p (the same)
    into dp's, and returns ∂L/∂h."""
    B, H = h.shape
    check_rows(g, h, s, n, delta, dp)
    grid, opts = step_grid(B * H)
    carry = h.new_empty(B, H)
    with on_device(h):
        gru_candidate_rows_backward[grid](g, h, s, n, delta, B, H, g.stride(0), h.stride(0), s.stride(0),
                                          n.stride(0), delta.stride(0), **opts)
        d_rh = mm(delta[:, 2 * H:], w_n)
        gru_gates_rows_backward[grid](g, d_rh, h, s, delta, dp, carry, B, H, g.stride(0), h.stride(0), s.stride(0),
                                      delta.stride(0), dp.stride(0), **opts)
        return addmm(carry, delta[:, :2 * H], w_rz)


class TritonGRU(torch.autograd.Function):
    """GRU (Cho et al. 2014), gates r, z, n as torch.nn.GRUCell: [g_r, g_z, g_n] = U h + c, r = σ(p_r + g_r),
    z = σ(p_z + g_z), n = tanh(p_n + r ⊙ g_n), h' = n + z ⊙ (h − n)."""

    @staticmethod
    def forward(ctx: Any, p: Tensor, m: Tensor | None, h0: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        T, (B, H) = p.size(0), h0.shape
        hs = p.new_empty(T, B, H)
        r_all, z_all, n_all, gn_all = (torch.empty_like(hs) for _ in range(4))
        grid, opts = step_grid(B * H)
        wt, h, low = weight.t(), h0, products_dtype(p)
        with on_device(p), narrow(low, [weight]):
            for t in range(T):
                gates = addmm(bias, h, wt)
                gru_step_forward[grid](p, gates, h, p if m is None else m, hs, r_all, z_all, n_all, gn_all,
                                       t, B * H, B, H, HAS_MASK=m is not None, **opts)
                h = hs[t]
        ctx.low = low
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
        with on_device(hs), narrow(ctx.low, [weight]):
            for t in range(T - 1, -1, -1):
                gru_step_backward[grid](g, grad, hs if m is None else m, hs[t - 1] if t else h0, r_all, z_all,
                                        n_all, gn_all, dp, dg, carry, t, B * H, B, H,
                                        HAS_MASK=m is not None, **opts)
                g = addmm(carry, dg[t], weight)
            dw, db = weight_grads(dg, hs, h0)
        return dp, None, g, dw, db


KERNELS = (gru_step_forward, gru_step_backward, gru_gates_rows, gru_candidate_rows, gru_candidate_rows_backward,
           gru_gates_rows_backward)
BLOCK = STEP_BLOCK
