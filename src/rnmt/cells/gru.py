"""Gated recurrent unit (Cho et al. 2014; ATR paper eqs. 2-5; DTMT eqs. 6-9).

    r = σ(W_r x + b_r + U_r h + c_r)
    z = σ(W_z x + b_z + U_z h + c_z)
    n = tanh(W_n x + b_n + r ⊙ (U_n h + c_n))
    h' = (1 − z) ⊙ n + z ⊙ h

`reset` places the reset gate: "after" the product, r ⊙ (U_n h + c_n) as above (DTMT's eq. 7, cuDNN's
and torch.nn.GRUCell's form), or "before" it, U_n (r ⊙ h) + c_n, as the ATR paper's eq. 4 writes it
(the ATR tables' setting). Both have the same parameters, laid out as in torch.nn.GRUCell (gate order
r, z, n); "before" keeps U_rz and U_n (and their biases) as two parameters each, and loads torch's one
[3H, H] matrix into them, so the two share state dicts.

With `gate_norm=True` (DTMT's "per-gate layer normalisation"), r = σ(LN(W_r x + U_r h)) and
z = σ(LN(W_z x + U_z h)) without biases, and the candidate has one bias: n = tanh(W_n x + r ⊙ (U_n h + c)).
`candidate_dropout` drops out n during training (DTMT).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from rnmt.cells.base import RecurrentCell, torch_recurrence
from rnmt.cells.gates import SigmoidGates, dropout_noise, dropout_rate, sigmoid_gates, step_dropout
from rnmt.cells.kernel import StepKernel, product_grad, row_sum, sigmoid_grad, tanh, tanh_grad, time_major
from rnmt.cells.registry import register_cell
from rnmt.cells.triton import triton_path
from rnmt.io import InputError
from rnmt.machine.matmul import addmm, linear, mm


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
        # "before": U_rz and U_n as two parameters, since U_n reads r ⊙ h, known only after U_rz's product.
        # Slices of one [3H, H] matrix would be cast again at every step under autocast (its cache keeps
        # whole parameters only); the parameters are drawn in the same order, so seeded models are unchanged
        split = reset == "before"
        if split:
            self.weight_hh_rz, self.weight_hh_n = nn.Parameter(torch.empty(2 * H, H)), nn.Parameter(torch.empty(H, H))
        else:
            self.weight_hh = nn.Parameter(torch.empty(3 * H, H))
        if gate_norm:
            self.bias_ih = None
            self.bias_hh = nn.Parameter(torch.zeros(H))          # the candidate's bias c
            self.norm_r, self.norm_z = nn.LayerNorm(H), nn.LayerNorm(H)
        else:
            self.bias_ih = nn.Parameter(torch.empty(3 * H))
            if split:
                self.bias_hh_rz, self.bias_hh_n = nn.Parameter(torch.empty(2 * H)), nn.Parameter(torch.empty(H))
            else:
                self.bias_hh = nn.Parameter(torch.empty(3 * H))
        bound = H ** -0.5
        for name, p in self.named_parameters():
            if "norm" not in name:
                nn.init.uniform_(p, -bound, bound)
        if split:
            self.register_load_state_dict_pre_hook(_split_recurrent)

    @property
    def projection_size(self) -> int:
        return 3 * self.hidden_size

    def project_inputs(self, x: Tensor) -> Tensor:
        return linear(x, self.weight_ih, self.bias_ih)

    def input_weights(self) -> tuple[Tensor, Tensor | None]:
        return self.weight_ih, self.bias_ih

    def step(self, p: Tensor, state: Tensor) -> Tensor:
        H = self.hidden_size
        p_r, p_z, p_n = p.chunk(3, -1)
        before = self.reset == "before"
        if before:
            g = linear(state, self.weight_hh_rz, None if self.gate_norm else self.bias_hh_rz)
        else:
            g = linear(state, self.weight_hh, None if self.gate_norm else self.bias_hh)
        g_r, g_z = g[..., :H], g[..., H:2 * H]
        if self.gate_norm:
            r, z = torch.sigmoid(self.norm_r(p_r + g_r)), torch.sigmoid(self.norm_z(p_z + g_z))
            c = self.bias_hh                                      # the candidate's one bias
        else:
            r, z = torch.sigmoid(p_r + g_r), torch.sigmoid(p_z + g_z)
            c = self.bias_hh_n if before else self.bias_hh[2 * H:]
        if before:
            n = torch.tanh(p_n + linear(r * state, self.weight_hh_n, c))
        else:
            g_n = g[..., 2 * H:]
            n = torch.tanh(p_n + r * (g_n + c if self.gate_norm else g_n))
        if self.candidate_dropout:
            n = step_dropout(n, self.candidate_dropout, self.training)
        return n + z * (state - n)

    def step_kernel(self) -> StepKernel | None:
        """The step for the whole-sequence loop of cells/kernel.py: the reset gate after the product
        with any options (`GRUKernel`), before it without gate norm and candidate dropout (`ResetBeforeKernel`)."""
        H = self.hidden_size
        if self.reset == "before":
            plain = not self.gate_norm and dropout_rate(self.candidate_dropout, self.training) == 0.0
            return ResetBeforeKernel(self.weight_hh_rz, self.weight_hh_n, self.bias_hh_rz, self.bias_hh_n) \
                if plain else None
        gates = sigmoid_gates(H, [self.norm_r, self.norm_z] if self.gate_norm else None,
                              None if self.gate_norm else self.bias_hh[: 2 * H])
        rate = dropout_rate(self.candidate_dropout, self.training)
        if gates is None or rate is None:
            return None
        return GRUKernel(self.weight_hh, self.bias_hh if self.gate_norm else self.bias_hh[2 * H:], gates, rate,
                         transition=False)

    def sequence(self, projected: Tensor, mask: Tensor | None, state: Tensor) -> Tensor | None:
        """The recurrence over all steps: Triton kernels on CUDA (cells/triton; without gate norm and
        candidate dropout), else the loop of `step_kernel` (cells/kernel.py, any options)."""
        plain = not (self.gate_norm or (self.candidate_dropout and self.training)) and self.reset == "after"
        kernels = triton_path(projected, "gru") if plain else None
        if kernels is None:
            return super().sequence(projected, mask, state)
        p, m = time_major(projected, mask)
        return kernels.TritonGRU.apply(p, m, state.contiguous(), self.weight_hh, self.bias_hh).transpose(0, 1)

    def torch_layer(self, x: Tensor, lengths: Tensor | None, state: Tensor) -> tuple[Tensor, Tensor] | None:
        """torch's nn.GRU with this cell's weights (the same equations and layout): the reset gate after the
        product, without gate norm and, in training, without candidate dropout."""
        if self.gate_norm or self.reset != "after" or (self.candidate_dropout and self.training):
            return None
        got = torch_recurrence("gru", x, lengths, state, None,
                               [self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh])
        return None if got is None else (got[0], got[1])


class ResetBeforeKernel(StepKernel):
    """The GRU step with the reset gate inside the product (ATR eq. 4), differentiated by hand:
        [q_r, q_z] = U_rz h + c_rz,   r, z = σ(p_r + q_r), σ(p_z + q_z),
        n = tanh(p_n + U_n (r ⊙ h) + c_n),   h' = n + z ⊙ (h − n).
    Two recurrent products a step (U_n reads r ⊙ h, known only after the first); ∂U_n = Σ_t δ_nᵀ (r ⊙ h)."""

    def __init__(self, w_rz: Tensor, w_n: Tensor, b_rz: Tensor, b_n: Tensor) -> None:
        super().__init__([w_rz, w_n, b_rz, b_n], 3 * w_rz.size(1))
        self.w_rz, self.w_n, self.b_rz, self.b_n = w_rz, w_n, b_rz, b_n

    def begin(self, p: Tensor, h0: Tensor) -> None:
        B, T, H = h0.size(0), p.size(1), h0.size(1)
        self.w_rz_t, self.w_n_t = self.w_rz.t(), self.w_n.t()
        self.s = h0.new_empty(B, T, 2 * H)                      # r, z
        self.rh = h0.new_empty(B, T, H)                         # r ⊙ h, what U_n reads
        self.n = h0.new_empty(B, T, H)
        self.delta = h0.new_empty(B, T, 3 * H)                  # ∂L/∂[q_r, q_z, q_n]
        self.rows = triton_path(h0, "gru")          # on CUDA a step's elementwise work is Triton kernels

    def forward(self, t: int, p: Tensor, h: Tensor, out: Tensor) -> None:
        H = h.size(1)
        s = self.s[:, t]
        if self.rows is not None:
            self.rows.reset_before_forward(p, h, self.w_rz_t, self.b_rz, self.w_n_t, self.b_n, s, self.rh[:, t],
                                           self.n[:, t], out)
            return
        torch.sigmoid(torch.add(p[:, :2 * H], addmm(self.b_rz, h, self.w_rz_t)), out=s)
        rh = torch.mul(s[:, :H], h, out=self.rh[:, t])
        n = tanh(torch.add(p[:, 2 * H:], addmm(self.b_n, rh, self.w_n_t)), out=self.n[:, t])
        torch.addcmul(n, s[:, H:], h - n, out=out)

    def backward(self, t: int, p: Tensor, h: Tensor, g: Tensor, dp: Tensor) -> Tensor:
        H = h.size(1)
        s, n, delta = self.s[:, t], self.n[:, t], self.delta[:, t]
        if self.rows is not None:
            return self.rows.reset_before_backward(g, h, s, n, self.w_rz, self.w_n, delta, dp)
        r, z = s[:, :H], s[:, H:]
        d_n = torch.mul(g - g * z, tanh_grad(n), out=delta[:, 2 * H:])
        d_rh = mm(d_n, self.w_n)
        torch.mul(d_rh * h, sigmoid_grad(r), out=delta[:, :H])
        torch.mul(g * (h - n), sigmoid_grad(z), out=delta[:, H:2 * H])
        dp.copy_(delta)
        return addmm(torch.addcmul(g * z, d_rh, r), delta[:, :2 * H], self.w_rz)

    def grads(self, ins: Tensor, dp: Tensor) -> list[Tensor]:
        H = ins.size(-1)
        d_rz, d_n = self.delta[..., :2 * H], self.delta[..., 2 * H:]
        return [product_grad(d_rz, ins), product_grad(d_n, self.rh), row_sum(d_rz), row_sum(d_n)]


def _split_recurrent(module: nn.Module, state_dict: dict[str, Tensor], prefix: str, *_: object) -> None:
    """A reset-before GRU saved with one [3H, H] recurrent matrix (and [3H] bias), as torch's layout has
    them, loads into its two parameters."""
    H = module.hidden_size
    for name in ("weight_hh", "bias_hh"):
        whole = state_dict.get(prefix + name)
        if whole is not None and whole.size(0) == 3 * H:
            del state_dict[prefix + name]
            state_dict[prefix + name + "_rz"], state_dict[prefix + name + "_n"] = whole[:2 * H], whole[2 * H:]


class GatedKernel(StepKernel):
    """DTMT's cells as step kernels with a hand-written backward for cells/kernel.py's loop: `GRUKernel`
    (T-GRU, cells/tgru.py, and the gate-normalised GRU above) and `GatedLinearKernel` (L-GRU and LAU,
    cells/lgru.py, cells/lau.py), with per-gate layer norm or gate biases (cells/gates.py) and candidate dropout.

    L-GRU / LAU (Meng & Zhang 2019, eqs. 14-16; Wang et al. 2017), p = [p_1, p_2, p_3, p_h, Hx], U = W_h·:
        [q_1, q_2, q_3, q_h] = U h,   s_j = gate_j(p_j + q_j),   u = q_h + b,   n = tanh(p_h + s_1 ⊙ u)
        L-GRU:  ñ = drop(n + s_3 ⊙ Hx),   h' = h + s_2 ⊙ (ñ − h)
        LAU:    ñ = drop(n),   v = h + s_2 ⊙ (ñ − h),   h' = v + s_3 ⊙ (Hx − v)
    T-GRU (DTMT eqs. 10-13; no input) and the GRU with gate norm (cells/gru.py), p = [p_r, p_z, p_n] or none:
        [q_r, q_z, q_h] = U h,   r, z = gate(p_r + q_r), gate(p_z + q_z),   ñ = drop(tanh(p_n + r ⊙ (q_h + b)))
        T-GRU:  h' = h + z ⊙ (ñ − h)          GRU:  h' = ñ + z ⊙ (h − ñ)

    Backward at step t: the chain rule through these lines, δ = [∂(p_j + q_j)…, ∂u] for the recurrent
    product, ∂h = (direct terms) + δ U; after the loop ∂U = Σ_t δ_tᵀ h_{t−1} and ∂b = Σ_t ∂u_t.
    Dropout draws its noise per step as the step loop does (gates.py `dropout_noise`), so a seeded run matches the
    step loop on the CPU and CUDA, under autocast too. On CUDA a step's elementwise work, the gates' layer norms
    included, is one Triton kernel each way around the product U h (cells/triton/gated.py, `rows`).

    What both kernels hold: U [G·H, H], the candidate's bias b [H], the gates and the dropout rate.
    """

    def __init__(self, weight: Tensor, bias: Tensor, gates: SigmoidGates, dropout: float, projection_size: int) -> None:
        super().__init__([weight, bias, *gates.params], projection_size)
        self.weight, self.bias, self.gates, self.dropout = weight, bias, gates, dropout
        self.H = weight.size(1)

    kind = ""            # the cell, as the row kernels name it (cells/triton/gated.py `KINDS`)

    def begin(self, p: Tensor, h0: Tensor) -> None:
        B, T, k, H = h0.size(0), p.size(1), self.gates.k, self.H
        self.wt = self.weight.t()
        self.gates.begin(T, B, h0)
        self.s = h0.new_empty(B, T, k * H)                      # gate values
        self.u = h0.new_empty(B, T, H)                          # q_h + b
        self.n = h0.new_empty(B, T, H)                          # tanh(…), before dropout
        self.diff = h0.new_empty(B, T, H)                       # ñ − h
        self.noise: list[Tensor] | None = [] if self.dropout else None     # each step's, dense [B, H]
        # what each step's noise is drawn from (dropout_noise's float32 or wider ones)
        self.ones = h0.new_ones(B, H, dtype=torch.promote_types(h0.dtype, torch.float32)) if self.dropout else None
        self.delta = h0.new_empty(B, T, (k + 1) * H)            # ∂L/∂(U h + [0, b])
        self.rest: Tensor | None = None
        rows = triton_path(h0, "gated")             # on CUDA a step's elementwise work is one Triton kernel
        self.rows = rows if rows is not None and rows.fits(H) else None
        # ∂y of the layer-normalised gates at every step, for ∂γ and ∂β summed once after the loop
        self.dy = h0.new_empty(T, B, k, H) if self.rows is not None and self.gates.norms is not None else None

    def _rows_forward(self, t: int, p: Tensor, h: Tensor, out: Tensor) -> None:
        """The step on the row kernels, its dropout noise drawn first as `_drop` draws it."""
        noise = None if self.noise is None else self._noise(t, self.n[:, t])
        self.rows.rows_forward(self.kind, p if p.size(1) else None, mm(h, self.wt), self.bias, self.gates, t, h,
                               noise, self.s[:, t], self.u[:, t], self.n[:, t], self.diff[:, t],
                               None if self.rest is None else self.rest[:, t], out)

    def _rows_backward(self, t: int, p: Tensor, g: Tensor, dp: Tensor) -> Tensor:
        direct = self.rows.rows_backward(
            self.kind, g, p if p.size(1) else None, self.gates, t, self.s[:, t], self.u[:, t], self.n[:, t],
            self.diff[:, t], None if self.noise is None else self.noise[t],
            None if self.rest is None else self.rest[:, t], self.delta[:, t], dp if dp.size(1) else None,
            None if self.dy is None else self.dy[t])
        return addmm(direct, self.delta[:, t], self.weight)

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
        """x times step t's dropout noise, kept for the backward, drawn from the generator as the step loop draws
        it (cells/gates.py `dropout_noise`), on the CPU and on CUDA, under autocast too."""
        if self.noise is None:
            return x
        return x * self._noise(t, x)

    def _noise(self, t: int, x: Tensor) -> Tensor:
        """Step t's noise for x, drawn and kept as noise[t] (a pass runs its steps forward in order, once each)."""
        self.noise.append(dropout_noise(x, self.dropout, self.ones))
        return self.noise[t]

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
        if self.dy is not None:
            self.gates.steps_summed(self.dy)
        return [product_grad(self.delta, ins), row_sum(self.delta[..., kH:]), *self.gates.grads(self.delta[..., :kH])]


class GRUKernel(GatedKernel):
    """T-GRU (transition=True: no input, h' = h + z ⊙ (ñ − h)) or the GRU with gate norm (h' = ñ + z ⊙ (h − ñ))."""

    def __init__(self, weight: Tensor, bias: Tensor, gates: SigmoidGates, dropout: float, transition: bool) -> None:
        super().__init__(weight, bias, gates, dropout, 0 if transition else 3 * weight.size(1))
        self.transition = transition
        self.kind = "tgru" if transition else "gru"

    def forward(self, t: int, p: Tensor, h: Tensor, out: Tensor) -> None:
        if self.rows is not None:
            self._rows_forward(t, p, h, out)
            return
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
        if self.rows is not None:
            return self._rows_backward(t, p, g, dp)
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
            dn.mul_(self.noise[t])
        self._candidate_backward(t, dn, None if self.transition else dp[:, 2 * H:], dr)
        return self._backward_through(t, ds, direct, dp)
