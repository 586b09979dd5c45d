"""Triton kernels of the recurrences; the launches and the autograd wiring are in functions.py.

Whole-sequence kernels (SRU, SR-NMT): one program per (batch row, block of hidden units) loops over
time in registers, as the SRU paper's CUDA kernel does (Lei et al. 2017, section 3.1: "the
element-wise operations ... compiled into a single kernel function", parallel over batch and hidden).
Inputs are batch-major [B, T, ·] with unit stride in the last dimension; outputs are contiguous.

Per-step kernels (ATR, GRU): the recurrent product W_h h stays a cuBLAS matrix product per step (the
caller's torch.addmm); everything elementwise of one step is one kernel, forward and backward. They work
on time-major [T, B, ·] tensors flattened to B·H elements per step.

Mask: m [B, T] (strides given) or [T, B] for the per-step kernels, nonzero at real tokens; a padded step
carries the state unchanged (h_t = h_{t−1}) and gets zero input gradients. `HAS_MASK=False`: no padding,
the mask pointer is not read. Arithmetic is in the tensors' dtype (float32 or float64).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _tanh(x):
    """tanh from one exp, without overflow: sign(x) (1 − e^{−2|x|}) / (1 + e^{−2|x|})."""
    e = tl.exp(-2.0 * tl.abs(x))
    y = (1.0 - e) / (1.0 + e)
    return tl.where(x < 0, -y, y)


@triton.jit
def _lerp(a, b, w):
    """a + w (b − a), evaluated from the nearer end as torch.lerp does (exact at w = 0 and w = 1)."""
    return tl.where(w < 0.5, a + w * (b - a), b - (b - a) * (1.0 - w))


# ---------------------------------------------------------------- SRU (Lei et al. 2017, eqs. 3-7)

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
        h_new = r * _tanh(c_new) + (1.0 - r) * x
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
        tc = _tanh(c)
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


# ------------------------------------------- SR-NMT weakly-recurrent state (Di Gangi & Federico 2018, sec. 3)

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
        new = _lerp(h, x, a)
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


# ------------------------------------------------------- ATR (Zhang et al. 2018, eqs. 6-9), one step

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
    i = tl.sigmoid(p + q)
    f = tl.sigmoid(p - q)
    new = i * p + f * h
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
    i = tl.load(i_ptr + at, mask=ok, other=0.0)
    f = tl.load(f_ptr + at, mask=ok, other=0.0)
    p = tl.load(p_ptr + at, mask=ok, other=0.0)
    h = tl.load(h_ptr + k, mask=ok, other=0.0)
    gi = g * i
    gf = g * f
    di = gi * (1.0 - i) * p
    df = gf * (1.0 - f) * h
    dq = di - df
    dp = gi + di + df
    if HAS_MASK:
        keep = tl.load(m_ptr + t * B + k // H, mask=ok, other=0.0) != 0
        dq = tl.where(keep, dq, 0.0)
        dp = tl.where(keep, dp, 0.0)
        gf = tl.where(keep, gf, g)
    tl.store(dq_ptr + at, dq, mask=ok)
    tl.store(dp_ptr + at, dp, mask=ok)
    tl.store(carry_ptr + k, gf, mask=ok)


# ------------------------------------------------------------ GRU (Cho et al. 2014), one step

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
    n = _tanh(tl.load(pt + 2 * H, mask=ok, other=0.0) + r * g_n)
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
