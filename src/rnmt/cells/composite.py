"""Cells made of cells, so that composite recurrences run through the same `run` loop.

- `TransitionCell`: a deep transition block (DTMT, Meng & Zhang 2019, Figure 1): at every timestep
  the bottom cell reads the input, then each transition cell (T-GRU) transforms the state in turn;
  the top state is carried to the next timestep.
- `TwoInputCell`: two cells per timestep with their own inputs, s = lower(h, a_t), h' = higher(s, b_t)
  (the backward pass of the context-aware encoder, Zhang et al. 2017; ATR paper Table 2 "CA").
  Its input is the concatenation [a_t; b_t].

Both run over a whole sequence in one loop when all their cells have step kernels: their `step_kernel` is the
cells' kernels chained within a timestep (cells/kernel.py `ChainKernel`), and the step loop is the fallback
otherwise. A transition block whose cells pass their state and whose bottom projects its input affinely also
serves DTMT's fused decoder (models/decoder_sequence.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from rnmt.cells.base import RecurrentCell
from rnmt.cells.kernel import StepKernel, chain


class TransitionCell(RecurrentCell):
    def __init__(self, bottom: RecurrentCell, transitions: Sequence[RecurrentCell]) -> None:
        super().__init__(bottom.input_size, bottom.hidden_size)
        self.bottom = bottom
        self.transitions = nn.ModuleList(transitions)

    @property
    def state_size(self) -> int:
        return self.bottom.state_size

    def project_inputs(self, x: Tensor) -> Tensor:
        return self.bottom.project_inputs(x)

    @property
    def projection_size(self) -> int:
        return self.bottom.projection_size

    def step(self, p: Tensor, state: Tensor) -> Tensor:
        state = self.bottom.step(p, state)
        for cell in self.transitions:
            state = cell.step(state.new_zeros(state.size(0), 0), state)
        return state

    def output(self, state: Tensor) -> Tensor:
        return self.bottom.output(state)

    def passes_state(self) -> bool:
        return self.bottom.passes_state() and all(cell.passes_state() for cell in self.transitions)

    def input_weights(self) -> tuple[Tensor, Tensor | None] | None:
        return self.bottom.input_weights()

    def step_kernel(self) -> StepKernel | None:
        return chain([cell.step_kernel() for cell in (self.bottom, *self.transitions)])

    def sequence(self, projected: Tensor, mask: Tensor | None, state: Tensor) -> Tensor | None:
        if not self.transitions:                # DTMT's ShallowRNMT: the bottom cell alone
            return self.bottom.sequence(projected, mask, state)
        return super().sequence(projected, mask, state)


class TwoInputCell(RecurrentCell):
    def __init__(self, lower: RecurrentCell, higher: RecurrentCell) -> None:
        super().__init__(lower.input_size + higher.input_size, higher.hidden_size)
        self.lower, self.higher = lower, higher

    @property
    def state_size(self) -> int:
        return self.higher.state_size

    def project_inputs(self, x: Tensor) -> Tensor:
        a, b = x.split([self.lower.input_size, self.higher.input_size], -1)
        return torch.cat([self.lower.project_inputs(a), self.higher.project_inputs(b)], -1)

    @property
    def projection_size(self) -> int:
        return self.lower.projection_size + self.higher.projection_size

    def step(self, p: Tensor, state: Tensor) -> Tensor:
        pa, pb = p.split([self.lower.projection_size, self.higher.projection_size], -1)
        return self.higher.step(pb, self.lower.step(pa, state))

    def output(self, state: Tensor) -> Tensor:
        return self.higher.output(state)

    def step_kernel(self) -> StepKernel | None:
        return chain([self.lower.step_kernel(), self.higher.step_kernel()])
