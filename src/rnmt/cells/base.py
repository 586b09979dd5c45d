"""The recurrent-cell interface and the sequence runner shared by every cell.

A cell splits its work in two: `project_inputs` maps the inputs of all timesteps at once (one
matrix product over [batch, time, input]), and `step` applies the recurrence to one timestep's
projection and the previous state. The state is a single tensor [batch, state_size] (an LSTM
concatenates h and c), so beam search can reorder any cell's state with one `index_select`.

A cell may also offer `sequence`, the whole recurrence at once (a scan or a loop with its own backward,
cells/scan.py and cells/kernel.py), and `torch_layer`, the same recurrence as torch's own fused layer
(GRU, LSTM: cuDNN on a GPU, oneDNN on a CPU). Both must give the step loop's numbers. `run` takes the
path that measured fastest for the cell, its sizes and the device (`chosen_path`, rnmt.machine.fastpath; the
step loop where the cell has no other); `use_path` forces one (the equivalence tests and the benchmark).
A cell that offers `step_kernel` (its step with a hand-written backward, run by cells/kernel.py) gets
`sequence` from it, and composite cells chain their parts' kernels.
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch
from torch import Tensor, nn

from rnmt.cells import triton as triton_cells
from rnmt.cells.kernel import StepKernel, kernel_sequence, kernel_step
from rnmt.cells.taken import path_label, record_path, unrecorded
from rnmt.machine import fastpath
from rnmt.machine.matmul import products_in


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

    def fast_step(self, p: Tensor, state: Tensor) -> Tensor:
        """`step`, or where nothing is differentiated on CUDA (beam search, validation) its step kernel's
        forward where the cell has one (cells/kernel.py: its product and one Triton row kernel for the step's
        elementwise work, where `step`'s operations launch five to ten kernels): the same numbers up to the
        rounding of the sums. While gradients are recorded, under autocast (whose mixed dtypes the kernels'
        row buffers do not take) and on a CPU, `step` itself (the reference, and there the numbers every
        earlier decoding had)."""
        if (not torch.is_grad_enabled() and triton_cells.wanted(state)
                and not torch.is_autocast_enabled(state.device.type)):
            kernel = self.step_kernel()
            if kernel is not None:
                return kernel_step(kernel, p, state)
        return self.step(p, state)

    def output(self, state: Tensor) -> Tensor:
        """The part of the state that the next layer sees, [batch, hidden_size]."""
        return state

    def passes_state(self) -> bool:
        """Whether `output` is the state itself (loops that carry only the state, as the fused decoder, serve
        only such cells)."""
        return type(self).output is RecurrentCell.output

    def input_weights(self) -> tuple[Tensor, Tensor | None] | None:
        """(W, b) where `project_inputs` is x Wᵀ + b, for loops that project inside them (the fused decoder,
        models/decoder_sequence.py); None where it is anything else."""
        return None

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
        return None if kernel is None else kernel_sequence(kernel, projected, mask, state)

    def torch_layer(self, x: Tensor, lengths: Tensor | None, state: Tensor) -> tuple[Tensor, Tensor] | None:
        """The recurrence as torch's own fused layer, from the raw inputs x [batch, time, input] (the layer
        applies the input weights itself), each sequence's length (None: no padding) and the initial state:
        (outputs [batch, time, hidden], final state). None where torch has no layer for these options."""
        return None

    def path_key(self) -> str:
        """What decides which path is fastest besides the batch: the cell's kind, sizes and options, and
        those of the cells it is made of."""
        parts = [m._own_key() for m in self.modules() if m is not self and isinstance(m, RecurrentCell)]
        return self._own_key() + (f"{parts}" if parts else "")

    def _own_key(self) -> str:
        options = {k: v for k, v in vars(self).items() if isinstance(v, (bool, int, float, str)) and k[0] != "_"}
        return f"{type(self).__name__}{sorted(options.items())}"


PATHS = ("loop", "sequence", "torch")
_FORCED: ContextVar[str | None] = ContextVar("rnmt_cell_path", default=None)


@contextmanager
def use_path(name: str | None) -> Iterator[None]:
    """Within the block, `run` takes path `name` ("loop", "sequence", "torch") where the cell has it (else
    the next one down: torch → sequence → loop); None: the measured choice."""
    if name is not None and name not in PATHS:
        raise ValueError(f"unknown path {name!r}; valid: {', '.join(PATHS)}")
    token = _FORCED.set(name)
    try:
        yield
    finally:
        _FORCED.reset(token)


def forced_path() -> str | None:
    """The path `use_path` forces in this block, or None."""
    return _FORCED.get()


def autocast_device() -> str | None:
    """The device type whose autocast is on ('cuda' or 'cpu'), or None."""
    for device in ("cuda", "cpu"):
        if torch.is_autocast_enabled(device):
            return device
    return None


def _whole(cell: RecurrentCell, projected: Tensor, mask: Tensor | None, full: bool,
           state: Tensor) -> tuple[Tensor, Tensor] | None:
    """(outputs, final state) from the cell's `sequence`; None where it has none for its options.

    Under autocast (training's bfloat16 default on CUDA and on CPUs with bfloat16 units) the recurrence
    runs in float32 with autocast off inside it, as a whole: its loops and kernels keep their buffers in
    the dtype of their inputs, and a state carried through hundreds of steps keeps float32's precision.
    The products that feed it (the input projection) and those after it stay under autocast, and its own
    recurrent products take their operands in autocast's dtype, forward and backward, as autocast's would
    (rnmt.machine.matmul `products_in`, read by every whole-sequence path that multiplies: ATR's own loop,
    the chained step kernels, the Triton per-step and persistent kernels).
    """
    amp = autocast_device()
    if amp is not None:
        with torch.autocast(amp, enabled=False), products_in(torch.get_autocast_dtype(amp)):
            return _whole(cell, projected.float(), mask, full, state.float())
    states = cell.sequence(projected, None if full else mask, state)
    if states is None:
        return None
    if full:
        return cell.output(states), states[:, -1]
    t = torch.arange(1, mask.size(1) + 1, device=mask.device)
    last = (mask.long() * t).max(1).values                    # 1 + index of the last real step, 0: none
    gathered = states[torch.arange(states.size(0), device=states.device), (last - 1).clamp(min=0)]
    return cell.output(states), torch.where((last > 0).unsqueeze(1), gathered, state)


def whole_sequence(cell: RecurrentCell, projected: Tensor, state: Tensor) -> Tensor | None:
    """The cell's outputs over all of `projected` [B, T, P] by its whole-sequence path, as `run` takes it (under
    autocast in float32, its products narrow); None where it has none for its options."""
    got = _whole(cell, projected, None, True, state)
    return None if got is None else got[0]


def _torch(cell: RecurrentCell, x: Tensor, lengths: Tensor | None, full: bool,
           state: Tensor) -> tuple[Tensor, Tensor] | None:
    """(outputs, final state) from torch's own layer (in float32 under autocast, as `_whole`)."""
    amp = autocast_device()
    if amp is not None:
        with torch.autocast(amp, enabled=False):
            return _torch(cell, x.float(), lengths, full, state.float())
    return cell.torch_layer(x, None if full else lengths, state)


