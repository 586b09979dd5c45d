"""Addition-subtraction twin-gated recurrent unit (ATR; Zhang et al. 2018, eqs. 6-9).

    p = W_x x + b_x,   q = W_h h + b_h                     (eq. 6)
    i = σ(p + q)                                           (eq. 7)
    f = σ(p − q)                                           (eq. 8, as corrected in the reference README)
    h' = i ⊙ p + f ⊙ h                                     (eq. 9)

Options from the reference code: `state_tanh` gives h' = tanh(i ⊙ p + f ⊙ h); `twin="one_minus"`
uses i = 1 − f instead of eq. 7. `bias=False` is eq. 6 as printed, p = W_x x and q = W_h h (the ATR
tables' setting); the reference code adds the biases. Two weight matrices (Table 1); p of all
timesteps is one product.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from rnmt.cells.base import RecurrentCell
from rnmt.cells.fused import ATRSequence, time_major
from rnmt.cells.fused_atr import ATRKernel
from rnmt.cells.registry import register_cell
from rnmt.cells.triton import triton_path
from rnmt.io import InputError
from rnmt.matmul import linear


@register_cell("atr")
class ATR(RecurrentCell):
    def __init__(self, input_size: int, hidden_size: int, state_tanh: bool = False, twin: str = "add",
                 bias: bool = True) -> None:
        super().__init__(input_size, hidden_size)
        if twin not in ("add", "one_minus"):
            raise InputError(f"atr: twin must be 'add' (i = σ(p + q)) or 'one_minus' (i = 1 − f), not {twin!r}")
        self.state_tanh, self.twin = state_tanh, twin
        self.weight_ih = nn.Parameter(torch.empty(hidden_size, input_size))
        self.weight_hh = nn.Parameter(torch.empty(hidden_size, hidden_size))
        self.bias_ih = nn.Parameter(torch.empty(hidden_size)) if bias else None
        self.bias_hh = nn.Parameter(torch.empty(hidden_size)) if bias else None
        # the kernels take a bias: without one they add this constant zero (no parameter, no gradient kept)
        self.register_buffer("no_bias", None if bias else torch.zeros(hidden_size), persistent=False)
        for p in self.parameters():
            nn.init.uniform_(p, -0.08, 0.08)        # the reference LM code's init (zero biases gave NaNs)

    @property
    def projection_size(self) -> int:
        return self.hidden_size

    def project_inputs(self, x: Tensor) -> Tensor:
        return linear(x, self.weight_ih, self.bias_ih)

    def gates(self, p: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """(input gate, forget gate) for one step; also used by the gate-correlation analysis."""
        q = linear(state, self.weight_hh, self.bias_hh)
        f = torch.sigmoid(p - q)
        i = 1 - f if self.twin == "one_minus" else torch.sigmoid(p + q)
        return i, f

    def step(self, p: Tensor, state: Tensor) -> Tensor:
        i, f = self.gates(p, state)
        h = i * p + f * state
        return torch.tanh(h) if self.state_tanh else h

    def step_kernel(self) -> ATRKernel | None:
        """The step for composite cells' chained loops (cells/fused_atr.py); the default options only."""
        if self.state_tanh or self.twin != "add":
            return None
        return ATRKernel(self.weight_hh, self._recurrent_bias())

    def sequence(self, projected: Tensor, mask: Tensor | None, state: Tensor) -> Tensor | None:
        """Eqs. 6-9 over all steps in one fused loop (cells/fused.py; Triton kernels on CUDA, cells/triton);
        the default options only."""
        if self.state_tanh or self.twin != "add":
            return None
        p, m = time_major(projected, mask)
        kernels = triton_path(p)
        sequence = kernels.TritonATR if kernels else ATRSequence
        return sequence.apply(p, m, state.contiguous(), self.weight_hh, self._recurrent_bias()).transpose(0, 1)

    def _recurrent_bias(self) -> Tensor:
        return self.bias_hh if self.bias_hh is not None else self.no_bias
