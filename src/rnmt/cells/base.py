"""The recurrent-cell interface and the sequence runner shared by every cell.

A cell splits its work in two: `project_inputs` maps the inputs of all timesteps at once (one
matrix product over [batch, time, input]), and `step` applies the recurrence to one timestep's
projection and the previous state. The state is a single tensor [batch, state_size] (an LSTM
concatenates h and c), so beam search can reorder any cell's state with one `index_select`.

A cell may also offer `sequence`, the whole recurrence at once (a scan or a fused loop with its own
backward, cells/scan.py and cells/kernel.py); `run` then uses it instead of the step loop. It must give
the step loop's numbers; `fused(False)` turns it off (for the equivalence tests and the benchmark).
A cell that offers `step_kernel` (its step with a hand-written backward, run by cells/kernel.py) gets
`sequence` from it, and composite cells chain their parts' kernels.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch
from torch import Tensor, nn

from rnmt.cells.kernel import StepKernel, kernel_sequence


class RecurrentCell(nn.Module, ABC):
    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size

    @property
    def state_size(self) -> int:
        return self.hidden_size

    @property
    @abstractmethod
    def projection_size(self) -> int:
        """Width of `project_inputs`' output (0 for a cell without input, such as T-GRU)."""

    @property
    def weight_matrix_count(self) -> int:
        """Weight matrices applied to the input or the state (ATR paper, Table 1), counted from the
        parameters: each 2-D weight contributes one matrix per hidden-sized block of its rows."""
        return sum(p.shape[0] // self.hidden_size for name, p in self.named_parameters()
                   if p.dim() == 2 and "." not in name)

    @abstractmethod
    def project_inputs(self, x: Tensor) -> Tensor:
        """[..., input_size] → [..., projection]: everything that depends on the input only."""

    @abstractmethod
    def step(self, p: Tensor, state: Tensor) -> Tensor:
        """One timestep: projected input [batch, projection], state [batch, state_size] → new state."""

    def output(self, state: Tensor) -> Tensor:
        """The part of the state that the next layer sees, [batch, hidden_size]."""
        return state

    def initial_state(self, batch: int, like: Tensor) -> Tensor:
        return like.new_zeros(batch, self.state_size)

    def step_kernel(self) -> StepKernel | None:
        """The step with a hand-written backward for the whole-sequence path (cells/kernel.py), for
        the current options and mode; None where there is none."""
        return None

    def sequence(self, projected: Tensor, mask: Tensor | None, state: Tensor) -> Tensor | None:
        """All states [batch, time, state_size] at once, from projected [batch, time, projection] and
        mask [batch, time] (None: no padding); padded steps carry the state. None: use the step loop.
        By default the loop of `step_kernel`."""
        kernel = self.step_kernel()
        return None if kernel is None else kernel_sequence([kernel], projected, mask, state)


_FUSED: ContextVar[bool] = ContextVar("rnmt_fused", default=True)


@contextmanager
def fused(enabled: bool) -> Iterator[None]:
    """Within the block, `run` uses cells' `sequence` (True, the default) or always the step loop (False)."""
    token = _FUSED.set(enabled)
    try:
        yield
    finally:
        _FUSED.reset(token)


def _autocast() -> str | None:
    """The device type whose autocast is on ('cuda' or 'cpu'), or None."""
    for device in ("cuda", "cpu"):
        if torch.is_autocast_enabled(device):
            return device
    return None


def _sequence(cell: RecurrentCell, projected: Tensor, mask: Tensor, full: bool,
              state: Tensor) -> tuple[Tensor, Tensor] | None:
    """(states, final state) from the cell's `sequence`, or None where it has none or it is off.

    Under autocast (training's bfloat16 default on CUDA and on CPUs with bfloat16 units) the recurrence
    runs in float32 with autocast off inside it, as a whole: its fused loops and kernels keep their buffers
    in the dtype of their inputs, and a state carried through hundreds of steps keeps float32's precision.
    The products that feed it (the input projection) and those after it stay under autocast.
    """
    if not _FUSED.get() or projected.size(1) == 0:
        return None
    amp = _autocast()
    if amp is not None:
        with torch.autocast(amp, enabled=False):
            return _sequence(cell, projected.float(), mask, full, state.float())
    states = cell.sequence(projected, None if full else mask, state)
    if states is None:
        return None
    if full:
        return states, states[:, -1]
    t = torch.arange(1, mask.size(1) + 1, device=mask.device)
    last = (mask.long() * t).max(1).values                    # 1 + index of the last real step, 0: none
    gathered = states[torch.arange(states.size(0), device=states.device), (last - 1).clamp(min=0)]
    return states, torch.where((last > 0).unsqueeze(1), gathered, state)


def reverse_padded(x: Tensor, lengths: Tensor) -> Tensor:
    """Reverse each sequence of x [batch, time, ...] within its own length; padding stays at the end."""
    T = x.size(1)
    t = torch.arange(T, device=x.device).unsqueeze(0)
    idx = torch.where(t < lengths.unsqueeze(1), lengths.unsqueeze(1) - 1 - t, t)
    idx = idx.view(*idx.shape, *([1] * (x.dim() - 2))).expand_as(x)
    return x.gather(1, idx)


def run(cell: RecurrentCell, x: Tensor, mask: Tensor, state: Tensor | None = None,
        reverse: bool = False) -> tuple[Tensor, Tensor]:
    """Run `cell` over x [batch, time, input] with mask [batch, time] (True at real tokens).

    Padded positions leave the state unchanged and give zero outputs; with `reverse=True` each
    sentence is read from its own last real token backwards. Returns (outputs [batch, time, hidden],
    final state).
    """
    lengths = mask.sum(1)
    if reverse:
        x = reverse_padded(x, lengths)
    projected = cell.project_inputs(x)
    if state is None:
        state = cell.initial_state(x.size(0), projected)
    full = bool(mask.all())
    whole = _sequence(cell, projected, mask, full, state)
    if whole is not None:
        states, state = whole
        out = cell.output(states)
    else:
        outputs = []
        for t, p_t in enumerate(projected.unbind(1)):  # not projected[:, t]: its backward fills a
            new = cell.step(p_t, state)                  # full-size zero gradient at every step
            state = new if full else torch.where(mask[:, t, None], new, state)
            outputs.append(cell.output(state))
        out = torch.stack(outputs, 1)
    if not full:
        out = out * mask.unsqueeze(-1).to(out.dtype)
    if reverse:
        out = reverse_padded(out, lengths)
    return out, state
