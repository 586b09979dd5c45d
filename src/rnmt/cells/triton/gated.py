"""The row kernels of DTMT's gated cells on CUDA: one step of cells/gru.py's `GatedKernel` (the L-GRU of
cells/lgru.py, the LAU of cells/lau.py, the T-GRU of cells/tgru.py, the GRU with per-gate layer norm) as one
Triton kernel each way around the step's recurrent product q = U h, where torch's operations take 8 to 10
elementwise kernels forward and 18 to 22 backward a cell with layer-normalised gates (read from `GatedKernel`),
so a DTMT transition block of an L-GRU and N T-GRUs launches N + 1 row kernels and N + 1 products a timestep
each way (and the dropout noise's draws) instead of about 11 + 9N forward and 23 + 19N backward. One program a
batch row holds the row's units in registers (BLOCK ≥ H), so each gate's layer norm is reduced inside it.
Not a cell of its own: the four cells' chained loops (cells/kernel.py) take these kernels on CUDA.

Forward, with k gates (2: r, z; 3: r, z and l or g) over a = p_{:kH} + q_{:kH} (the T-GRU reads no p):

    s_j = σ(γ_j ⊙ x̂_j + β_j),   x̂_j = (a_j − μ_j) ρ_j,   ρ_j = 1 / √(var_j + ε)    (σ(a_j + b_j) without norm)
    u = q_h + b,   n = tanh(p_h + s_1 ⊙ u)
    T-GRU  ñ = drop(n),            h' = h + s_2 ⊙ (ñ − h)
    GRU    ñ = drop(n),            h' = ñ − s_2 ⊙ (ñ − h)
    L-GRU  ñ = drop(n + s_3 ⊙ Hx), h' = h + s_2 ⊙ (ñ − h)
    LAU    ñ = drop(n),            v = h + s_2 ⊙ (ñ − h),   h' = v + s_3 ⊙ (Hx − v)

keeping s, x̂, ρ, u, n, ñ − h (and Hx − v) for the backward. The dropout noise is drawn by torch before the
launch, as the step loop draws it (cells/gates.py `dropout_noise`). Backward: `GatedKernel`'s chain rule, and
layer norm's, ∂a_j = ρ_j (∂x̂ − mean(∂x̂) − x̂ ⊙ mean(∂x̂ ⊙ x̂)) with ∂x̂ = γ_j ⊙ ∂y_j, ∂y_j = ∂s_j ⊙ s_j (1 − s_j);
∂y is kept for every step, so that ∂γ and ∂β are one sum each after the loop (`SigmoidGates.steps_summed`)
rather than three kernels a step. The caller adds δ U to the direct paths the kernel returns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import triton
import triton.language as tl
from torch import Tensor

from rnmt.cells.triton.common import check_rows, on_device, tanh

if TYPE_CHECKING:
    from rnmt.cells.gates import SigmoidGates

KINDS = {"tgru": 0, "gru": 1, "lgru": 2, "lau": 3}
MAX_HIDDEN = 8192        # a row's units in one program's registers: wider cells keep torch's operations


@triton.jit
def row_of(H, unit_row, BLOCK: tl.constexpr):
    """This program's batch row (int64), its units, which of them are real (< H), and their offsets in the rows
    of the kernel's [B, T, H] buffers (a unit_row apart)."""
    b = tl.program_id(0).to(tl.int64)
    c = tl.arange(0, BLOCK)
    return b, c, c < H, b * unit_row + c


@triton.jit
def gate_forward(p_ptr, q_ptr, w_ptr, beta_ptr, s_ptr, xhat_ptr, rstd_ptr, j, c, ok, H, eps,
                 HAS_P: tl.constexpr, NORM: tl.constexpr):
    """Gate j of this program's row (every pointer at the row's start): s_j into s, x̂_j and ρ_j kept (NORM);
    w: γ [k, H] (NORM) or the gates' bias [k·H], beta: β [k, H] (NORM)."""
    a = tl.load(q_ptr + j * H + c, mask=ok, other=0.0)
    if HAS_P:
        a += tl.load(p_ptr + j * H + c, mask=ok, other=0.0)
    if NORM:
        d = tl.where(ok, a - tl.sum(a, 0) / H, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(d * d, 0) / H + eps)
        xh = d * rstd
        tl.store(xhat_ptr + j * H + c, xh, mask=ok)
        tl.store(rstd_ptr + j, rstd)
        a = xh * tl.load(w_ptr + j * H + c, mask=ok, other=0.0) + tl.load(beta_ptr + j * H + c, mask=ok, other=0.0)
    else:
        a += tl.load(w_ptr + j * H + c, mask=ok, other=0.0)
    s = tl.sigmoid(a)
    tl.store(s_ptr + j * H + c, s, mask=ok)
    return s


