"""Autograd functions that run the recurrences as the Triton kernels of kernels.py.

`TritonATR` and `TritonGRU` take the arguments of cells/atr.py's ATRSequence
(time-major p [T, B, G·H], float mask m [T, B, 1] or None, h0 [B, H], W_hh, b_hh) and give the same
states [T, B, H]: per step one torch.addmm for W_hh h and one elementwise kernel, forward and backward;
∂L/∂W_hh and ∂L/∂b_hh are one product over all steps at the end (cells/kernel.py's `weight_grads`).
`sru_sequence` and `weak_sequence` take a cell's `sequence` arguments (projected [B, T, P], bool mask
[B, T] or None, state) and return its states [B, T, S]; one kernel runs the whole sequence forward and
one runs it backward.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
import triton
from torch import Tensor
from torch.autograd.function import once_differentiable

from rnmt.cells.kernel import weight_grads
from rnmt.cells.triton import kernels

STEP_BLOCK = 256       # elements per program of the per-step kernels (2 per thread with 4 warps)
SCAN_BLOCK = 128       # most hidden units per program of the whole-sequence kernels (1 per thread)


def _scan_grid(batch: int, hidden: int) -> tuple[tuple[int, int], dict[str, int]]:
    block = min(SCAN_BLOCK, max(16, triton.next_power_of_2(hidden)))
    return (batch, triton.cdiv(hidden, block)), {"BLOCK": block, "num_warps": max(1, min(4, block // 32))}


def _step_grid(n: int) -> tuple[tuple[int], dict[str, int]]:
    return (triton.cdiv(n, STEP_BLOCK),), {"BLOCK": STEP_BLOCK, "num_warps": 4}


def _device(x: Tensor) -> AbstractContextManager[Any]:
    """x's GPU as the current device: triton launches on the current one, which need not be x's (cuda:1)."""
    return torch.cuda.device(x.device) if x.is_cuda else nullcontext()


def _unit_stride(x: Tensor) -> Tensor:
    """x itself when its last dimension is contiguous (the kernels take the other strides), else a copy."""
    return x if x.stride(-1) == 1 else x.contiguous()


class TritonATR(torch.autograd.Function):
    """ATR (Zhang et al. 2018, eqs. 6-9): q = W_h h + b_h, i = σ(p + q), f = σ(p − q), h' = i ⊙ p + f ⊙ h."""

    @staticmethod
    def forward(ctx: Any, p: Tensor, m: Tensor | None, h0: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        T, B, H = p.shape
        hs, i_all, f_all = torch.empty_like(p), torch.empty_like(p), torch.empty_like(p)
        q = p.new_empty(B, H)
        grid, opts = _step_grid(B * H)
        wt, h = weight.t(), h0
        with _device(p):
            for t in range(T):
                torch.addmm(bias, h, wt, out=q)
                kernels.atr_step_forward[grid](p, q, h, p if m is None else m, hs, i_all, f_all, t, B * H, B, H,
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
        grid, opts = _step_grid(B * H)
        with _device(p):
            for t in range(T - 1, -1, -1):
                kernels.atr_step_backward[grid](g, grad, p if m is None else m, p, hs[t - 1] if t else h0, i_all,
                                                f_all, dp, dq, carry, t, B * H, B, H, HAS_MASK=m is not None, **opts)
                torch.addmm(carry, dq[t], weight, out=g)
        dw, db = weight_grads(dq, hs, h0)
        return dp, None, g, dw, db


class TritonGRU(torch.autograd.Function):
    """GRU (Cho et al. 2014), gates r, z, n as torch.nn.GRUCell: [g_r, g_z, g_n] = U h + c, r = σ(p_r + g_r),
    z = σ(p_z + g_z), n = tanh(p_n + r ⊙ g_n), h' = n + z ⊙ (h − n)."""

    @staticmethod
    def forward(ctx: Any, p: Tensor, m: Tensor | None, h0: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        T, (B, H) = p.size(0), h0.shape
        hs = p.new_empty(T, B, H)
        r_all, z_all, n_all, gn_all = (torch.empty_like(hs) for _ in range(4))
        gates = p.new_empty(B, 3 * H)
        grid, opts = _step_grid(B * H)
        wt, h = weight.t(), h0
        with _device(p):
            for t in range(T):
                torch.addmm(bias, h, wt, out=gates)
                kernels.gru_step_forward[grid](p, gates, h, p if m is None else m, hs, r_all, z_all, n_all, gn_all,
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
        grid, opts = _step_grid(B * H)
        with _device(hs):
            for t in range(T - 1, -1, -1):
                kernels.gru_step_backward[grid](g, grad, hs if m is None else m, hs[t - 1] if t else h0, r_all, z_all,
                                                n_all, gn_all, dp, dg, carry, t, B * H, B, H,
                                                HAS_MASK=m is not None, **opts)
                torch.addmm(carry, dg[t], weight, out=g)
        dw, db = weight_grads(dg, hs, h0)
        return dp, None, g, dw, db


def _float_mask(mask: Tensor | None, like: Tensor) -> Tensor | None:
    return None if mask is None else mask.to(like.dtype)


class TritonScan(torch.autograd.Function):
    """A whole-sequence recurrence as a pair of kernels (one program per batch row and block of hidden units
    loops over time): `forward` maps p [B, T, blocks·H] and the initial state s0 to the states [B, T, S],
    `backward` runs the loop in reverse to ∂p and ∂s0. SRU and SR-NMT's weak recurrence are such pairs."""

    @staticmethod
    def forward(ctx: Any, forward: Any, backward: Any, blocks: int, p: Tensor, m: Tensor | None, s0: Tensor) -> Tensor:
        B, T, P = p.shape
        H = P // blocks
        out = p.new_empty(B, T, s0.size(1))
        grid, opts = _scan_grid(B, H)
        mm = p if m is None else m
        with _device(p):
            forward[grid](p, mm, s0, out, T, H, p.stride(0), p.stride(1), mm.stride(0), mm.stride(1),
                          HAS_MASK=m is not None, **opts)
        ctx.backward_kernel, ctx.blocks = backward, blocks
        ctx.save_for_backward(p, m, s0, out)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        p, m, s0, out = ctx.saved_tensors
        B, T, P = p.shape
        H = P // ctx.blocks
        dp, ds0 = p.new_empty(B, T, P), torch.empty_like(s0)
        grid, opts = _scan_grid(B, H)
        mm = p if m is None else m
        with _device(p):
            ctx.backward_kernel[grid](p, mm, s0, out, grad.contiguous(), dp, ds0, T, H, p.stride(0), p.stride(1),
                                      mm.stride(0), mm.stride(1), HAS_MASK=m is not None, **opts)
        return None, None, None, dp, None, ds0


def sru_sequence(projected: Tensor, mask: Tensor | None, state: Tensor) -> Tensor:
    """SRU.sequence on the kernels (Lei et al. 2017, eqs. 3-7): projected [B, T, 4H] = [U₀, U₁ + b_f, U₂ + b_r,
    x'], state [c₀; h₀] → [c; h] of every step [B, T, 2H] (padded steps carry both c and h)."""
    return TritonScan.apply(kernels.sru_forward, kernels.sru_backward, 4, _unit_stride(projected),
                            _float_mask(mask, projected), state.contiguous())


def weak_sequence(projected: Tensor, mask: Tensor | None, state: Tensor) -> Tensor:
    """SR-NMT Recurrence.sequence on the kernels (Di Gangi & Federico 2018, section 3),
    h_t = (1 − σ(g)) ⊙ h_{t−1} + σ(g) ⊙ x̃: projected [B, T, 2H] = [x̃; g], state h₀ → h [B, T, H]."""
    return TritonScan.apply(kernels.weak_forward, kernels.weak_backward, 2, _unit_stride(projected),
                            _float_mask(mask, projected), state.contiguous())
