"""ATR Table 1 for one cell, counted on the real module: its weight matrices, and the matrix
transformations of one step measured as the matrix-multiply FLOPs of the input projection and the
recurrence, in units of one d×d matrix-vector product per batch row. Its own job (`rnmt cell-counts`,
in the training environment, which has torch), so building the table needs no torch."""

from __future__ import annotations

from pathlib import Path

from rnmt.io import write_json
from rnmt.provenance import provenance


def count(cell: str, hidden: int = 64, batch: int = 4) -> dict[str, float]:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from rnmt.cells.registry import build_cell
    from rnmt.machine import matmul

    c = build_cell(cell, hidden, hidden)
    x = torch.zeros(batch, hidden)
    with torch.no_grad(), matmul.backend("blas"), FlopCounterMode(display=False) as fc:   # counts torch's products
        c.step(c.project_inputs(x), c.initial_state(batch, x))
    return {"weight_matrices": float(c.weight_matrix_count),
            "matrix_transformations": fc.get_total_flops() / (2 * batch * hidden * hidden)}


def write(cell: str, out: str | Path) -> dict[str, float]:
    counts = count(cell)
    write_json(out, {"cell": cell, **counts, **provenance()})
    return counts