@triton.jit
def gate_backward(ds, s_ptr, xhat_ptr, rstd_ptr, w_ptr, delta_ptr, dp_ptr, dy_ptr, j, c, ok, H,
                  HAS_P: tl.constexpr, NORM: tl.constexpr):
    """From ∂s_j: ∂a_j into δ's row (and ∂p_j = ∂a_j into dp's), ∂y_j kept (NORM)."""
    s = tl.load(s_ptr + j * H + c, mask=ok, other=0.0)
    da = ds * (s - s * s)
    if NORM:
        tl.store(dy_ptr + j * H + c, da, mask=ok)
        xh = tl.load(xhat_ptr + j * H + c, mask=ok, other=0.0)
        dxh = da * tl.load(w_ptr + j * H + c, mask=ok, other=0.0)
        da = (dxh - tl.sum(dxh, 0) / H - xh * (tl.sum(dxh * xh, 0) / H)) * tl.load(rstd_ptr + j)
    tl.store(delta_ptr + j * H + c, da, mask=ok)
    if HAS_P:
        tl.store(dp_ptr + j * H + c, da, mask=ok)


@triton.jit
def gated_rows_forward(p_ptr, q_ptr, b_ptr, w_ptr, beta_ptr, h_ptr, noise_ptr, s_ptr, xhat_ptr, rstd_ptr, u_ptr,
                       n_ptr, diff_ptr, rest_ptr, out_ptr, H, eps, p_row, h_row, s_row, unit_row, out_row,
                       KIND: tl.constexpr, K: tl.constexpr, HAS_P: tl.constexpr, NORM: tl.constexpr,
                       HAS_NOISE: tl.constexpr, BLOCK: tl.constexpr):
    """One step of row program_id(0): p [B, ·] rows (HAS_P), q = U h [B, (K + 1) H] dense, b [H], h rows → the
    new state into out's rows; s, u, n, ñ − h (diff), Hx − v (rest, LAU) into rows of the kernel's buffers
    (u, n, diff and rest a unit_row apart), the noise [B, H], x̂ [B, K, H] and ρ [B, K] dense."""
    b, c, ok, at = row_of(H, unit_row, BLOCK)
    p_ptr += b * p_row
    q_ptr += b * (K + 1) * H
    s_ptr += b * s_row
    xhat_ptr += b * K * H
    rstd_ptr += b * K
    r = gate_forward(p_ptr, q_ptr, w_ptr, beta_ptr, s_ptr, xhat_ptr, rstd_ptr, 0, c, ok, H, eps, HAS_P, NORM)
    z = gate_forward(p_ptr, q_ptr, w_ptr, beta_ptr, s_ptr, xhat_ptr, rstd_ptr, 1, c, ok, H, eps, HAS_P, NORM)
    u = tl.load(q_ptr + K * H + c, mask=ok, other=0.0) + tl.load(b_ptr + c, mask=ok, other=0.0)
    pre = r * u
    if HAS_P:
        pre += tl.load(p_ptr + K * H + c, mask=ok, other=0.0)
    n = tanh(pre)
    tl.store(u_ptr + at, u, mask=ok)
    tl.store(n_ptr + at, n, mask=ok)
    h = tl.load(h_ptr + b * h_row + c, mask=ok, other=0.0)
    lin = z
    hx = h
    if K == 3:
        lin = gate_forward(p_ptr, q_ptr, w_ptr, beta_ptr, s_ptr, xhat_ptr, rstd_ptr, 2, c, ok, H, eps, HAS_P, NORM)
        hx = tl.load(p_ptr + (K + 1) * H + c, mask=ok, other=0.0)
    if KIND == 2:
        n += lin * hx
    if HAS_NOISE:
        n *= tl.load(noise_ptr + b * H + c, mask=ok, other=0.0)
    diff = n - h
    tl.store(diff_ptr + at, diff, mask=ok)
    new = n - z * diff if KIND == 1 else h + z * diff
    if KIND == 3:
        rest = hx - new
        tl.store(rest_ptr + at, rest, mask=ok)
        new += lin * rest
    tl.store(out_ptr + b * out_row + c, new, mask=ok)


