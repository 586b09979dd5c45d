"""DTMT's cells as step kernels with a hand-written backward (cells/fused_steps.py): L-GRU and LAU
(cells/lgru.py, cells/lau.py), T-GRU and the gate-normalised GRU (cells/tgru.py, cells/gru.py), with
per-gate layer norm or gate biases (cells/fused_gates.py) and candidate dropout.

L-GRU / LAU (Meng & Zhang 2019, eqs. 14-16; Wang et al. 2017), p = [p_1, p_2, p_3, p_h, Hx], U = W_h·:
    [q_1, q_2, q_3, q_h] = U h,   s_j = gate_j(p_j + q_j),   u = q_h + b,   n = tanh(p_h + s_1 ⊙ u)
    L-GRU:  ñ = drop(n + s_3 ⊙ Hx),   h' = h + s_2 ⊙ (ñ − h)
    LAU:    ñ = drop(n),   v = h + s_2 ⊙ (ñ − h),   h' = v + s_3 ⊙ (Hx − v)
T-GRU (DTMT eqs. 10-13; no input) and the GRU with gate norm (cells/gru.py), p = [p_r, p_z, p_n] or none:
    [q_r, q_z, q_h] = U h,   r, z = gate(p_r + q_r), gate(p_z + q_z),   ñ = drop(tanh(p_n + r ⊙ (q_h + b)))
    T-GRU:  h' = h + z ⊙ (ñ − h)          GRU:  h' = ñ + z ⊙ (h − ñ)

Backward at step t: the chain rule through these lines, δ = [∂(p_j + q_j)…, ∂u] for the recurrent
product, ∂h = (direct terms) + δ U; after the loop ∂U = Σ_t δ_tᵀ h_{t−1} and ∂b = Σ_t ∂u_t.
Dropout draws its noise per step as F.dropout does on the CPU, so a seeded run matches the step loop.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rnmt.cells.fused_gates import SigmoidGates
from rnmt.cells.fused_steps import StepKernel, product_grad, row_sum, tanh, tanh_grad
from rnmt.matmul import addmm, mm


class _GatedKernel(StepKernel):
    """What both kernels hold: U [G·H, H], the candidate's bias b [H], the gates and the dropout rate."""

    def __init__(self, weight: Tensor, bias: Tensor, gates: SigmoidGates, dropout: float, projection_size: int) -> None:
        super().__init__([weight, bias, *gates.params], projection_size)
        self.weight, self.bias, self.gates, self.dropout = weight, bias, gates, dropout
        self.H = weight.size(1)

    def begin(self, p: Tensor, h0: Tensor) -> None:
        B, T, k, H = h0.size(0), p.size(1), self.gates.k, self.H
        self.wt = self.weight.t()
        self.gates.begin(T, B, h0)
        self.s = h0.new_empty(B, T, k * H)                      # gate values
        self.u = h0.new_empty(B, T, H)                          # q_h + b
        self.n = h0.new_empty(B, T, H)                          # tanh(…), before dropout
        self.diff = h0.new_empty(B, T, H)                       # ñ − h
        self.noise = h0.new_empty(B, T, H) if self.dropout else None
        self.delta = h0.new_empty(B, T, (k + 1) * H)            # ∂L/∂(U h + [0, b])

    def _gate_values(self, t: int, p: Tensor | None, q: Tensor) -> Tensor:
        kH = self.gates.k * self.H
        a = q[:, :kH] if p is None else torch.add(p[:, :kH], q[:, :kH])
        return self.gates.forward(t, a, self.s[:, t])

    def _candidate(self, t: int, p: Tensor | None, q: Tensor, r: Tensor) -> Tensor:
        """n = tanh(p_n + r ⊙ u), kept, and u."""
        kH = self.gates.k * self.H
        u = torch.add(q[:, kH:], self.bias, out=self.u[:, t])
        pre = r * u if p is None else torch.addcmul(p, r, u)
        return tanh(pre, out=self.n[:, t])

    def _drop(self, t: int, x: Tensor) -> Tensor:
        if self.noise is None:
            return x
        return x * self.noise[:, t].bernoulli_(1 - self.dropout).div_(1 - self.dropout)

    def _candidate_backward(self, t: int, dn: Tensor, dpn: Tensor | None, dr: Tensor) -> None:
        """From ∂L/∂n (before dropout; overwritten): ∂L/∂p_n into dpn, ∂L/∂u into δ, ∂L/∂r into dr."""
        dc = dn.mul_(tanh_grad(self.n[:, t]))
        if dpn is not None:
            dpn.copy_(dc)
        torch.mul(dc, self.s[:, t][:, : self.H], out=self.delta[:, t][:, self.gates.k * self.H:])
        torch.mul(dc, self.u[:, t], out=dr)

    def _backward_through(self, t: int, ds: Tensor, direct: Tensor, dp: Tensor) -> Tensor:
        """The gates' backward from ∂L/∂s into δ (and into ∂p_j = ∂(p_j + q_j) where the gates read p), then
        ∂L/∂h = direct + δ U."""
        kH = self.gates.k * self.H
        self.gates.backward(t, ds, self.s[:, t], self.delta[:, t][:, :kH])
        if dp.size(1):
            dp[:, :kH].copy_(self.delta[:, t][:, :kH])
        return addmm(direct, self.delta[:, t], self.weight)

    def grads(self, ins: Tensor, dp: Tensor) -> list[Tensor]:
        kH = self.gates.k * self.H
        return [product_grad(self.delta, ins), row_sum(self.delta[..., kH:]), *self.gates.grads(self.delta[..., :kH])]


