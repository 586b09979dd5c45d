"""A paper's table as the run lays it out: its rows (a system, the variant that trains it, the paper's numbers),
the seeds each row trains at the run's scale, and the members each row decodes (each seed's model, or one
ensemble of them all), read from an experiment file (rnmt.planning.plan resolves the rows' settings)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rnmt.config import load_yaml


@dataclass
class Row:
    system: str
    variant: str | None                      # None: the paper's number only (another group's system)
    paper: dict[str, float | None]
    seeds: tuple[int, ...] = (1,)
    ensemble: bool = False                   # one decoding with all seeds' models together
    why_not: str = ""
    cell: str | None = None
    labels: str | None = None
    unfinished: bool = False                 # trained by the run, which ended before it (a partial table)

    @property
    def trained(self) -> bool:
        return self.variant is not None

    def members(self) -> list[str]:
        """What gets decoded: each seed's model, or one ensemble of them all."""
        if not self.trained:
            return []
        if self.ensemble:
            return ["ens" + "-".join(str(s) for s in self.seeds)]
        return [f"seed{s}" for s in self.seeds]


def member_seeds(member: str) -> list[int]:
    """`seed3` → [3]; `ens1-2` → [1, 2]."""
    if member.startswith("seed"):
        return [int(member[4:])]
    return [int(x) for x in member[3:].split("-")]


@dataclass
class Table:
    name: str
    path: Path
    title: str
    corpus: str | None
    testset: str
    metrics: list[str]
    rows: list[Row] = field(default_factory=list)
    paper: str = ""
    kind: str = "translation"
    baseline: str | None = None
    figure: dict[str, Any] | None = None
    notes: str = ""
    claims: list[dict[str, Any]] = field(default_factory=list)     # the paper's claims (report/claims.py)

    @property
    def trained_rows(self) -> list[Row]:
        return [r for r in self.rows if r.trained]


def row_seeds(row: dict[str, Any], max_seeds: int | None = None, seeds: int | None = None) -> tuple[int, ...]:
    """A row's seeds: at a scale that sets `seeds`, a row that lists fewer trains that many (its own first,
    then the lowest unused: `mini` trains 3 a row, so that a table can tell differences from seed noise);
    an ensemble keeps the members it lists. Then the first `max_seeds` at a scale that caps them (the demo)."""
    own = tuple(row.get("seeds", [1]))
    if seeds and not row.get("ensemble") and len(own) < seeds:
        extra = [s for s in range(1, seeds + len(own) + 1) if s not in own]
        own = own + tuple(extra[: seeds - len(own)])
    return own[:max_seeds] if max_seeds else own


def load_table(path: str | Path, corpus: str | None = None, max_seeds: int | None = None,
               scale_note: str = "", seeds: int | None = None) -> Table:
    """`table_from_experiment` of an experiment file; `scale_note` (what the run's scale changes) goes before
    the table's own notes."""
    table = table_from_experiment(load_yaml(path), Path(path), corpus, max_seeds, seeds)
    table.notes = "\n\n".join(n.strip() for n in (scale_note, table.notes) if n.strip())
    return table


def table_from_experiment(exp: dict[str, Any], path: Path, corpus: str | None = None,
                          max_seeds: int | None = None, seeds: int | None = None) -> Table:
    """The table's layout (rows, metrics, paper numbers) from a validated experiment file; `corpus` is
    the corpus the plan's scale chose for it, `max_seeds` its cap on seeds per row."""
    rows = []
    for r in exp["rows"]:
        trained = "variant" in r and exp.get("kind", "translation") == "translation"
        own = row_seeds(r, max_seeds, seeds)
        why_not = r.get("why_not", "")
        if trained and r.get("ensemble") and len(own) < 2:
            # one model is not an ensemble: the row keeps the paper's number and says why it is empty
            trained, why_not = False, (f"an ensemble needs 2 or more seeds' models, and this run trains at most "
                                       f"{max_seeds} a row (the scale's max_seeds)")
        rows.append(Row(r["system"], r.get("variant") if trained else None, r.get("paper") or {},
                        own, bool(r.get("ensemble", False)), why_not, r.get("cell"), r.get("labels")))
    return Table(exp["table"], path, exp["title"], corpus or exp.get("corpus"), exp.get("testset", "test"),
                 exp["metrics"], rows, exp.get("paper", ""), exp.get("kind", "translation"), exp.get("baseline"),
                 exp.get("figure"), exp.get("notes", ""), exp.get("claims") or [])
