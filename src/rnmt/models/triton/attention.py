"""The additive attention of one decoder step as Triton kernels, for the fused decoders on CUDA (RNNSearch's
and DTMT's multi-head one; models/decoder_sequence.py holds the equations): two kernels forward and two
backward, where the torch path launches about seven and ten kernels. Arithmetic is in the tensors' dtype
(float32 or float64). With several heads every width block lies in one head, whose energies, softmax and
∂α sum that head's blocks only; v, a head wide, is shared by the heads.

Forward, sentence b: u = σ(2K_b + 2q_b) (kept for the backward), e = u · 2v, α = softmax over the real
positions, c = Σ_k α_k m_k. Backward, from ∂c: ∂α_k = m_k · ∂c, ∂e = α ⊙ (∂α − Σ α ∂α), and with
w = u(1 − u): ∂q = 2v ⊙ Σ_k ∂e_k w_k, the keys' running sum ∂K̃ += ∂e ⊗ w (scaled by 2v once after the
loop), v's per-sentence running sum ∂ṽ_b += Σ_k ∂e_k u_k (summed over sentences and doubled after it).

Each kernel's programs split a sentence's widths (the attention width A or the memory width M) into blocks
of BLOCK_W, one program a (sentence, block): at ATR Table 4's sizes (80 sentences, A = M = 2000) that is
2,560 programs a launch, each reading its [source, BLOCK_W] tile once, where one program a sentence
looping over its widths kept 80 multiprocessors waiting on memory. The source length is one block (at most
MAX_SOURCE positions). What a sum over widths needs from the other programs goes through a small buffer of
partial sums between the two kernels of a pass: the energies' blocks [B, A blocks, source] forward, ∂α's
blocks [B, M blocks, source] backward; the second kernel of each sums them (and recomputes the softmax or
∂e, a source's worth of work) in every program.
"""

from __future__ import annotations

import triton
import triton.language as tl
from torch import Tensor

from rnmt.cells.triton.common import on_device

MAX_SOURCE = 256       # longer sources take the torch path: a [source, BLOCK_W] tile a program stays in registers
BLOCK_W = 64           # attention and memory width of one program
MIN_W = 16             # the narrowest a program takes where heads split the widths


@triton.jit
def attention_step_energies(q_ptr, keys2_ptr, v2_ptr, u_ptr, part_ptr, S, A, D, KEYS_SCALE: tl.constexpr,
                            KEEP_U: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_W: tl.constexpr):
    """Program (b, j): u = σ(2K_b + 2q_b) over widths block j, and that block's part of e = u · 2v (v, of a
    head's width D, repeats for every head). keys2 holds 2K, or K where KEYS_SCALE is 2 (a search's step reads
    the decoder state's keys); u is kept for the backward where KEEP_U."""
    b, j = tl.program_id(0).to(tl.int64), tl.program_id(1)
    s = tl.arange(0, BLOCK_S)
    a = j * BLOCK_W + tl.arange(0, BLOCK_W)
    real, wide = s < S, a < A
    ok = real[:, None] & wide[None, :]
    at = b * S * A + s[:, None] * A + a[None, :]
    q = tl.load(q_ptr + b * A + a, mask=wide, other=0.0)
    keys2 = tl.load(keys2_ptr + at, mask=ok, other=0.0)
    if KEYS_SCALE != 1:
        keys2 = keys2 * KEYS_SCALE
    u = 1.0 / (1.0 + tl.exp(-(keys2 + 2.0 * q[None, :])))
    if KEEP_U:
        tl.store(u_ptr + at, u, mask=ok)
    v = tl.load(v2_ptr + a % D, mask=wide, other=0.0)
    tl.store(part_ptr + (b * tl.num_programs(1) + j) * BLOCK_S + s, tl.sum(tl.where(ok, u * v[None, :], 0.0), axis=1))