class GatedLinearKernel(_GatedKernel):
    """L-GRU (lau=False) or LAU (lau=True); gates in the order r, z, l (LAU: r, z, g); `lin`: the third."""

    def __init__(self, weight: Tensor, bias: Tensor, gates: SigmoidGates, dropout: float, lau: bool) -> None:
        super().__init__(weight, bias, gates, dropout, 5 * weight.size(1))
        self.lau = lau

    def begin(self, p: Tensor, h0: Tensor) -> None:
        super().begin(p, h0)
        self.rest = torch.empty_like(self.diff) if self.lau else None      # LAU: Hx − v

    def forward(self, t: int, p: Tensor, h: Tensor, out: Tensor) -> None:
        H = self.H
        q = mm(h, self.wt)
        r, z, lin = self._gate_values(t, p, q).split(H, 1)
        hx = p[:, 4 * H:]
        n = self._candidate(t, p[:, 3 * H:4 * H], q, r)
        diff = torch.sub(self._drop(t, n if self.lau else torch.addcmul(n, lin, hx)), h, out=self.diff[:, t])
        if self.lau:
            v = torch.addcmul(h, z, diff)
            torch.addcmul(v, lin, torch.sub(hx, v, out=self.rest[:, t]), out=out)
        else:
            torch.addcmul(h, z, diff, out=out)

    def backward(self, t: int, p: Tensor, h: Tensor, g: Tensor, dp: Tensor) -> Tensor:
        H = self.H
        _, z, lin = self.s[:, t].split(H, 1)
        ds = torch.empty_like(self.s[:, t])
        dr, dz, dl = ds.split(H, 1)
        if self.lau:                                            # h' = v + l ⊙ (Hx − v)
            torch.mul(g, self.rest[:, t], out=dl)
            dv = g - torch.mul(g, lin, out=dp[:, 4 * H:])
        else:
            dv = g
        torch.mul(dv, self.diff[:, t], out=dz)
        dn = dv * z                                             # ∂L/∂ñ, then ∂L/∂(ñ before dropout)
        if self.noise is not None:
            dn.mul_(self.noise[:, t])
        if not self.lau:                                        # ñ = n + l ⊙ Hx
            torch.mul(dn, p[:, 4 * H:], out=dl)
            torch.mul(dn, lin, out=dp[:, 4 * H:])
        direct = torch.addcmul(dv, dv, z, value=-1)
        self._candidate_backward(t, dn, dp[:, 3 * H:4 * H], dr)
        return self._backward_through(t, ds, direct, dp)


class GRUKernel(_GatedKernel):
    """T-GRU (transition=True: no input, h' = h + z ⊙ (ñ − h)) or the GRU with gate norm (h' = ñ + z ⊙ (h − ñ))."""

    def __init__(self, weight: Tensor, bias: Tensor, gates: SigmoidGates, dropout: float, transition: bool) -> None:
        super().__init__(weight, bias, gates, dropout, 0 if transition else 3 * weight.size(1))
        self.transition = transition

    def forward(self, t: int, p: Tensor, h: Tensor, out: Tensor) -> None:
        H = self.H
        q = mm(h, self.wt)
        r, z = self._gate_values(t, None if self.transition else p, q).split(H, 1)
        n = self._candidate(t, None if self.transition else p[:, 2 * H:], q, r)
        nd = self._drop(t, n)
        diff = torch.sub(nd, h, out=self.diff[:, t])
        if self.transition:
            torch.addcmul(h, z, diff, out=out)
        else:
            torch.addcmul(nd, z, diff, value=-1, out=out)

    def backward(self, t: int, p: Tensor, h: Tensor, g: Tensor, dp: Tensor) -> Tensor:
        H = self.H
        z = self.s[:, t][:, H:]
        ds = torch.empty_like(self.s[:, t])
        dr, dz = ds.split(H, 1)
        torch.mul(g, self.diff[:, t], out=dz)
        gz = g * z
        if self.transition:
            dn, direct = gz, g - gz
        else:
            dz.neg_()
            dn, direct = g - gz, gz
        if self.noise is not None:
            dn.mul_(self.noise[:, t])
        self._candidate_backward(t, dn, None if self.transition else dp[:, 2 * H:], dr)
        return self._backward_through(t, ds, direct, dp)