@triton.jit
def gated_rows_backward(g_ptr, p_ptr, w_ptr, s_ptr, xhat_ptr, rstd_ptr, u_ptr, n_ptr, diff_ptr, noise_ptr, rest_ptr,
                        delta_ptr, dp_ptr, dy_ptr, direct_ptr, H, g_row, p_row, s_row, unit_row, delta_row, dp_row,
                        KIND: tl.constexpr, K: tl.constexpr, HAS_P: tl.constexpr, NORM: tl.constexpr,
                        HAS_NOISE: tl.constexpr, BLOCK: tl.constexpr):
    """Step backwards for row program_id(0) from g = ∂L/∂h': δ = [∂a, ∂u] into δ's row, ∂p into dp's (HAS_P),
    ∂y [B, K, H] dense (NORM), and the state's direct paths into direct [B, H] dense."""
    b, c, ok, at = row_of(H, unit_row, BLOCK)
    p_ptr += b * p_row
    s_ptr += b * s_row
    xhat_ptr += b * K * H
    rstd_ptr += b * K
    delta_ptr += b * delta_row
    dp_ptr += b * dp_row
    dy_ptr += b * K * H
    g = tl.load(g_ptr + b * g_row + c, mask=ok, other=0.0)
    r = tl.load(s_ptr + c, mask=ok, other=0.0)
    z = tl.load(s_ptr + H + c, mask=ok, other=0.0)
    diff = tl.load(diff_ptr + at, mask=ok, other=0.0)
    dv = g
    lin = z
    dl = g
    if K == 3:
        lin = tl.load(s_ptr + 2 * H + c, mask=ok, other=0.0)
    if KIND == 3:                                   # h' = v + l ⊙ (Hx − v)
        dl = g * tl.load(rest_ptr + at, mask=ok, other=0.0)
        dv = g - g * lin
        tl.store(dp_ptr + (K + 1) * H + c, g * lin, mask=ok)
    dz = dv * diff
    gz = dv * z
    if KIND == 1:                                   # h' = ñ − z ⊙ (ñ − h)
        dz = -dz
        dn = dv - gz
        direct = gz
    else:
        dn = gz
        direct = dv - gz
    if HAS_NOISE:
        dn *= tl.load(noise_ptr + b * H + c, mask=ok, other=0.0)
    if KIND == 2:                                   # ñ = drop(n + l ⊙ Hx)
        dl = dn * tl.load(p_ptr + (K + 1) * H + c, mask=ok, other=0.0)
        tl.store(dp_ptr + (K + 1) * H + c, dn * lin, mask=ok)
    n = tl.load(n_ptr + at, mask=ok, other=0.0)
    dc = dn * (1.0 - n * n)
    if HAS_P:
        tl.store(dp_ptr + K * H + c, dc, mask=ok)
    tl.store(delta_ptr + K * H + c, dc * r, mask=ok)
    dr = dc * tl.load(u_ptr + at, mask=ok, other=0.0)
    gate_backward(dr, s_ptr, xhat_ptr, rstd_ptr, w_ptr, delta_ptr, dp_ptr, dy_ptr, 0, c, ok, H, HAS_P, NORM)
    gate_backward(dz, s_ptr, xhat_ptr, rstd_ptr, w_ptr, delta_ptr, dp_ptr, dy_ptr, 1, c, ok, H, HAS_P, NORM)
    if K == 3:
        gate_backward(dl, s_ptr, xhat_ptr, rstd_ptr, w_ptr, delta_ptr, dp_ptr, dy_ptr, 2, c, ok, H, HAS_P, NORM)
    tl.store(direct_ptr + b * H + c, direct, mask=ok)


