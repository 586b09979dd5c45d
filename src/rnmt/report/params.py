"""`rnmt params`: each parameter-count row of the papers' tables, its system built as its table trains it
at the paper scale on the meta device (shapes only, no memory), counted and compared with the paper."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import torch

from rnmt.models import build_model
from rnmt.report.paper_params import PaperModel, ParamRow, all_rows, at_paper_scale


def count(model: PaperModel) -> int:
    with torch.device("meta"):
        built = build_model(model.arch, model.row.src_vocab, model.row.tgt_vocab, **model.settings)
    return sum(p.numel() for p in built.parameters())


def evaluate(rows: list[ParamRow] | None = None, root: Path = Path(".")) -> list[dict[str, Any]]:
    """One result per row; `root` is the checkout whose systems and experiment files define the rows."""
    out = []
    for model in at_paper_scale(rows if rows is not None else all_rows(), root):
        row, params_m = model.row, count(model) / 1e6
        out.append({"table": row.table, "system": row.system, "paper_params_m": model.paper_params_m,
                    "params_m": round(params_m, 3), "rel_diff": round(params_m / model.paper_params_m - 1, 4),
                    "src_vocab": row.src_vocab, "tgt_vocab": row.tgt_vocab, "tolerance": row.tolerance,
                    "note": "; ".join(x for x in (row.note, row.miss) if x)})
    return out


def to_csv(results: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(results[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(results)
    return buf.getvalue()