def _loop(cell: RecurrentCell, projected: Tensor, mask: Tensor | None, full: bool,
          state: Tensor) -> tuple[Tensor, Tensor]:
    outputs = []
    for t, p_t in enumerate(projected.unbind(1)):  # not projected[:, t]: its backward fills a
        new = cell.step(p_t, state)                  # full-size zero gradient at every step
        state = new if full else torch.where(mask[:, t, None], new, state)
        outputs.append(cell.output(state))
    return torch.stack(outputs, 1), state


def _through(path: str, cell: RecurrentCell, x: Tensor, mask: Tensor | None, lengths: Tensor | None, full: bool,
             state: Tensor | None) -> tuple[Tensor, Tensor, str]:
    """The recurrence by `path`, or by the next path down where the cell has not that one; → (outputs,
    final state, the path taken)."""
    if path == "torch" and x.size(1):
        got = _torch(cell, x, lengths, full, cell.initial_state(x.size(0), x) if state is None else state)
        if got is not None:
            return *got, "torch"
    projected = cell.project_inputs(x)
    if state is None:
        state = cell.initial_state(x.size(0), projected)
    if path != "loop" and projected.size(1):
        got = _whole(cell, projected, mask, full, state)
        if got is not None:
            return *got, "sequence"
    return *_loop(cell, projected, mask, full, state), "loop"


MEASURE_STEPS = 24          # the length a path choice is measured at (a typical sentence in subwords)
_CHOICES: dict[tuple[Any, ...], str] = fastpath.lookup({})


