"""The papers' parameter-count rows, one module per paper: which table row, and the vocabulary sizes the
paper's count implies (the one thing the systems files do not hold). `rnmt params` builds each row's
system as its table trains it at the paper scale, from the same systems files and settings as the
workflow (`at_paper_scale`), and compares its count with the paper's number in the experiment file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ParamRow:
    table: str                  # e.g. "atr-table4"
    system: str                 # the row's `system` in the table's experiment file
    src_vocab: int
    tgt_vocab: int
    note: str = ""              # where the vocabulary size or a design choice comes from
    tolerance: float = 0.01     # |rel_diff| the row must meet
    miss: str = ""              # why a row cannot meet it (the design detail the paper leaves open)


@dataclass(frozen=True)
class PaperModel:
    """A row with what its table says: the paper's count and the model its system trains at the paper scale."""
    row: ParamRow
    paper_params_m: float
    arch: str
    settings: dict[str, Any]    # keyword arguments of the architecture (cell, sizes, ...)


def vocabulary(paper: str) -> int:
    """The vocabulary size per side that `paper`'s ("atr", "srnmt", "dtmt") parameter counts imply."""
    import importlib

    if paper not in ("atr", "srnmt", "dtmt"):
        raise ValueError(f"no parameter rows for paper {paper!r}")
    return importlib.import_module(f"rnmt.report.paper_params.{paper}").V


def all_rows() -> list[ParamRow]:
    from rnmt.report.paper_params import atr, dtmt, srnmt

    return [*atr.ROWS, *srnmt.ROWS, *dtmt.ROWS]


def at_paper_scale(rows: list[ParamRow], root: Path) -> list[PaperModel]:
    """Each row's system as the workflow of the checkout at `root` trains it at the paper scale, and the
    paper's `params_m` from the row's table."""
    from rnmt.config import ConfigError, load_yaml
    from rnmt.planning.plan import Plan

    config = load_yaml(Path(root) / "config.yaml")
    config.update(scale="paper", run="paper", tables=sorted({r.table for r in rows}))
    plan = Plan(config, Path(root))
    out = []
    for row in rows:
        table = plan.tables[row.table]
        found = next((r for r in table.rows if r.system == row.system), None)
        if found is None or found.variant is None or found.paper.get("params_m") is None:
            raise ConfigError(f"parameter row {row.table}/{row.system!r}: the table has no trained row of that "
                              f"system with the paper's params_m; its rows: {', '.join(r.system for r in table.rows)}")
        model = dict(plan.variant(table.corpus, found.variant).model)
        out.append(PaperModel(row, float(found.paper["params_m"]), model.pop("arch"), model))
    return out