def fits(hidden: int) -> bool:
    """Whether a row of `hidden` units fits one program of these kernels."""
    return hidden <= MAX_HIDDEN


def _launch(H: int) -> dict[str, int]:
    block = max(16, triton.next_power_of_2(H))
    return {"BLOCK": block, "num_warps": max(1, min(16, block // 256))}


def _flags(kind: str, gates: SigmoidGates, p: Tensor | None, noise: Tensor | None) -> dict[str, object]:
    return {"KIND": KINDS[kind], "K": gates.k, "HAS_P": p is not None, "NORM": gates.norms is not None,
            "HAS_NOISE": noise is not None}


def _gate_weights(gates: SigmoidGates) -> tuple[Tensor, Tensor]:
    """(γ, β) of layer-normalised gates, else (the gates' bias, the same as a pointer never read)."""
    if gates.norms is not None:
        return gates.gamma, gates.beta
    bias = gates.bias.contiguous()
    return bias, bias


def rows_forward(kind: str, p: Tensor | None, q: Tensor, bias: Tensor, gates: SigmoidGates, t: int, h: Tensor,
                 noise: Tensor | None, s: Tensor, u: Tensor, n: Tensor, diff: Tensor, rest: Tensor | None,
                 out: Tensor) -> None:
    """One step of a `kind` cell (KINDS) on rows: p [B, P] (None: the T-GRU's), q = U h [B, (k + 1) H] dense, the
    candidate's bias [H], the gates (their x̂ and ρ kept at step t) and h → the new state into out; s, u, n, diff
    (ñ − h) and rest (Hx − v, LAU) into rows of the kernel's [B, T, H] buffers (all a row of u apart, as
    `GatedKernel.begin` allocates them alike); noise: step t's dropout noise [B, H], dense."""
    B, H = h.shape
    check_rows(*(x for x in (p, h, s, u, n, diff, rest, out, noise) if x is not None))
    w, beta = _gate_weights(gates)
    xhat, rstd = (gates.xhat[t], gates.rstd[t]) if gates.norms is not None else (q, q)
    with on_device(h):
        gated_rows_forward[(B,)](q if p is None else p, q.contiguous(), bias.contiguous(), w, beta, h,
                                 u if noise is None else noise, s, xhat, rstd, u, n, diff, u if rest is None else rest,
                                 out, H, gates.eps if gates.norms is not None else 0.0, 0 if p is None else p.stride(0),
                                 h.stride(0), s.stride(0), u.stride(0), out.stride(0),
                                 **_flags(kind, gates, p, noise), **_launch(H))


def rows_backward(kind: str, g: Tensor, p: Tensor | None, gates: SigmoidGates, t: int, s: Tensor, u: Tensor,
                  n: Tensor, diff: Tensor, noise: Tensor | None, rest: Tensor | None, delta: Tensor,
                  dp: Tensor | None, dy: Tensor | None) -> Tensor:
    """Step t backwards from g = ∂L/∂h' [B, H]: δ into delta's row, ∂p into dp's (None: the T-GRU), ∂y into
    dy [B, k, H] (layer-normalised gates); returns the state's direct paths, to which the caller adds δ U."""
    B, H = g.shape
    check_rows(*(x for x in (g, p, s, u, n, diff, noise, rest, delta, dp) if x is not None))
    direct = g.new_empty(B, H)
    w, _ = _gate_weights(gates)
    xhat, rstd = (gates.xhat[t], gates.rstd[t]) if gates.norms is not None else (direct, direct)
    with on_device(g):
        gated_rows_backward[(B,)](g, delta if p is None else p, w, s, xhat, rstd, u, n, diff,
                                  u if noise is None else noise, u if rest is None else rest, delta,
                                  delta if dp is None else dp, direct if dy is None else dy, direct, H, g.stride(0),
                                  0 if p is None else p.stride(0), s.stride(0), u.stride(0), delta.stride(0),
                                  0 if dp is None else dp.stride(0), **_flags(kind, gates, p, noise), **_launch(H))
    return direct


KERNELS = (gated_rows_forward, gated_rows_backward)
