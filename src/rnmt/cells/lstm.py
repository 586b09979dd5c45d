"""Long short-term memory (Hochreiter & Schmidhuber 1997), without peepholes, as torch.nn.LSTMCell.

    [i, f, g, o] = [σ, σ, tanh, σ](W x + b + U h + c)
    c' = f ⊙ c + i ⊙ g,   h' = o ⊙ tanh(c')

The state is [h; c]; weights are laid out as torch.nn.LSTMCell's (gate order i, f, g, o).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from rnmt.cells.base import RecurrentCell, torch_recurrence
from rnmt.cells.kernel import StepKernel, product_grad, row_sum, sigmoid_grad, tanh, tanh_grad
from rnmt.cells.registry import register_cell
from rnmt.machine.matmul import addmm, linear, mm


@register_cell("lstm")
class LSTM(RecurrentCell):
    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__(input_size, hidden_size)
        self.weight_ih = nn.Parameter(torch.empty(4 * hidden_size, input_size))
        self.weight_hh = nn.Parameter(torch.empty(4 * hidden_size, hidden_size))
        self.bias_ih = nn.Parameter(torch.empty(4 * hidden_size))
        self.bias_hh = nn.Parameter(torch.empty(4 * hidden_size))
        bound = hidden_size ** -0.5
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    @property
    def state_size(self) -> int:
        return 2 * self.hidden_size

    @property
    def projection_size(self) -> int:
        return 4 * self.hidden_size

    def project_inputs(self, x: Tensor) -> Tensor:
        return linear(x, self.weight_ih, self.bias_ih)

    def step(self, p: Tensor, state: Tensor) -> Tensor:
        h, c = state.chunk(2, -1)
        i, f, g, o = (p + linear(h, self.weight_hh, self.bias_hh)).chunk(4, -1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.cat([torch.sigmoid(o) * torch.tanh(c), c], -1)

    def output(self, state: Tensor) -> Tensor:
        return state[..., : self.hidden_size]

    def step_kernel(self) -> LSTMKernel:
        return LSTMKernel(self.weight_hh, self.bias_hh, "ifgo")

    def torch_layer(self, x: Tensor, lengths: Tensor | None, state: Tensor) -> tuple[Tensor, Tensor] | None:
        """torch's nn.LSTM with this cell's weights (the same equations and gate order)."""
        h0, c0 = state.chunk(2, -1)
        got = torch_recurrence("lstm", x, lengths, h0, c0,
                               [self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh])
        return None if got is None else (got[0], torch.cat([got[1], got[2]], -1))


class LSTMKernel(StepKernel):
    """The LSTM step with a hand-written backward for cells/kernel.py's loop, for torch.nn.LSTMCell's LSTM
    (above) and the UD paper's single-product LSTM (cells/ud_lstm.py), which differ only in the
    order of the gate blocks and in where the bias is added.

        a = p + U h (+ c),   i, f, o = σ(a_i), σ(a_f), σ(a_o),   g = tanh(a_g)
        c' = f ⊙ c + i ⊙ g,   h' = o ⊙ tanh(c')                                   (state [h; c])

    Backward at step t from ∂h', ∂c':
        ∂c'' = ∂c' + ∂h' ⊙ o ⊙ (1 − tanh² c'),   ∂a_o = ∂h' ⊙ tanh c' ⊙ σ'(a_o),   ∂a_i = ∂c'' ⊙ g ⊙ σ'(a_i),
        ∂a_f = ∂c'' ⊙ c ⊙ σ'(a_f),   ∂a_g = ∂c'' ⊙ i ⊙ (1 − g²),   ∂h = ∂a U,   ∂c = ∂c'' ⊙ f,   ∂p = ∂a;
    and for all steps at once ∂U = Σ_t ∂a_tᵀ h_{t−1}, ∂c = Σ_t ∂a_t.
    """

    def __init__(self, weight: Tensor, bias: Tensor | None, order: str) -> None:
        """U = weight [4H, H], c = bias [4H] (None: the projection has it), `order` the gate blocks:
        "ifgo" (torch.nn.LSTMCell) or "ifog" (the UD paper's tutorial LSTM)."""
        super().__init__([weight] if bias is None else [weight, bias], weight.size(0))
        self.weight, self.bias = weight, bias
        H = self.H = weight.size(1)
        block = {name: slice(k * H, (k + 1) * H) for k, name in enumerate(order)}
        self.i, self.f, self.g, self.o = (block[name] for name in "ifgo")
        runs: list[list[int]] = []                     # the σ gates as runs of adjacent blocks
        for k, name in enumerate(order):
            if name == "g":
                continue
            if runs and runs[-1][1] == k:
                runs[-1][1] = k + 1
            else:
                runs.append([k, k + 1])
        self.sigmoid_runs = [slice(a * H, b * H) for a, b in runs]

    def begin(self, p: Tensor, h0: Tensor) -> None:
        T, H = p.size(1), self.H
        self.wt = self.weight.t()
        self.biased = None if self.bias is None else p + self.bias      # the bias added for all steps at once
        self.acts = p.new_empty(h0.size(0), T, 4 * H)                   # σ(a_i), σ(a_f), tanh(a_g), σ(a_o)
        self.tanh_c = p.new_empty(h0.size(0), T, H)

    def forward(self, t: int, p: Tensor, h: Tensor, out: Tensor) -> None:
        H, acts = self.H, self.acts[:, t]
        a = addmm(p if self.biased is None else self.biased[:, t], h[:, :H], self.wt)
        for run in self.sigmoid_runs:
            torch.sigmoid(a[:, run], out=acts[:, run])
        tanh(a[:, self.g], out=acts[:, self.g])
        c = torch.mul(acts[:, self.f], h[:, H:], out=out[:, H:])
        c.addcmul_(acts[:, self.i], acts[:, self.g])
        torch.mul(acts[:, self.o], tanh(c, out=self.tanh_c[:, t]), out=out[:, :H])

    def backward(self, t: int, p: Tensor, h: Tensor, g: Tensor, dp: Tensor) -> Tensor:
        H, acts, tc = self.H, self.acts[:, t], self.tanh_c[:, t]
        i, f, gg, o = acts[:, self.i], acts[:, self.f], acts[:, self.g], acts[:, self.o]
        gh, gc = g[:, :H], g[:, H:]
        dc = torch.addcmul(gc, gh * o, tanh_grad(tc))
        torch.mul(gh * tc, sigmoid_grad(o), out=dp[:, self.o])
        torch.mul(dc * gg, sigmoid_grad(i), out=dp[:, self.i])
        torch.mul(dc * h[:, H:], sigmoid_grad(f), out=dp[:, self.f])
        torch.mul(dc * i, tanh_grad(gg), out=dp[:, self.g])
        return torch.cat([mm(dp, self.weight), dc.mul_(f)], 1)

    def grads(self, ins: Tensor, dp: Tensor) -> list[Tensor]:
        dw = product_grad(dp, ins[..., : self.H])            # the product reads h, the first half of the state
        return [dw] if self.bias is None else [dw, row_sum(dp)]