def chosen_path(cell: RecurrentCell, x: Tensor) -> str:
    """The path `run` takes: the forced one, else the one measured fastest (rnmt.machine.fastpath) for this cell,
    its options and sizes, the batch size (to a power of two), forward or forward and backward, the device
    and the dtype."""
    forced = forced_path()
    if forced is not None:
        return forced
    if fastpath.mode() == "default":        # the cell's whole-sequence path where it has one (`_through`)
        return "sequence"
    params = [p for p in cell.parameters() if p.requires_grad]
    grad = torch.is_grad_enabled() and (x.requires_grad or bool(params))
    amp = autocast_device()
    key = (cell.path_key(), x.size(0).bit_length(), grad, x.device, x.dtype, amp, torch.get_num_threads(),
           graphed(x.device))
    if key not in _CHOICES:
        with torch.random.fork_rng(devices=[x.device] if x.device.type == "cuda" else []):   # training's RNG
            candidates, default = _candidates(cell, x, grad, params)                         # stays as it was
        what = (f"cell {key[0]}, batch < {2 ** key[1]}, {'forward+backward' if grad else 'forward'}, "
                f"{x.device.type} {str(x.dtype).removeprefix('torch.')}{', autocast' if amp else ''}")
        _CHOICES[key] = fastpath.choose(what, candidates, default, x.device, graphed=key[-1])
    return _CHOICES[key]


def _candidates(cell: RecurrentCell, x: Tensor, grad: bool, params: list[Tensor]) -> tuple[dict[str, Any], str]:
    """The paths the cell has for its options, each as a run over MEASURE_STEPS steps of random inputs of
    x's batch size (with the backward pass where `grad`), and the default one: torch's own layer where the
    cell has it (rnmt's own path must then beat torch's by the margin, so a GRU or LSTM never runs slower
    than torch's of the same size), else the whole-sequence path, else the step loop."""
    B = x.size(0)
    xm = torch.randn(B, MEASURE_STEPS, x.size(-1), device=x.device, dtype=x.dtype, requires_grad=grad)
    ones = torch.ones(B, MEASURE_STEPS, dtype=torch.bool, device=x.device)
    lengths = ones.sum(1)
    with torch.no_grad(), probe():
        small = x.new_zeros(1, 2, x.size(-1))
        state0 = cell.initial_state(1, small)
        has = {"loop": True,
               "sequence": _whole(cell, cell.project_inputs(small), ones[:1, :2], True, state0) is not None,
               "torch": _torch(cell, small, lengths[:1], True, state0) is not None}

    def timed(path: str) -> Any:
        def fn() -> None:
            out, last, _ = _through(path, cell, xm, ones, lengths, True, None)
            if grad:
                torch.autograd.grad(out.float().sum() + last.float().sum(), [xm, *params], allow_unused=True)
        return fn

    default = "torch" if has["torch"] else "sequence" if has["sequence"] else "loop"
    return {p: timed(p) for p in PATHS if has[p]}, default


def cudnn_in_float32() -> None:
    """cuDNN's float32 recurrences in full float32, as rnmt's own kernels and torch's products compute them:
    torch lets cuDNN take TF32 by default, which would not give the step loop's numbers and would time cuDNN
    at another precision than the cells beside it (on an H100 and an H200, cuDNN's GRU at batch 80, hidden
    1000 ran 0.94-1.30M tokens/s with TF32 and 0.53-0.56M without: benchmarks/gpu/README.md). Set for the
    process, not around a call: the backward pass builds its own cuDNN descriptor later, from the flag as it
    is then (a context around the forward left the backward in TF32, 3e-4 off on an H100). rnmt runs no
    convolutions, the flag's other users."""
    torch.backends.cudnn.allow_tf32 = False


def torch_recurrence(kind: str, x: Tensor, lengths: Tensor | None, h0: Tensor, c0: Tensor | None,
                     weights: list[Tensor]) -> tuple[Tensor, Tensor, Tensor | None] | None:
    """torch's own one-layer GRU or LSTM (`kind`) over x [B, T, I] from h0 (and c0) [B, H], with a cell's
    weights in torch's order (W_ih, W_hh, b_ih, b_hh); padded sequences go through a packed sequence.
    (outputs [B, T, H], last h, last c or None); None where a sequence has length 0 (torch cannot pack it),
    and on a GPU for work a CUDA graph will hold (`capturing`).

    It calls torch's functional recurrence (torch.gru, torch.lstm), not an nn.GRU or nn.LSTM module given
    the cell's weights: on a GPU such a module flattens the weights it is given for cuDNN
    (nn.RNNBase.flatten_parameters), which moves the cell's own parameters into a new buffer and frees
    their memory, while a CUDA graph captured before goes on reading and updating that memory."""
    if x.is_cuda and capturing():
        # cuDNN's layer stays out of CUDA graphs: no GPU run has yet shown a graph holding it replaying as
        # its eager step does (benchmarks/gpu/README.md)
        return None
    if lengths is not None and (capturing() or bool((lengths == 0).any())):
        return None                       # packing needs the lengths on the host: not inside a CUDA graph
    if x.is_cuda:
        cudnn_in_float32()
    lstm = kind == "lstm"
    hx = [h0.unsqueeze(0).contiguous()] + ([c0.unsqueeze(0).contiguous()] if lstm else [])
    # (has biases, layers, dropout, train, bidirectional): what nn.GRU and nn.LSTM pass for one training layer
    flags = (True, 1, 0.0, True, False)
    with warnings.catch_warnings():
        # cuDNN copies weights that are not one buffer into one at each call, and says so
        warnings.filterwarnings("ignore", message="RNN module weights are not part of single contiguous")
        if lengths is None:
            got = torch.lstm(x, hx, weights, *flags, True) if lstm else torch.gru(x, hx[0], weights, *flags, True)
            out = got[0]
        else:
            packed = nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
            hx = [h.index_select(1, packed.sorted_indices) for h in hx]
            got = torch.lstm(packed.data, packed.batch_sizes, hx, weights, *flags) if lstm else \
                torch.gru(packed.data, packed.batch_sizes, hx[0], weights, *flags)
            out = nn.utils.rnn.pad_packed_sequence(packed._replace(data=got[0]), batch_first=True,
                                                   total_length=x.size(1))[0]
            got = (got[0], *(h.index_select(1, packed.unsorted_indices) for h in got[1:]))
    return out, got[1][0], got[2][0] if lstm else None


