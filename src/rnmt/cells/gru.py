"""Gated recurrent unit (Cho et al. 2014; ATR paper eqs. 2-5; DTMT eqs. 6-9).

    r = σ(W_r x + b_r + U_r h + c_r)
    z = σ(W_z x + b_z + U_z h + c_z)
    n = tanh(W_n x + b_n + r ⊙ (U_n h + c_n))
    h' = (1 − z) ⊙ n + z ⊙ h

`reset` places the reset gate: "after" the product, r ⊙ (U_n h + c_n) as above (DTMT's eq. 7, cuDNN's
and torch.nn.GRUCell's form), or "before" it, U_n (r ⊙ h) + c_n, as the ATR paper's eq. 4 writes it
(the ATR tables' setting). Both have the same parameters. Weights are laid out as in torch.nn.GRUCell
(gate order r, z, n), so the two can share a state dict.

With `gate_norm=True` (DTMT's "per-gate layer normalisation"), r = σ(LN(W_r x + U_r h)) and
z = σ(LN(W_z x + U_z h)) without biases, and the candidate has one bias: n = tanh(W_n x + r ⊙ (U_n h + c)).
`candidate_dropout` drops out n during training (DTMT).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rnmt.cells.base import RecurrentCell
from rnmt.cells.fused import time_major
from rnmt.cells.fused_dtmt import GRUKernel
from rnmt.cells.fused_gates import dropout_rate, sigmoid_gates
from rnmt.cells.fused_steps import StepKernel, product_grad, row_sum, sigmoid_grad, tanh, tanh_grad
from rnmt.cells.registry import register_cell
from rnmt.cells.triton import triton_path
from rnmt.io import InputError
from rnmt.matmul import addmm, linear, mm


@register_cell("gru")
class GRU(RecurrentCell):
    def __init__(self, input_size: int, hidden_size: int, gate_norm: bool = False,
                 candidate_dropout: float = 0.0, reset: str = "after") -> None:
        super().__init__(input_size, hidden_size)
        if reset not in ("after", "before"):
            raise InputError(f"gru: reset must be 'after' (r ⊙ (U h), DTMT eq. 7) or 'before' (U (r ⊙ h), ATR eq. 4), "
                             f"not {reset!r}")
        self.gate_norm, self.candidate_dropout, self.reset = gate_norm, candidate_dropout, reset
        H = hidden_size
        self.weight_ih = nn.Parameter(torch.empty(3 * H, input_size))
        self.weight_hh = nn.Parameter(torch.empty(3 * H, H))
        if gate_norm:
            self.bias_ih = None
            self.bias_hh = nn.Parameter(torch.zeros(H))          # the candidate's bias c
            self.norm_r, self.norm_z = nn.LayerNorm(H), nn.LayerNorm(H)
        else:
            self.bias_ih = nn.Parameter(torch.empty(3 * H))
            self.bias_hh = nn.Parameter(torch.empty(3 * H))
        bound = H ** -0.5
        for name, p in self.named_parameters():
            if "norm" not in name:
                nn.init.uniform_(p, -bound, bound)

    @property
    def projection_size(self) -> int:
        return 3 * self.hidden_size

    def project_inputs(self, x: Tensor) -> Tensor:
        return linear(x, self.weight_ih, self.bias_ih)

    def step(self, p: Tensor, state: Tensor) -> Tensor:
        H = self.hidden_size
        p_r, p_z, p_n = p.chunk(3, -1)
        rows = 2 * H if self.reset == "before" else 3 * H       # "before": U_n reads r ⊙ h, known only below
        g = linear(state, self.weight_hh[:rows], None if self.gate_norm else self.bias_hh[:rows])
        g_r, g_z = g[..., :H], g[..., H:2 * H]
        if self.gate_norm:
            r, z = torch.sigmoid(self.norm_r(p_r + g_r)), torch.sigmoid(self.norm_z(p_z + g_z))
            c = self.bias_hh                                      # the candidate's one bias
        else:
            r, z = torch.sigmoid(p_r + g_r), torch.sigmoid(p_z + g_z)
            c = self.bias_hh[2 * H:]
        if self.reset == "before":
            n = torch.tanh(p_n + linear(r * state, self.weight_hh[2 * H:], c))
        else:
            g_n = g[..., 2 * H:]
            n = torch.tanh(p_n + r * (g_n + c if self.gate_norm else g_n))
        if self.candidate_dropout:
            n = F.dropout(n, self.candidate_dropout, self.training)
        return n + z * (state - n)

    def step_kernel(self) -> StepKernel | None:
        """The step for the whole-sequence loop of cells/fused_steps.py: the reset gate after the product
        with any options (cells/fused_dtmt.py), before it without gate norm and candidate dropout (below)."""
        H = self.hidden_size
        if self.reset == "before":
            plain = not self.gate_norm and dropout_rate(self.candidate_dropout, self.training) == 0.0
            return ResetBeforeKernel(self.weight_hh, self.bias_hh) if plain else None
        gates = sigmoid_gates(H, [self.norm_r, self.norm_z] if self.gate_norm else None,
                              None if self.gate_norm else self.bias_hh[: 2 * H])
        rate = dropout_rate(self.candidate_dropout, self.training)
        if gates is None or rate is None:
            return None
        return GRUKernel(self.weight_hh, self.bias_hh if self.gate_norm else self.bias_hh[2 * H:], gates, rate,
                         transition=False)

    def sequence(self, projected: Tensor, mask: Tensor | None, state: Tensor) -> Tensor | None:
        """The recurrence over all steps: Triton kernels on CUDA (cells/triton; without gate norm and
        candidate dropout), else the loop of `step_kernel` (cells/fused_steps.py, any options)."""
        plain = not (self.gate_norm or (self.candidate_dropout and self.training)) and self.reset == "after"
        kernels = triton_path(projected) if plain else None
        if kernels is None:
            return super().sequence(projected, mask, state)
        p, m = time_major(projected, mask)
        return kernels.TritonGRU.apply(p, m, state.contiguous(), self.weight_hh, self.bias_hh).transpose(0, 1)


class ResetBeforeKernel(StepKernel):
    """The GRU step with the reset gate inside the product (ATR eq. 4), differentiated by hand:
        [q_r, q_z] = U_rz h + c_rz,   r, z = σ(p_r + q_r), σ(p_z + q_z),
        n = tanh(p_n + U_n (r ⊙ h) + c_n),   h' = n + z ⊙ (h − n).
    Two recurrent products a step (U_n reads r ⊙ h, known only after the first); ∂U_n = Σ_t δ_nᵀ (r ⊙ h)."""

    def __init__(self, weight: Tensor, bias: Tensor) -> None:
        super().__init__([weight, bias], 3 * weight.size(1))
        self.weight, self.bias = weight, bias

    def begin(self, p: Tensor, h0: Tensor) -> None:
        B, T, H = h0.size(0), p.size(1), h0.size(1)
        self.w_rz, self.w_n = self.weight[:2 * H], self.weight[2 * H:]
        self.w_rz_t, self.w_n_t = self.w_rz.t(), self.w_n.t()
        self.s = h0.new_empty(B, T, 2 * H)                      # r, z
        self.rh = h0.new_empty(B, T, H)                         # r ⊙ h, what U_n reads
        self.n = h0.new_empty(B, T, H)
        self.delta = h0.new_empty(B, T, 3 * H)                  # ∂L/∂[q_r, q_z, q_n]

    def forward(self, t: int, p: Tensor, h: Tensor, out: Tensor) -> None:
        H = h.size(1)
        s = self.s[:, t]
        torch.sigmoid(torch.add(p[:, :2 * H], addmm(self.bias[:2 * H], h, self.w_rz_t)), out=s)
        rh = torch.mul(s[:, :H], h, out=self.rh[:, t])
        n = tanh(torch.add(p[:, 2 * H:], addmm(self.bias[2 * H:], rh, self.w_n_t)), out=self.n[:, t])
        torch.addcmul(n, s[:, H:], h - n, out=out)

    def backward(self, t: int, p: Tensor, h: Tensor, g: Tensor, dp: Tensor) -> Tensor:
        H = h.size(1)
        s, n, delta = self.s[:, t], self.n[:, t], self.delta[:, t]
        r, z = s[:, :H], s[:, H:]
        d_n = torch.mul(g - g * z, tanh_grad(n), out=delta[:, 2 * H:])
        d_rh = mm(d_n, self.w_n)
        torch.mul(d_rh * h, sigmoid_grad(r), out=delta[:, :H])
        torch.mul(g * (h - n), sigmoid_grad(z), out=delta[:, H:2 * H])
        dp.copy_(delta)
        return addmm(torch.addcmul(g * z, d_rh, r), delta[:, :2 * H], self.w_rz)

    def grads(self, ins: Tensor, dp: Tensor) -> list[Tensor]:
        H = ins.size(-1)
        weight = torch.cat([product_grad(self.delta[..., :2 * H], ins), product_grad(self.delta[..., 2 * H:], self.rh)])
        return [weight, row_sum(self.delta)]
