"""What the cells' Triton kernels share: two elementwise helpers for the kernels, the launch grids, and
`TritonScan`, the autograd function of a whole-sequence recurrence run as a pair of kernels (SRU's and
SR-NMT's). Each cell's kernels and autograd function are in the file named after the cell.

Whole-sequence kernels (SRU, SR-NMT): one program per (batch row, block of hidden units) loops over
time in registers, as the SRU paper's CUDA kernel does (Lei et al. 2017, section 3.1: "the
element-wise operations ... compiled into a single kernel function", parallel over batch and hidden).
Inputs are batch-major [B, T, ·] with unit stride in the last dimension; outputs are contiguous.

Per-step kernels (ATR, GRU): the recurrent product W_h h stays a cuBLAS matrix product per step (the
caller's, through rnmt.machine.matmul: under autocast its operands in autocast's dtype and its result in
float32, matmul `narrow`); everything elementwise of one step is one kernel, forward and backward. They work
on time-major [T, B, ·] tensors flattened to B·H elements per step; ∂L/∂W_hh and ∂L/∂b_hh are one
product over all steps at the end (cells/kernel.py's `weight_grads`).

Mask: m [B, T] (strides given) or [T, B] for the per-step kernels, nonzero at real tokens; a padded step
carries the state unchanged (h_t = h_{t−1}) and gets zero input gradients. `HAS_MASK=False`: no padding,
the mask pointer is not read. Arithmetic is in the tensors' dtype (float32 or float64).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor
from torch.autograd.function import once_differentiable


@triton.jit
def tanh(x):
    """tanh from one exp, without overflow: sign(x) (1 − e^{−2|x|}) / (1 + e^{−2|x|})."""
    e = tl.exp(-2.0 * tl.abs(x))
    y = (1.0 - e) / (1.0 + e)
    return tl.where(x < 0, -y, y)


@triton.jit
def lerp(a, b, w):
    """a + w (b − a), evaluated from the nearer end as torch.lerp does (exact at w = 0 and w = 1)."""
    return tl.where(w < 0.5, a + w * (b - a), b - (b - a) * (1.0 - w))


@triton.jit
def group_sync(sync_ptr, target):
    """Wait until `target` arrivals at the counter *sync_ptr, this program's included: a barrier across the
    programs of a persistent kernel, which must all be resident at once (no more of them than the GPU has
    multiprocessors). Each program's writes before the call are seen by every program's reads after it
    (PTX memory model): the CTA barrier orders its threads' stores before one thread's add, a release at
    GPU scope; one thread's acquiring reads of the counter and the CTA barrier after them order every
    later read of the CTA. Triton compiles this to `red.global.gpu.release.add` and a loop of
    `ld.global.gpu.acquire` by thread 0 (tests/test_cells_triton.py checks both). The counter only grows,
    so one zeroed counter serves every step of a launch."""
    tl.debug_barrier()
    tl.atomic_add(sync_ptr, 1, sem="release", scope="gpu")
    while tl.atomic_add(sync_ptr, 0, sem="acquire", scope="gpu") < target:
        pass
    tl.debug_barrier()


@triton.jit
def row_units(B, H, BLOCK: tl.constexpr):
    """This program's block of a step's B·H units for the row kernels (whose tensors are rows of wider ones, a
    row stride apart): (flat index k, in range, row as int64, unit within the row)."""
    k = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    return k, k < B * H, (k // H).to(tl.int64), k % H


def check_rows(*rows: Tensor) -> None:
    """The row kernels take rows whose units are adjacent (stride 1 in the last dimension)."""
    if any(x.stride(-1) != 1 for x in rows):
        raise ValueError("the cells' row kernels take rows whose units are adjacent (stride 1 in the last dimension)")


STEP_BLOCK = 256       # elements per program of the per-step kernels (2 per thread with 4 warps)
SCAN_BLOCK = 128       # most hidden units per program of the whole-sequence kernels (1 per thread)


def scan_grid(batch: int, hidden: int) -> tuple[tuple[int, int], dict[str, int]]:
    block = min(SCAN_BLOCK, max(16, triton.next_power_of_2(hidden)))
    return (batch, triton.cdiv(hidden, block)), {"BLOCK": block, "num_warps": max(1, min(4, block // 32))}


def step_grid(n: int) -> tuple[tuple[int], dict[str, int]]:
    return (triton.cdiv(n, STEP_BLOCK),), {"BLOCK": STEP_BLOCK, "num_warps": 4}


def on_device(x: Tensor) -> AbstractContextManager[Any]:
    """x's GPU as the current device: triton launches on the current one, which need not be x's (cuda:1)."""
    return torch.cuda.device(x.device) if x.is_cuda else nullcontext()


def unit_stride(x: Tensor) -> Tensor:
    """x itself when its last dimension is contiguous (the kernels take the other strides), else a copy."""
    return x if x.stride(-1) == 1 else x.contiguous()


def float_mask(mask: Tensor | None, like: Tensor) -> Tensor | None:
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
        grid, opts = scan_grid(B, H)
        mm = p if m is None else m
        with on_device(p):
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
        grid, opts = scan_grid(B, H)
        mm = p if m is None else m
        with on_device(p):
            ctx.backward_kernel[grid](p, mm, s0, out, grad.contiguous(), dp, ds0, T, H, p.stride(0), p.stride(1),
                                      mm.stride(0), mm.stride(1), HAS_MASK=m is not None, **opts)
        return None, None, None, dp, None, ds0