@triton.jit
def attention_step_forward(part_ptr, mask_ptr, mem_ptr, alpha_ptr, ctx_ptr, S, M, E, PARTS, HEAD_PARTS,
                           alpha_stride, head_stride, ctx_stride, BLOCK_S: tl.constexpr, BLOCK_W: tl.constexpr):
    """Program (b, i): memory widths block i, of head h = i·BLOCK_W / E (E: a head's memory width): e of head h
    from its HEAD_PARTS blocks of the PARTS energies' blocks, α = masked softmax (written by the head's first
    block), and the block's widths of the context."""
    b, i = tl.program_id(0).to(tl.int64), tl.program_id(1)
    h = (i * BLOCK_W) // E
    s = tl.arange(0, BLOCK_S)
    real = s < S
    e = tl.zeros([BLOCK_S], dtype=part_ptr.dtype.element_ty)
    for j in range(0, HEAD_PARTS):
        e += tl.load(part_ptr + (b * PARTS + h * HEAD_PARTS + j) * BLOCK_S + s)
    keep = tl.load(mask_ptr + b * S + s, mask=real, other=0) != 0
    e = tl.where(keep, e, float("-inf"))
    p = tl.exp(e - tl.max(e, axis=0))
    alpha = p / tl.sum(p, axis=0)
    if (i * BLOCK_W) % E == 0:
        tl.store(alpha_ptr + b * alpha_stride + h * head_stride + s, alpha, mask=real)
    m = i * BLOCK_W + tl.arange(0, BLOCK_W)
    ok = real[:, None] & (m < M)[None, :]
    mem = tl.load(mem_ptr + b * S * M + s[:, None] * M + m[None, :], mask=ok, other=0.0)
    tl.store(ctx_ptr + b * ctx_stride + m, tl.sum(alpha[:, None] * mem, axis=0), mask=m < M)


@triton.jit
def attention_step_scores_backward(dc_ptr, mem_ptr, part_ptr, S, M, dc_stride, BLOCK_S: tl.constexpr,
                                   BLOCK_W: tl.constexpr):
    """Program (b, i): memory widths block i's part of ∂α_k = m_k · ∂c (of the block's head)."""
    b, i = tl.program_id(0).to(tl.int64), tl.program_id(1)
    s = tl.arange(0, BLOCK_S)
    m = i * BLOCK_W + tl.arange(0, BLOCK_W)
    ok = (s < S)[:, None] & (m < M)[None, :]
    mem = tl.load(mem_ptr + b * S * M + s[:, None] * M + m[None, :], mask=ok, other=0.0)
    dc = tl.load(dc_ptr + b * dc_stride + m, mask=m < M, other=0.0)
    tl.store(part_ptr + (b * tl.num_programs(1) + i) * BLOCK_S + s, tl.sum(mem * dc[None, :], axis=1))


@triton.jit
def attention_step_backward(part_ptr, alpha_ptr, u_ptr, v4_ptr, dq_ptr, d_keys_ptr, dv_ptr, S, A, D, PARTS,
                            HEAD_PARTS, alpha_stride, head_stride, dq_stride, BLOCK_S: tl.constexpr,
                            BLOCK_W: tl.constexpr):
    """Program (b, j): widths block j, of head h = j·BLOCK_W / D: ∂α of head h from its HEAD_PARTS blocks of the
    PARTS blocks, ∂e, then over the block's widths: ∂q, the keys' and v's sums."""
    b, j = tl.program_id(0).to(tl.int64), tl.program_id(1)
    h = (j * BLOCK_W) // D
    s = tl.arange(0, BLOCK_S)
    real = s < S
    alpha = tl.load(alpha_ptr + b * alpha_stride + h * head_stride + s, mask=real, other=0.0)
    d_alpha = tl.zeros_like(alpha)
    for i in range(0, HEAD_PARTS):
        d_alpha += tl.load(part_ptr + (b * PARTS + h * HEAD_PARTS + i) * BLOCK_S + s)
    d_e = alpha * (d_alpha - tl.sum(alpha * d_alpha, axis=0))
    a = j * BLOCK_W + tl.arange(0, BLOCK_W)
    wide = a < A
    ok = real[:, None] & wide[None, :]
    at = b * S * A + s[:, None] * A + a[None, :]
    u = tl.load(u_ptr + at, mask=ok, other=0.0)
    w = u - u * u
    v = tl.load(v4_ptr + a % D, mask=wide, other=0.0)
    tl.store(dq_ptr + b * dq_stride + a, v * tl.sum(d_e[:, None] * w, axis=0), mask=wide)
    tl.store(d_keys_ptr + at, tl.load(d_keys_ptr + at, mask=ok, other=0.0) + d_e[:, None] * w, mask=ok)
    dv = tl.load(dv_ptr + b * A + a, mask=wide, other=0.0)
    tl.store(dv_ptr + b * A + a, dv + tl.sum(d_e[:, None] * u, axis=0), mask=wide)


