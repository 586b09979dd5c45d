"""The papers' parameter-count rows, one module per paper; `rnmt params` rebuilds each at the paper's
settings and compares."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ParamRow:
    table: str                  # e.g. "atr-table4"
    system: str                 # the row's name in the paper
    paper_params_m: float       # the paper's number, in millions
    arch: str                   # registered architecture
    settings: dict[str, Any]    # keyword arguments of the architecture (cell, sizes, ...)
    src_vocab: int
    tgt_vocab: int
    note: str = ""              # where the vocabulary size or a design choice comes from
    tolerance: float = 0.01     # |rel_diff| the row must meet
    miss: str = ""              # why a row cannot meet it (the design detail the paper leaves open)
    extra: dict[str, Any] = field(default_factory=dict)


def all_rows() -> list[ParamRow]:
    from rnmt.report.paper_params import atr, dtmt, srnmt

    return [*atr.ROWS, *srnmt.ROWS, *dtmt.ROWS]
