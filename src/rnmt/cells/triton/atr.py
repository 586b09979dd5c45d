"""ATR's recurrence on CUDA (Zhang et al. 2018, eqs. 6-9), in one of two ways (cells/triton/common.py says
how the kernels work):

- per step: the product W_h h as a cuBLAS call, then one elementwise kernel, forward and backward;
- persistent (where the batch and hidden size fit the GPU): one kernel launch for all steps of a direction.
  Each program owns a tile of rows (sentences) and hidden units and loops over time: its product
  h_{t-1} W_h[cols]ᵀ (U's columns stay in L2 across steps, the paper's Table 1 point: ATR has one
  recurrent matrix, GRU three) and its gates, then it waits at a barrier for the other programs of its
  rows to have written h_t. The backward loop keeps ∂L/∂h of its tile in registers and does ∂q W_h the
  same way. The programs must all run at once, so there are at most as many as the GPU has
  multiprocessors, and they are launched as a cooperative grid: the driver makes them all resident at
  once or refuses the launch with an error, where programs of an ordinary launch that found no room
  (a GPU shared under MPS, other work holding multiprocessors) could leave the barrier waiting. The
  smallest tiles give the most programs (`persistent_launch`), but each program reads its rows of the state
  once a step for every block of units: at batch 80, hidden 1000 on 132 multiprocessors, 126 programs of
  64 x 16 read some 36 MB a step where 80 of 16 x 64 read 15 MB (`fewer_reads_tile`, with W_h in
  bfloat16). Which way runs, in which tiles, is the cell's choice (cells/atr.py: timed as a fast path, or
  RNMT_ATR_PERSISTENT).
  Under autocast (`products_dtype`, rnmt.machine.matmul) their products take h_{t-1} and W_h (and backward's ∂q)
  in the autocast dtype and accumulate in float32, on the tensor cores, as autocast's own products do;
  the state, the gates and everything else stay in float32. Without autocast the products are in full
  float32 (IEEE, no TF32), as torch's.

`TritonATR` takes the arguments of cells/atr.py's ATRSequence (time-major p [T, B, H], float mask
m [T, B, 1] or None, h0 [B, H], W_hh, b_hh) and gives the same states [T, B, H].

`rows_forward` and `rows_backward` are one step's elementwise work as one kernel each, on rows of wider
batch-major tensors (a row stride each), for cells/atr.py's `ATRKernel` on CUDA: the step of the fused
RNNSearch decoder (models/decoder_sequence.py) and of composite cells, where torch's operations took five
kernels forward and about eight backward.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor
from torch.autograd.function import once_differentiable

from rnmt.cells.kernel import weight_grads
from rnmt.cells.triton.common import STEP_BLOCK, check_rows, group_sync, on_device, row_units, step_grid
from rnmt.machine.matmul import addmm, narrow, products_dtype
from rnmt.machine.switches import switch


@triton.jit
def _step(p, q, h):
    """Eqs. 6-9 elementwise: (i, f, i ⊙ p + f ⊙ h) with i = σ(p + q), f = σ(p − q)."""
    i = tl.sigmoid(p + q)
    f = tl.sigmoid(p - q)
    return i, f, i * p + f * h


@triton.jit
def _step_grads(g, i, f, p, h):
    """The step's gradients from g = ∂L/∂h_t: (∂q, ∂p, the state's direct path g ⊙ f) with
    ∂(p+q) = g ⊙ i(1 − i) ⊙ p, ∂(p−q) = g ⊙ f(1 − f) ⊙ h, ∂q = ∂(p+q) − ∂(p−q), ∂p = g ⊙ i + ∂(p+q) + ∂(p−q)."""
    gi = g * i
    gf = g * f
    di = gi * (1.0 - i) * p
    df = gf * (1.0 - f) * h
    return di - df, gi + di + df, gf


@triton.jit
def _saved(i_ptr, f_ptr, p_ptr, at, ok):
    """What backward reads of step t's forward: the gates i and f and the projection p at offsets `at`."""
    return (tl.load(i_ptr + at, mask=ok, other=0.0), tl.load(f_ptr + at, mask=ok, other=0.0),
            tl.load(p_ptr + at, mask=ok, other=0.0))


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
    i, f, new = _step(p, q, h)
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
    i, f, p = _saved(i_ptr, f_ptr, p_ptr, at, ok)
    h = tl.load(h_ptr + k, mask=ok, other=0.0)
    dq, dp, gf = _step_grads(g, i, f, p, h)
    if HAS_MASK:
        keep = tl.load(m_ptr + t * B + k // H, mask=ok, other=0.0) != 0
        dq = tl.where(keep, dq, 0.0)
        dp = tl.where(keep, dp, 0.0)
        gf = tl.where(keep, gf, g)
    tl.store(dq_ptr + at, dq, mask=ok)
    tl.store(dp_ptr + at, dp, mask=ok)
    tl.store(carry_ptr + k, gf, mask=ok)


@triton.jit
def atr_rows_forward(p_ptr, q_ptr, b_ptr, h_ptr, i_ptr, f_ptr, out_ptr, B, H, p_row, h_row, gate_row, out_row,
                     BLOCK: tl.constexpr):
    """One step over B rows of H units: p, W_h h (dense), b_h, h → the gates i, f and the new state (rows of
    their tensors, `*_row` apart; i and f share a row stride)."""
    k, ok, r, c = row_units(B, H, BLOCK)
    p = tl.load(p_ptr + r * p_row + c, mask=ok, other=0.0)
    h = tl.load(h_ptr + r * h_row + c, mask=ok, other=0.0)
    q = tl.load(q_ptr + k, mask=ok, other=0.0) + tl.load(b_ptr + c, mask=ok, other=0.0)
    i, f, new = _step(p, q, h)
    tl.store(i_ptr + r * gate_row + c, i, mask=ok)
    tl.store(f_ptr + r * gate_row + c, f, mask=ok)
    tl.store(out_ptr + r * out_row + c, new, mask=ok)


@triton.jit
def atr_rows_backward(g_ptr, p_ptr, h_ptr, i_ptr, f_ptr, dp_ptr, dq_ptr, carry_ptr, B, H, g_row, p_row, h_row,
                      gate_row, dp_row, dq_row, BLOCK: tl.constexpr):
    """One step backwards over B rows from g = ∂L/∂h' → ∂p, ∂q and the state's direct path g ⊙ f (dense)."""
    k, ok, r, c = row_units(B, H, BLOCK)
    g = tl.load(g_ptr + r * g_row + c, mask=ok, other=0.0)
    dq, dp, carry = _step_grads(g, tl.load(i_ptr + r * gate_row + c, mask=ok, other=0.0),
                                tl.load(f_ptr + r * gate_row + c, mask=ok, other=0.0),
                                tl.load(p_ptr + r * p_row + c, mask=ok, other=0.0),
                                tl.load(h_ptr + r * h_row + c, mask=ok, other=0.0))
    tl.store(dq_ptr + r * dq_row + c, dq, mask=ok)
    tl.store(dp_ptr + r * dp_row + c, dp, mask=ok)
    tl.store(carry_ptr + k, carry, mask=ok)


def rows_forward(p: Tensor, wh: Tensor, bias: Tensor, h: Tensor, i: Tensor, f: Tensor, out: Tensor) -> None:
    """Eqs. 7-9 for one step: p, h [B, H] rows, wh = W_h h [B, H] dense, b_h [H] (q = wh + b_h, added here
    rather than by the product: one kernel fewer where the product cannot add it, under autocast's narrow
    products) → i, f and out (rows of wider tensors)."""
    B, H = h.shape
    check_rows(p, h, i, f, out)
    wh, bias = wh.contiguous(), bias.contiguous()
    grid, opts = step_grid(B * H)
    with on_device(h):
        atr_rows_forward[grid](p, wh, bias, h, i, f, out, B, H, p.stride(0), h.stride(0), i.stride(0),
                               out.stride(0), **opts)


def rows_backward(g: Tensor, p: Tensor, h: Tensor, i: Tensor, f: Tensor, dp: Tensor, dq: Tensor) -> Tensor:
    """One step backwards: writes ∂p into dp and ∂q into dq (rows) and returns g ⊙ f, to which the caller adds
    ∂q W_h for ∂L/∂h."""
    B, H = h.shape
    check_rows(g, p, h, i, f, dp, dq)
    carry = h.new_empty(B, H)
    grid, opts = step_grid(B * H)
    with on_device(h):
        atr_rows_backward[grid](g, p, h, i, f, dp, dq, carry, B, H, g.stride(0), p.stride(0), h.stride(0),
                                i.stride(0), dp.stride(0), dq.stride(0), **opts)
    return carry


@triton.jit
def _tile(B, H, BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr):
    """This program's rows, hidden units and their masks; the programs of one block of rows are consecutive."""
    col_blocks = tl.cdiv(H, BLOCK_N)
    row_block = tl.program_id(0) // col_blocks
    rows = row_block * BLOCK_B + tl.arange(0, BLOCK_B)
    cols = (tl.program_id(0) % col_blocks) * BLOCK_N + tl.arange(0, BLOCK_N)
    return row_block, col_blocks, rows, cols, rows < B, cols < H


@triton.jit
def _product(a_ptr, w_ptr, rows, cols, row_ok, col_ok, H, TRANSPOSED: tl.constexpr, BLOCK_B: tl.constexpr,
             BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """a[rows, :] W[cols, :]ᵀ (TRANSPOSED) or a[rows, :] W[:, cols], W [H, H], accumulated in a's precision;
    a was written by the other programs of these rows before the last barrier. W in a's dtype: full
    precision (float32 products in IEEE float32, as torch's defaults); W in a narrower dtype (bfloat16,
    float16): a's blocks are rounded to it and the products run on the tensor cores into float32."""
    acc = tl.zeros([BLOCK_B, BLOCK_N], dtype=a_ptr.dtype.element_ty)
    for k0 in range(0, H, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < H
        a = tl.load(a_ptr + rows[:, None] * H + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        if TRANSPOSED:
            w = tl.load(w_ptr + cols[None, :] * H + ks[:, None], mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        else:
            w = tl.load(w_ptr + ks[:, None] * H + cols[None, :], mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        if w_ptr.dtype.element_ty == a_ptr.dtype.element_ty:
            acc += tl.dot(a, w, input_precision="ieee")
        else:
            acc += tl.dot(a.to(w_ptr.dtype.element_ty), w)
    return acc


@triton.jit(do_not_specialize=["t0", "t1"])        # a length of 1 stays an argument (triton makes 1s constants)
def atr_persistent_forward(p_ptr, m_ptr, w_ptr, b_ptr, s_ptr, i_ptr, f_ptr, sync_ptr, t0, t1, B, H,
                           HAS_MASK: tl.constexpr, SYNC: tl.constexpr, BLOCK_B: tl.constexpr,
                           BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Steps t0 ≤ t < t1 of this program's tile: s [T+1, B, H] holds h0 then every state (s[t] = h_{t−1});
    q = h W_hᵀ + b_h, i = σ(p + q), f = σ(p − q), s[t+1] = i ⊙ p + f ⊙ h (h where padded); i, f kept for
    backward. SYNC: the programs of a block of rows wait for each other after every step (one launch for
    all steps); without it, one launch a step (the kernel boundary is the barrier)."""
    row_block, col_blocks, rows, cols, row_ok, col_ok = _tile(B, H, BLOCK_B, BLOCK_N)
    ok = row_ok[:, None] & col_ok[None, :]
    tile = rows[:, None] * H + cols[None, :]
    bias = tl.load(b_ptr + cols, mask=col_ok, other=0.0)
    N = B * H
    first = t0.to(tl.int64)
    for step in range(0, t1 - t0):
        t = first + step
        prev = s_ptr + t * N
        q = _product(prev, w_ptr, rows, cols, row_ok, col_ok, H, True, BLOCK_B, BLOCK_N, BLOCK_K) + bias[None, :]
        at = t * N + tile
        p = tl.load(p_ptr + at, mask=ok, other=0.0)
        h = tl.load(prev + tile, mask=ok, other=0.0)
        i, f, new = _step(p, q, h)
        if HAS_MASK:
            keep = tl.load(m_ptr + t * B + rows, mask=row_ok, other=0.0) != 0
            new = tl.where(keep[:, None], new, h)
        tl.store(prev + N + tile, new, mask=ok)
        tl.store(i_ptr + at, i, mask=ok)
        tl.store(f_ptr + at, f, mask=ok)
        if SYNC:
            group_sync(sync_ptr + row_block, (step + 1) * col_blocks)


@triton.jit(do_not_specialize=["t0", "t1"])
def atr_persistent_backward(grad_ptr, m_ptr, p_ptr, s_ptr, i_ptr, f_ptr, w_ptr, dp_ptr, dq_ptr, c_ptr, sync_ptr,
                            t0, t1, B, H, HAS_MASK: tl.constexpr, SYNC: tl.constexpr, BLOCK_B: tl.constexpr,
                            BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Steps t1 − 1 down to t0 backward (atr_step_backward's equations). ∂L/∂h_t = carry + ∂q[t+1] W_h: the
    carry (the state's direct path) stays in this tile's registers and sits in c [B, H] between launches;
    ∂q [T+1, B, H] ends with zeros, and the product reads every program's ∂q[t+1] of its rows, written
    before the last barrier (or in an earlier launch). The caller adds ∂q[t0] W_h to c for ∂L/∂h_{t0−1}."""
    row_block, col_blocks, rows, cols, row_ok, col_ok = _tile(B, H, BLOCK_B, BLOCK_N)
    ok = row_ok[:, None] & col_ok[None, :]
    tile = rows[:, None] * H + cols[None, :]
    N = B * H
    carry = tl.load(c_ptr + tile, mask=ok, other=0.0)
    last = (t1 - 1).to(tl.int64)
    for step in range(0, t1 - t0):
        t = last - step
        at = t * N + tile
        g = carry + _product(dq_ptr + (t + 1) * N, w_ptr, rows, cols, row_ok, col_ok, H, False, BLOCK_B, BLOCK_N,
                             BLOCK_K)
        g += tl.load(grad_ptr + at, mask=ok, other=0.0)
        i, f, p = _saved(i_ptr, f_ptr, p_ptr, at, ok)
        h = tl.load(s_ptr + at, mask=ok, other=0.0)
        dq, dp, carry = _step_grads(g, i, f, p, h)
        if HAS_MASK:
            keep = tl.load(m_ptr + t * B + rows, mask=row_ok, other=0.0) != 0
            dq = tl.where(keep[:, None], dq, 0.0)
            dp = tl.where(keep[:, None], dp, 0.0)
            carry = tl.where(keep[:, None], carry, g)
        tl.store(dq_ptr + at, dq, mask=ok)
        tl.store(dp_ptr + at, dp, mask=ok)
        if SYNC:
            group_sync(sync_ptr + row_block, (step + 1) * col_blocks)
    tl.store(c_ptr + tile, carry, mask=ok)


PERSISTENT_TILES = ((16, 16), (32, 16), (64, 16), (128, 16), (128, 32), (128, 64))   # (rows, hidden units)
SQUARER_TILES = ((16, 32), (32, 32), (16, 64), (32, 64), (64, 32), (64, 64))


def _slots(device: torch.device) -> int:
    """Programs that run at once: one per multiprocessor (one in triton's interpreter)."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1


def _cooperative() -> bool:
    """Whether this triton launches a grid as cooperative (`launch_cooperative_grid`, triton-lang/triton pull
    request 5381, December 2024): without it the persistent kernels are not offered on a GPU."""
    try:
        from triton.backends.nvidia.compiler import CUDAOptions
    except ImportError:
        return False
    return "launch_cooperative_grid" in getattr(CUDAOptions, "__dataclass_fields__", {})


COOPERATIVE = _cooperative()


def _plan(B: int, H: int, device: torch.device, tile: tuple[int, int]) -> tuple[int, dict[str, Any]]:
    block_b, block_n = tile
    opts: dict[str, Any] = {"BLOCK_B": block_b, "BLOCK_N": block_n, "BLOCK_K": 32, "num_warps": 4}
    if device.type == "cuda":
        opts["launch_cooperative_grid"] = True
    return triton.cdiv(B, block_b), opts


def _programs(B: int, H: int, tile: tuple[int, int]) -> int:
    return triton.cdiv(B, tile[0]) * triton.cdiv(H, tile[1])


def persistent_launch(B: int, H: int, device: torch.device,
                      tile: tuple[int, int] | None = None) -> tuple[int, dict[str, Any]] | None:
    """(row blocks, kernel options) of the persistent kernels for B rows of H units on `device`, launched as a
    cooperative grid on a GPU: with `tile` (rows, units) where its programs all fit at once, else with the
    smallest tiles that do (the most programs); None where none fits, and on a GPU where triton cannot launch
    a cooperative grid."""
    if device.type == "cuda" and not COOPERATIVE:
        return None
    slots = _slots(device)
    for t in (tile,) if tile is not None else PERSISTENT_TILES:
        if _programs(B, H, t) <= slots:
            return _plan(B, H, device, t)
    return None


def fewer_reads_tile(B: int, H: int, device: torch.device, weight_bytes: int) -> tuple[int, int] | None:
    """A second tiling worth timing against `persistent_launch`'s: of the tiles whose programs fit at once and
    keep at least half the multiprocessors busy, the one whose programs read the fewest bytes a step (each
    reads its rows of the previous state, float32, and its units' rows of W_h, `weight_bytes` an element: the
    smallest tiles read the state once for every block of units, 126 times 64 rows at batch 80, hidden 1000
    on 132 multiprocessors); None where it is the same tiling or none fits."""
    slots = _slots(device)
    fits = [t for t in (*PERSISTENT_TILES, *SQUARER_TILES) if slots // 2 <= _programs(B, H, t) <= slots]
    if not fits:
        return None
    best = min(fits, key=lambda t: (_programs(B, H, t) * H * (4 * t[0] + weight_bytes * t[1]), t))
    default = persistent_launch(B, H, device)
    return None if default is not None and (default[1]["BLOCK_B"], default[1]["BLOCK_N"]) == best else best


def forced_persistent() -> bool | None:
    """RNMT_ATR_PERSISTENT as a decision: True (1), False (0), or None (auto: the cell times both ways)."""
    return {"1": True, "0": False}.get(switch("atr_persistent"))


class TritonATR(torch.autograd.Function):
    """ATR (Zhang et al. 2018, eqs. 6-9): q = W_h h + b_h, i = σ(p + q), f = σ(p − q), h' = i ⊙ p + f ⊙ h."""

    @staticmethod
    def forward(ctx: Any, p: Tensor, m: Tensor | None, h0: Tensor, weight: Tensor, bias: Tensor,
                persistent: bool | tuple[int, int] | None = None) -> Tensor:
        """`persistent`: the persistent kernels where they fit (True: `persistent_launch`'s tiles; a (rows,
        units) tile: those) or the per-step ones (False); None: as RNMT_ATR_PERSISTENT forces, per step where
        it does not (the cell's `sequence` decides)."""
        T, B, H = p.shape
        states = p.new_empty(T + 1, B, H)                  # h0, then every step's state
        states[0] = h0
        i_all, f_all = torch.empty_like(p), torch.empty_like(p)
        mm = p if m is None else m
        persistent = forced_persistent() if persistent is None else persistent
        tile = persistent if isinstance(persistent, tuple) else None
        launch = persistent_launch(B, H, p.device, tile) if persistent else None
        products = products_dtype(p)
        with on_device(p):
            if launch is not None:
                row_blocks, opts = launch
                sync = torch.zeros(row_blocks, dtype=torch.int32, device=p.device)
                grid = (row_blocks * triton.cdiv(H, opts["BLOCK_N"]),)
                # W_h in the products' dtype (`products_dtype`: narrower under autocast), one cast a call
                atr_persistent_forward[grid](p, mm, weight.to(products).contiguous(), bias, states, i_all, f_all,
                                             sync, 0, T, B, H, HAS_MASK=m is not None, SYNC=True, **opts)
            else:
                grid, opts = step_grid(B * H)
                wt, hs = weight.t(), states[1:]
                with narrow(products, [weight]):
                    for t in range(T):
                        q = addmm(bias, states[t], wt)
                        atr_step_forward[grid](p, q, states[t], mm, hs, i_all, f_all, t, B * H, B, H,
                                               HAS_MASK=m is not None, **opts)
        ctx.launch, ctx.products, ctx.persistent = launch, products, launch is not None   # `kind` reads the last
        ctx.save_for_backward(p, m, weight, states, i_all, f_all)
        return states[1:]

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        p, m, weight, states, i_all, f_all = ctx.saved_tensors
        grad = grad.contiguous()
        T, B, H = p.shape
        dp = torch.empty_like(p)
        dq = p.new_empty(T + 1, B, H)                      # ∂q of every step, then zeros (no step after T)
        dq[T] = 0.0
        g = torch.zeros_like(states[0])
        mm = p if m is None else m
        with on_device(p), narrow(ctx.products, [weight]):
            if ctx.launch is not None:
                row_blocks, opts = ctx.launch
                sync = torch.zeros(row_blocks, dtype=torch.int32, device=p.device)
                grid = (row_blocks * triton.cdiv(H, opts["BLOCK_N"]),)
                carry = torch.zeros_like(g)
                atr_persistent_backward[grid](grad, mm, p, states, i_all, f_all, weight.to(ctx.products).contiguous(),
                                              dp, dq, carry, sync, 0, T, B, H, HAS_MASK=m is not None, SYNC=True,
                                              **opts)
                g = addmm(carry, dq[0], weight)
            else:
                carry = torch.empty_like(g)
                grid, opts = step_grid(B * H)
                for t in range(T - 1, -1, -1):
                    atr_step_backward[grid](g, grad, mm, p, states[t], i_all, f_all, dp, dq, carry, t, B * H, B,
                                            H, HAS_MASK=m is not None, **opts)
                    g = addmm(carry, dq[t], weight)
            dw, db = weight_grads(dq[:T], states[1:], states[0])
        return dp, None, g, dw, db, None


KERNELS = (atr_step_forward, atr_step_backward, atr_rows_forward, atr_rows_backward)
PERSISTENT = (atr_persistent_forward, atr_persistent_backward)
BLOCK = STEP_BLOCK