def block(source: int) -> int:
    return max(16, triton.next_power_of_2(source))


def width(heads: int, attention: int, memory: int) -> int | None:
    """The widths a program takes (BLOCK_W) for `heads` heads over attention and memory widths, or None where
    these kernels do not serve them: with one head BLOCK_W, blocks past the end masked; with several, a power
    of two of at least MIN_W that divides a head's widths (its attention and memory parts), so that no block
    spans two heads (DTMT: 16 heads of 64 at width 1024, of 16 and 32 at `mini`'s 256)."""
    if heads == 1:
        return BLOCK_W
    d, e = attention // heads, memory // heads
    w = BLOCK_W
    while w >= MIN_W and (d % w or e % w):
        w //= 2
    return w if w >= MIN_W else None


def forward(q: Tensor, keys2: Tensor, v2: Tensor, mask: Tensor, memory: Tensor, u: Tensor | None, alpha: Tensor,
            context: Tensor) -> None:
    """One step: q [B, A], keys2 = 2K [B, S, A], v2 = 2v [A / heads], mask [B, S] (int8 or bool), memory
    [B, S, M] → u [B, S, A], alpha [B, heads, S] and context [B, M] (rows of wider tensors: their batch strides
    are taken). The heads split A and M evenly (`width` says whether these kernels serve them). u None: a step
    without a backward, whose keys2 holds K (the decoder state's keys), doubled as they are read."""
    B, S, A = keys2.shape
    heads, M, bs = alpha.size(1), memory.size(2), block(S)
    bw = width(heads, A, M)
    parts = triton.cdiv(A, bw)
    energies = q.new_empty(B, parts, bs)
    with on_device(q):
        attention_step_energies[(B, parts)](q, keys2, v2, keys2 if u is None else u, energies, S, A, v2.numel(),
                                            KEYS_SCALE=2.0 if u is None else 1.0, KEEP_U=u is not None,
                                            BLOCK_S=bs, BLOCK_W=bw)
        attention_step_forward[(B, triton.cdiv(M, bw))](energies, mask, memory, alpha, context, S, M, M // heads,
                                                        parts, parts // heads, alpha.stride(0), alpha.stride(1),
                                                        context.stride(0), BLOCK_S=bs, BLOCK_W=bw)


def backward(dc: Tensor, memory: Tensor, alpha: Tensor, u: Tensor, v4: Tensor, dq: Tensor, d_keys: Tensor,
             dv: Tensor) -> None:
    """One step backwards from dc [B, M] (the heads' contexts): writes dq [B, A], adds to d_keys [B, S, A] and
    dv [B, A] (v's sums by sentence and width, each head's at its own widths)."""
    B, S, A = u.shape
    heads, M, bs = alpha.size(1), memory.size(2), block(S)
    bw = width(heads, A, M)
    parts = triton.cdiv(M, bw)
    scores = dc.new_empty(B, parts, bs)
    with on_device(dc):
        attention_step_scores_backward[(B, parts)](dc, memory, scores, S, M, dc.stride(0), BLOCK_S=bs, BLOCK_W=bw)
        attention_step_backward[(B, triton.cdiv(A, bw))](scores, alpha, u, v4, dq, d_keys, dv, S, A, v4.numel(),
                                                         parts, parts // heads, alpha.stride(0), alpha.stride(1),
                                                         dq.stride(0), BLOCK_S=bs, BLOCK_W=bw)


KERNELS = (attention_step_energies, attention_step_forward, attention_step_scores_backward, attention_step_backward)
