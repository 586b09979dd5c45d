"""`rnmt params`: each parameter-count row of the papers' tables rebuilt at the paper's settings on
the meta device (shapes only, no memory), counted and compared with the paper."""

from __future__ import annotations

import csv
import io
from typing import Any

import torch

from rnmt.models import build_model
from rnmt.report.paper_params import ParamRow, all_rows


def count(row: ParamRow) -> int:
    with torch.device("meta"):
        model = build_model(row.arch, row.src_vocab, row.tgt_vocab, **row.settings)
    return sum(p.numel() for p in model.parameters())


def evaluate(rows: list[ParamRow] | None = None) -> list[dict[str, Any]]:
    out = []
    for row in rows if rows is not None else all_rows():
        params_m = count(row) / 1e6
        out.append({"table": row.table, "system": row.system, "paper_params_m": row.paper_params_m,
                    "params_m": round(params_m, 3), "rel_diff": round(params_m / row.paper_params_m - 1, 4),
                    "src_vocab": row.src_vocab, "tgt_vocab": row.tgt_vocab, "tolerance": row.tolerance,
                    "note": "; ".join(x for x in (row.note, row.miss) if x)})
    return out


def to_csv(results: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(results[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(results)
    return buf.getvalue()
