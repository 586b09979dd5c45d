"""The additive attention of one decoder step as Triton kernels, for the fused RNNSearch decoder on CUDA
(models/decoder_sequence.py holds the equations): one program per sentence does the step's energies,
masked softmax and context (forward), or their backward, where the torch path launches about seven and
ten kernels. Arithmetic is in the tensors' dtype (float32 or float64).

Forward, sentence b: u = σ(2K_b + 2q_b) (kept for the backward), e = u · 2v, α = softmax over the real
positions, c = Σ_k α_k m_k. Backward, from ∂c: ∂α_k = m_k · ∂c, ∂e = α ⊙ (∂α − Σ α ∂α), and with
w = u(1 − u): ∂q = 2v ⊙ Σ_k ∂e_k w_k, the keys' running sum ∂K̃ += ∂e ⊗ w (scaled by 2v once after the
loop), v's per-sentence running sum ∂ṽ_b += Σ_k ∂e_k u_k (summed over sentences and doubled after it).
The source length is one block (at most MAX_SOURCE positions); the widths are looped over in blocks.
"""

from __future__ import annotations

import triton
import triton.language as tl
from torch import Tensor

from rnmt.cells.triton.common import on_device

MAX_SOURCE = 256       # longer sources take the torch path: a [source, BLOCK_W] tile a program stays in registers
BLOCK_W = 64           # attention and memory width per loop iteration


@triton.jit
def attention_step_forward(q_ptr, keys2_ptr, v2_ptr, mask_ptr, mem_ptr, u_ptr, alpha_ptr, ctx_ptr,
                           S, A, M, alpha_stride, ctx_stride, BLOCK_S: tl.constexpr, BLOCK_W: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    s = tl.arange(0, BLOCK_S)
    real = s < S
    e = tl.zeros([BLOCK_S], dtype=q_ptr.dtype.element_ty)
    for a0 in range(0, A, BLOCK_W):
        a = a0 + tl.arange(0, BLOCK_W)
        ok = real[:, None] & (a < A)[None, :]
        at = b * S * A + s[:, None] * A + a[None, :]
        q = tl.load(q_ptr + b * A + a, mask=a < A, other=0.0)
        x = tl.load(keys2_ptr + at, mask=ok, other=0.0) + 2.0 * q[None, :]
        u = 1.0 / (1.0 + tl.exp(-x))
        tl.store(u_ptr + at, u, mask=ok)
        v = tl.load(v2_ptr + a, mask=a < A, other=0.0)
        e += tl.sum(tl.where(ok, u * v[None, :], 0.0), axis=1)
    keep = tl.load(mask_ptr + b * S + s, mask=real, other=0) != 0
    e = tl.where(keep, e, float("-inf"))
    p = tl.exp(e - tl.max(e, axis=0))
    alpha = p / tl.sum(p, axis=0)
    tl.store(alpha_ptr + b * alpha_stride + s, alpha, mask=real)
    for m0 in range(0, M, BLOCK_W):
        m = m0 + tl.arange(0, BLOCK_W)
        ok = real[:, None] & (m < M)[None, :]
        mem = tl.load(mem_ptr + b * S * M + s[:, None] * M + m[None, :], mask=ok, other=0.0)
        tl.store(ctx_ptr + b * ctx_stride + m, tl.sum(alpha[:, None] * mem, axis=0), mask=m < M)


@triton.jit
def attention_step_backward(dc_ptr, mem_ptr, alpha_ptr, u_ptr, v4_ptr, dq_ptr, d_keys_ptr, dv_ptr,
                            S, A, M, alpha_stride, dc_stride, dq_stride, BLOCK_S: tl.constexpr,
                            BLOCK_W: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    s = tl.arange(0, BLOCK_S)
    real = s < S
    alpha = tl.load(alpha_ptr + b * alpha_stride + s, mask=real, other=0.0)
    d_alpha = tl.zeros_like(alpha)
    for m0 in range(0, M, BLOCK_W):
        m = m0 + tl.arange(0, BLOCK_W)
        ok = real[:, None] & (m < M)[None, :]
        mem = tl.load(mem_ptr + b * S * M + s[:, None] * M + m[None, :], mask=ok, other=0.0)
        dc = tl.load(dc_ptr + b * dc_stride + m, mask=m < M, other=0.0)
        d_alpha += tl.sum(mem * dc[None, :], axis=1)
    d_e = alpha * (d_alpha - tl.sum(alpha * d_alpha, axis=0))
    for a0 in range(0, A, BLOCK_W):
        a = a0 + tl.arange(0, BLOCK_W)
        ok = real[:, None] & (a < A)[None, :]
        at = b * S * A + s[:, None] * A + a[None, :]
        u = tl.load(u_ptr + at, mask=ok, other=0.0)
        w = u - u * u
        v = tl.load(v4_ptr + a, mask=a < A, other=0.0)
        tl.store(dq_ptr + b * dq_stride + a, v * tl.sum(d_e[:, None] * w, axis=0), mask=a < A)
        tl.store(d_keys_ptr + at, tl.load(d_keys_ptr + at, mask=ok, other=0.0) + d_e[:, None] * w, mask=ok)
        dv = tl.load(dv_ptr + b * A + a, mask=a < A, other=0.0)
        tl.store(dv_ptr + b * A + a, dv + tl.sum(d_e[:, None] * u, axis=0), mask=a < A)


def block(source: int) -> int:
    return max(16, triton.next_power_of_2(source))


def forward(q: Tensor, keys2: Tensor, v2: Tensor, mask: Tensor, memory: Tensor, u: Tensor, alpha: Tensor,
            context: Tensor) -> None:
    """One step: q [B, A], keys2 = 2K [B, S, A], v2 = 2v [A], mask [B, S] (int8), memory [B, S, M] →
    u [B, S, A], alpha [B, S] and context [B, M] (rows of wider tensors: their batch stride is taken)."""
    B, S, A = keys2.shape
    with on_device(q):
        attention_step_forward[(B,)](q, keys2, v2, mask, memory, u, alpha, context, S, A, memory.size(2),
                                     alpha.stride(0), context.stride(0), BLOCK_S=block(S), BLOCK_W=BLOCK_W)


def backward(dc: Tensor, memory: Tensor, alpha: Tensor, u: Tensor, v4: Tensor, dq: Tensor, d_keys: Tensor,
             dv: Tensor) -> None:
    """One step backwards from dc [B, M]: writes dq [B, A], adds to d_keys [B, S, A] and dv [B, A]."""
    B, S, A = u.shape
    with on_device(dc):
        attention_step_backward[(B,)](dc, memory, alpha, u, v4, dq, d_keys, dv, S, A, memory.size(2),
                                      alpha.stride(0), dc.stride(0), dq.stride(0), BLOCK_S=block(S),
                                      BLOCK_W=BLOCK_W)


KERNELS = (attention_step_forward, attention_step_backward)
