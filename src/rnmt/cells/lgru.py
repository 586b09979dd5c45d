"""Linear-transformation enhanced GRU (L-GRU; Meng & Zhang 2019, DTMT eqs. 14-16), with the
per-gate layer normalisation the paper applies ("Advanced Techniques").

    r = σ(LN_r(W_xr x + W_hr h)),  z = σ(LN_z(W_xz x + W_hz h)),  l = σ(LN_l(W_xl x + W_hl h))   (8, 9, 16)
    h̃ = tanh(W_xh x + r ⊙ (W_hh h + b)) + l ⊙ H x                                              (15)
    h' = (1 − z) ⊙ h + z ⊙ h̃                                                                   (14)

All input products (W_xr, W_xz, W_xl, W_xh, H) of all timesteps are one matrix product.
Without `gate_norm` the gates get biases instead of layer norms.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from rnmt.cells.base import RecurrentCell
from rnmt.cells.gates import SigmoidGates, dropout_rate, sigmoid_gates, step_dropout
from rnmt.cells.gru import GatedKernel
from rnmt.cells.registry import register_cell
from rnmt.machine.matmul import linear, mm


class GatedLinearBase(RecurrentCell):
    """Shared parameters of L-GRU and LAU: three gates, a candidate and a linear input map H."""

    def __init__(self, input_size: int, hidden_size: int, gate_norm: bool = True,
                 candidate_dropout: float = 0.0) -> None:
        super().__init__(input_size, hidden_size)
        H = hidden_size
        self.gate_norm, self.candidate_dropout = gate_norm, candidate_dropout
        self.weight_ih = nn.Parameter(torch.empty(5 * H, input_size))   # gates a, b, c, candidate, H
        self.weight_hh = nn.Parameter(torch.empty(4 * H, H))            # gates a, b, c, candidate
        self.bias_hh = nn.Parameter(torch.zeros(H))                     # the candidate's b
        if gate_norm:
            self.norms = nn.ModuleList(nn.LayerNorm(H) for _ in range(3))
        else:
            self.gate_bias = nn.Parameter(torch.zeros(3 * H))
        for p in (self.weight_ih, self.weight_hh):
            nn.init.uniform_(p, -H ** -0.5, H ** -0.5)

    @property
    def projection_size(self) -> int:
        return 5 * self.hidden_size

    def project_inputs(self, x: Tensor) -> Tensor:
        return linear(x, self.weight_ih)

    def input_weights(self) -> tuple[Tensor, Tensor | None]:
        return self.weight_ih, None

    def parts(self, p: Tensor, state: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """→ (gate 1, gate 2, gate 3, candidate pre-activation, H x) for one step."""
        H = self.hidden_size
        px = p.split(H, -1)
        ph = linear(state, self.weight_hh).split(H, -1)
        pre = [px[k] + ph[k] for k in range(3)]
        if self.gate_norm:
            gates = [torch.sigmoid(n(a)) for n, a in zip(self.norms, pre, strict=True)]
        else:
            gates = [torch.sigmoid(a + b) for a, b in zip(pre, self.gate_bias.split(H), strict=True)]
        candidate = px[3] + gates[0] * (ph[3] + self.bias_hh)
        return gates[0], gates[1], gates[2], candidate, px[4]

    def dropped(self, x: Tensor) -> Tensor:
        return step_dropout(x, self.candidate_dropout, self.training)

    lau = False             # which of the two steps `step_kernel` differentiates (`GatedLinearKernel`, below)

    def step_kernel(self) -> GatedLinearKernel | None:
        gates = sigmoid_gates(self.hidden_size, self.norms if self.gate_norm else None,
                              None if self.gate_norm else self.gate_bias)
        rate = dropout_rate(self.candidate_dropout, self.training)
        if gates is None or rate is None:
            return None
        return GatedLinearKernel(self.weight_hh, self.bias_hh, gates, rate, self.lau)


@register_cell("lgru")
class LGRU(GatedLinearBase):
    def step(self, p: Tensor, state: Tensor) -> Tensor:
        _, z, lin, candidate, hx = self.parts(p, state)     # gates: r, z, l (the linear gate)
        h_tilde = self.dropped(torch.tanh(candidate) + lin * hx)
        return state + z * (h_tilde - state)


class GatedLinearKernel(GatedKernel):
    """L-GRU (lau=False) or LAU (lau=True); gates in the order r, z, l (LAU: r, z, g); `lin`: the third."""

    def __init__(self, weight: Tensor, bias: Tensor, gates: SigmoidGates, dropout: float, lau: bool) -> None:
        super().__init__(weight, bias, gates, dropout, 5 * weight.size(1))
        self.lau = lau
        self.kind = "lau" if lau else "lgru"

    def begin(self, p: Tensor, h0: Tensor) -> None:
        super().begin(p, h0)
        self.rest = torch.empty_like(self.diff) if self.lau else None      # LAU: Hx − v

    def forward(self, t: int, p: Tensor, h: Tensor, out: Tensor) -> None:
        if self.rows is not None:
            self._rows_forward(t, p, h, out)
            return
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
        if self.rows is not None:
            return self._rows_backward(t, p, g, dp)
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
            dn.mul_(self.noise[t])
        if not self.lau:                                        # ñ = n + l ⊙ Hx
            torch.mul(dn, p[:, 4 * H:], out=dl)
            torch.mul(dn, lin, out=dp[:, 4 * H:])
        direct = torch.addcmul(dv, dv, z, value=-1)
        self._candidate_backward(t, dn, dp[:, 3 * H:4 * H], dr)
        return self._backward_through(t, ds, direct, dp)
