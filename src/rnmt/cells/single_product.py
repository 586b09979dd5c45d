"""The UD paper's "single dot product" cells (section 2, Figure 1): every gate and the candidate of a
layer with n units come from ONE product of the input and the previous output,

    a_t = W [x_t; h_{t-1}] + b,   W = [W_x | W_h] ∈ R^{g·n × (m + n)},   g blocks of n rows,

with no dependence on a cell state (no peepholes). `project_inputs` computes W_x x_t + b for all
timesteps in one batched product and `step` adds W_h h_{t-1}: the paper's one product per step, split.

Parameter counts. The cells hold g·n·(m + n) weights (+ g·n biases with `bias=True`).
The paper counts a layer differently (section 2, "the same number of parameters as a basic RNN with
hidden size 600 (i.e. 600² + 200×600 = 480000 for the first layer and 600² + 600² = 720000 for the
second)"): as a basic RNN whose hidden size is the product's width k = g·n (600 for the GRU's 3 × 200
and the LSTM's 4 × 150), k² + m·k without biases, where m is the embedding width for the first layer
and the layer below's k above it. `paper_counts` applies that rule to a stack of cells.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from rnmt.cells.base import RecurrentCell
from rnmt.machine.matmul import linear


class SingleProductCell(RecurrentCell):
    """Holds W_x [g·n, m], W_h [g·n, n] and an optional bias [g·n]; subclasses set `blocks` (g)."""

    blocks: int

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True) -> None:
        super().__init__(input_size, hidden_size)
        width = self.blocks * hidden_size
        self.weight_ih = nn.Parameter(torch.empty(width, input_size))
        self.weight_hh = nn.Parameter(torch.empty(width, hidden_size))
        self.bias = nn.Parameter(torch.empty(width)) if bias else None
        bound = hidden_size ** -0.5
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    @property
    def projection_size(self) -> int:
        return self.blocks * self.hidden_size

    def project_inputs(self, x: Tensor) -> Tensor:
        return linear(x, self.weight_ih, self.bias)

    def preactivations(self, p: Tensor, state: Tensor) -> Tensor:
        """a_t = (W_x x_t + b) + W_h h_{t-1}, split into the g blocks."""
        return (p + linear(self.output(state), self.weight_hh)).chunk(self.blocks, -1)


def paper_counts(cells: Sequence[SingleProductCell]) -> list[int]:
    """The UD paper's per-layer counts of a stack (module docstring): k² + m·k with k = g·n,
    m = the first cell's input width, then the previous layer's k."""
    counts, m = [], cells[0].input_size
    for cell in cells:
        k = cell.projection_size
        counts.append(k * k + m * k)
        m = k
    return counts