_GRAPH_SAFE: ContextVar[bool] = ContextVar("rnmt_graph_safe", default=False)
_PROBING: ContextVar[bool] = ContextVar("rnmt_probing", default=False)


@contextmanager
def probe() -> Iterator[None]:
    """Within the block, paths run only to show whether they exist (on a tiny input): choices inside them
    (ATR's per-step or persistent kernels) take their defaults unmeasured, since the probe's sizes are not the
    work's."""
    token = _PROBING.set(True)
    try:
        yield
    finally:
        _PROBING.reset(token)


def probing() -> bool:
    return _PROBING.get()


@contextmanager
def graph_safe() -> Iterator[None]:
    """Within the block, `run` takes only paths a CUDA graph can capture (no host syncs): the warm-up before
    a capture runs as the capture will, so every kernel it launches is compiled and chosen beforehand."""
    token = _GRAPH_SAFE.set(True)
    try:
        yield
    finally:
        _GRAPH_SAFE.reset(token)


def graphed(device: torch.device) -> bool:
    """Whether work on `device` here will run as a replayed CUDA graph (inside `graph_safe`, on a GPU): its
    paths are then chosen by timing replays (rnmt.machine.fastpath `choose`)."""
    return device.type == "cuda" and _GRAPH_SAFE.get()


def capturing() -> bool:
    """Whether paths must be capturable: inside `graph_safe`, or while a CUDA graph is being captured."""
    return _GRAPH_SAFE.get() or (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


def reverse_padded(x: Tensor, lengths: Tensor) -> Tensor:
    """Reverse each sequence of x [batch, time, ...] within its own length; padding stays at the end."""
    T = x.size(1)
    t = torch.arange(T, device=x.device).unsqueeze(0)
    idx = torch.where(t < lengths.unsqueeze(1), lengths.unsqueeze(1) - 1 - t, t)
    idx = idx.view(*idx.shape, *([1] * (x.dim() - 2))).expand_as(x)
    return x.gather(1, idx)


def run(cell: RecurrentCell, x: Tensor, mask: Tensor | None, state: Tensor | None = None,
        reverse: bool = False) -> tuple[Tensor, Tensor]:
    """Run `cell` over x [batch, time, input] with mask [batch, time] (True at real tokens), or None where
    the caller knows every position is to be run (a teacher-forced decoder layer: the step loop's numbers,
    padding included), which takes the unmasked path without looking.

    Padded positions leave the state unchanged and give zero outputs; with `reverse=True` each
    sentence is read from its own last real token backwards. Returns (outputs [batch, time, hidden],
    final state).
    """
    if mask is None and reverse:
        raise ValueError("run: reverse=True reads each sentence from its own end, which needs its mask")
    lengths = mask.sum(1) if mask is not None else None
    if reverse:
        x = reverse_padded(x, lengths)
    # whether no sentence is padded (the unmasked path): a host sync, so a CUDA graph being captured takes
    # the masked path, which gives the same numbers
    full = mask is None or (not capturing() and bool(mask.all()))
    out, state, taken = _through(chosen_path(cell, x), cell, x, mask, lengths, full, state)
    if torch.is_grad_enabled() and unrecorded(cell):
        record_path(cell.path_key(), path_label(taken, out, (x, state)), cell)
    if not full:
        out = out * mask.unsqueeze(-1).to(out.dtype)
    if reverse:
        out = reverse_padded(out, lengths)
    return out, state
