"""`rnmt bench cells`: forward+backward tokens/s of every registered cell beside torch.nn.GRU and
torch.nn.LSTM of the same size, measured in the same process (ATR paper Table 4 / SR-NMT Table 1's
speed comparisons at the cell level), at one precision for all (`precision` column):

- float32 (the default): everything in full float32, cuDNN's layers without TF32 (`cudnn_tf32` in a CUDA
  row), as rnmt's cells compute;
- bfloat16: torch's layers with bfloat16 weights and inputs (cuDNN's bfloat16 recurrence, products on the
  tensor cores), rnmt's cells under bfloat16 autocast, as training runs them on a GPU (their products in
  bfloat16 where their paths have that form, the state in float32: cells/base.py `_whole`).

Each measurement runs a layer over x [batch, length, hidden] (input size = hidden; T-GRU reads no
input) and back-propagates the sum of its outputs. FLOPs count matrix products only: a cell applies
each of its weight matrices once per token, so the forward pass costs 2·(weight entries) FLOPs per
token and forward+backward 3× that (the backward has two products per forward product).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from rnmt.bench.timing import Peak, environment, measure
from rnmt.cells import CELLS, build_cell, run
from rnmt.cells.base import RecurrentCell, chosen_path, cudnn_in_float32, use_path, whole_sequence
from rnmt.cells.triton import kind
from rnmt.io import InputError

log = logging.getLogger(__name__)
BATCH, LENGTH = 80, 50
FULL_HIDDEN, QUICK_HIDDEN = (256, 512, 1000), (256,)
BASELINES = ("nn.GRU", "nn.LSTM")   # torch's own layers, timed beside every cell (cuDNN on CUDA)
PRECISIONS = ("float32", "bfloat16")


def matmul_flops_per_token(module: nn.Module) -> int:
    """Forward FLOPs of the matrix products per token: 2 × the entries of every weight matrix."""
    return 2 * sum(p.numel() for p in module.parameters() if p.dim() == 2)


def input_size(name: str, hidden: int) -> int:
    return 0 if name == "tgru" else hidden


def taken_path(cell: RecurrentCell, x: Tensor, autocast: bool = False) -> str:
    """The path `run` takes for the cell on x (measured fastest here, rnmt.machine.fastpath), under bfloat16
    autocast where `autocast`: "torch layer" (torch's own GRU or LSTM), "triton", "triton, persistent" (ATR's
    persistent kernels), "sequence" (scan or loop with its own backward) or "step loop"."""
    with torch.autocast(x.device.type, torch.bfloat16, enabled=autocast):
        chosen = chosen_path(cell, x)
    if chosen == "sequence":
        return sequence_path(cell, x, autocast) or "step loop"
    return "torch layer" if chosen == "torch" else "step loop"


def sequence_path(cell: RecurrentCell, x: Tensor, autocast: bool = False) -> str | None:
    """The whole-sequence path `run` takes for the cell over x [B, T, input] (its batch and length, with the
    backward, as a benchmark times it): "triton" (CUDA kernels, cells/triton), "triton, persistent", "sequence"
    (a scan or a loop with its own backward), or None (the step loop)."""
    with torch.autocast(x.device.type, torch.bfloat16, enabled=autocast):
        p = cell.project_inputs(x.detach()).detach().requires_grad_()
        states = whole_sequence(cell, p, cell.initial_state(x.size(0), p))
    if states is None:
        return None
    taken = kind(states)
    return taken.lower() if taken else "sequence"


def _layer(name: str, hidden: int, device: torch.device, use_sequence: bool,
           precision: str) -> tuple[nn.Module, Callable[[Tensor], Tensor]]:
    if name in BASELINES:
        ref = (nn.GRU if name == "nn.GRU" else nn.LSTM)(hidden, hidden, batch_first=True).to(device)
        if precision == "bfloat16":
            ref = ref.to(torch.bfloat16)
        return ref, lambda x: ref(x)[0]
    cell = build_cell(name, input_size(name, hidden), hidden).to(device)

    def forward(x: Tensor) -> Tensor:
        with use_path(None if use_sequence else "loop"), \
                torch.autocast(device.type, torch.bfloat16, enabled=precision == "bfloat16"):
            return run(cell, x, torch.ones(x.shape[:2], dtype=torch.bool, device=x.device))[0]
    return cell, forward


def measure_layer(name: str, hidden: int, device: torch.device, batch: int, length: int, warmup: int, reps: int,
                  use_sequence: bool = True, precision: str = "float32") -> dict[str, Any]:
    module, forward = _layer(name, hidden, device, use_sequence, precision)
    module.train()
    low = precision == "bfloat16" and name in BASELINES         # torch's layers take bfloat16 inputs
    x = torch.randn(batch, length, input_size(name, hidden), device=device,
                    dtype=torch.bfloat16 if low else torch.float32, requires_grad=True)

    def step() -> None:
        module.zero_grad(set_to_none=True)
        x.grad = None
        forward(x).float().sum().backward()

    t = measure(step, device, warmup, reps)
    log.info("%s hidden %d%s: %.0f tokens/s", name, hidden, "" if use_sequence else " (step loop)",
             batch * length / t.median)
    tokens = batch * length
    path = "cuDNN" if name in BASELINES and device.type == "cuda" else "torch" if name in BASELINES else (
        taken_path(module, x, precision == "bfloat16") if use_sequence else "step loop")
    return {"cell": name, "path": path, "precision": precision, "hidden": hidden, "batch": batch, "length": length,
            "seconds": t.median, "tokens_per_s": tokens / t.median,
            "gflops": 3 * matmul_flops_per_token(module) * tokens / t.median / 1e9, "reps": reps}


def cell_names() -> list[str]:
    return sorted(CELLS)


def bench(device: torch.device, quick: bool = False, hidden: tuple[int, ...] | None = None,
          cells: list[str] | None = None, batch: int = BATCH, length: int = LENGTH,
          precision: str = "float32") -> list[dict[str, Any]]:
    """All rows: per hidden size, the references, every cell, and (full run) the step loop of the cells
    that have a whole-sequence path, so the speed-up of the fast path is in the same table; every row at
    `precision` (module docstring)."""
    if precision not in PRECISIONS:
        raise InputError(f"rnmt bench cells: unknown precision {precision!r}; valid: {', '.join(PRECISIONS)}")
    warmup, reps = (1, 2) if quick else (2, 5)      # a second warm-up: the first row of a size had run 20% slow
    # torch's own layers at the cells' precision from the first row on: rnmt's cuDNN path turns TF32 off when it
    # first runs, so without this a baseline timed before it ran in TF32 and one timed after it did not
    cudnn_in_float32()
    peak = Peak(device, quick)
    names = cells or cell_names()
    rows = []
    for h in hidden or (QUICK_HIDDEN if quick else FULL_HIDDEN):
        group = []
        for n in (*BASELINES, *names):
            group.append(measure_layer(n, h, device, batch, length, warmup, reps, precision=precision))
            peak.sample(quick=True)
        if not quick:
            for r in list(group):
                if r["path"] not in ("step loop", "torch", "cuDNN"):
                    group.append(measure_layer(r["cell"], h, device, batch, length, warmup, reps, use_sequence=False,
                                               precision=precision))
                    peak.sample(quick=True)
        ref = {r["cell"]: r["tokens_per_s"] for r in group if r["cell"] in BASELINES}
        for r in group:
            r["ratio_to_nn_gru"] = r["tokens_per_s"] / ref["nn.GRU"]
            r["ratio_to_nn_lstm"] = r["tokens_per_s"] / ref["nn.LSTM"]
        rows += group
        peak.sample()
    env = environment(device, peak)
    tf32 = {"cudnn_tf32": torch.backends.cudnn.allow_tf32} if device.type == "cuda" else {}
    return [{**r, "fraction_of_peak": r["gflops"] / peak.best, **tf32, **env} for r in rows]


COLUMNS = ("cell", "path", "precision", "hidden", "tokens_per_s", "ratio_to_nn_gru", "ratio_to_nn_lstm", "gflops",
           "fraction_of_peak")
