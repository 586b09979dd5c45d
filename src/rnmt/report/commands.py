"""`rnmt table`, `figure`, `runs`, `plot-curve`, `plot-cost` and `params`: the command line of the report."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from rnmt.io import InputError
from rnmt.settings import count

log = logging.getLogger("rnmt")


def cmd_table(a: argparse.Namespace) -> None:
    from rnmt.planning.current import member_of, outdated
    from rnmt.planning.table import load_table
    from rnmt.report.tables import build

    table = load_table(a.experiment, a.corpus or None, a.max_seeds or None, a.scale_note, a.seeds or None)
    metrics, gates = a.metrics, a.gates
    partial = a.rows == "finished"
    stale = outdated(_expected(a.expected))
    if stale and not partial:
        raise InputError(f"table {table.name}: {len(stale)} metrics file(s) were made with other settings than the "
                         "run's now, and Snakemake did not redo them (it keeps no record of how they were made, as "
                         "for results copied from another machine, or it ran with --rerun-triggers mtime):\n"
                         + "".join(f"  {p}: {why}\n" for p, why in stale.items())
                         + "retrain them with: snakemake --cores all --forcerun train " + " ".join(stale)
                         + "\n(or build the table of the rows that are current: its tables/partial/ target)")
    marked = {member_of(p): why for p, why in stale.items()}
    if partial:                     # the files of the rows that finished now; build() marks the others
        def keep(p: str) -> bool:
            return Path(p).is_file() and member_of(p) not in marked

        metrics, gates = [p for p in metrics if keep(p)], [p for p in gates if keep(p)]
    df = build(table, metrics, a.run, a.scale, a.csv, a.md, a.tex, gates, a.html, a.cells, a.data_reports,
               a.claims, partial, marked)
    log.info("table %s: %d cells → %s, %s", table.name, len(df), a.csv, a.md)


def _expected(text: str) -> dict[str, Any]:
    """`--expected`'s JSON (rnmt.planning.current.table_expected), checked for its shape."""
    from rnmt.planning.current import member_of

    form = ('--expected takes {"files": [metrics files], "variants": {variant: {"model": {...}, "train": {...}, '
            '"search": {...}}}} (the table rule gives it)')
    try:
        given = json.loads(text or '{"files": [], "variants": {}}')
    except json.JSONDecodeError as e:
        raise InputError(f"{form}: {e}") from None
    if not (isinstance(given, dict) and isinstance(given.get("files"), list)
            and isinstance(given.get("variants"), dict)
            and all(isinstance(w, dict) and all(isinstance(w.get(k), dict) for k in ("model", "train", "search"))
                    for w in given["variants"].values())):
        raise InputError(form)
    unknown = sorted({member_of(p)[0] for p in given["files"]} - set(given["variants"]))
    if unknown:
        raise InputError(f"{form}: no settings for {', '.join(unknown)}")
    return given


def cmd_figure(a: argparse.Namespace) -> None:
    from rnmt.planning.table import load_table
    from rnmt.report.figures import draw

    table = load_table(a.experiment, None, a.max_seeds or None, seeds=a.seeds or None)
    if a.curves:
        from rnmt.report.figures import curves

        curves(table, a.logs, a.output)
    else:
        draw(table, a.output, a.metrics, a.gates, a.logs)
    log.info("figure %s → %s", table.name, a.output)


def cmd_runs(a: argparse.Namespace) -> None:
    from rnmt.report.runs import write_runs

    df = write_runs(a.metrics, a.output)
    log.info("%d runs → %s", len(df), a.output)


def cmd_plot_curve(a: argparse.Namespace) -> None:
    from rnmt.report.curves import plot

    plot(a.log, a.output, a.title)


def cmd_plot_cost(a: argparse.Namespace) -> None:
    from rnmt.report.cost import plot_cost

    plot_cost(a.logs, a.output, a.name or None, a.smooth, a.title)
    log.info("training cost of %d run(s) → %s", len(a.logs), a.output)


def cmd_record(a: argparse.Namespace) -> None:
    from rnmt.report import record

    if a.action == "write":
        df = record.write(a.run, a.record)
        log.info("%d numbers of %s → %s (machine: %s)", len(df), a.run, a.record, record.machine_path(a.record))
        return
    same, message = record.report(a.run, a.record)
    print(message)
    if not same:
        sys.exit(1)


def cmd_params(a: argparse.Namespace) -> None:
    from rnmt.report.params import evaluate, to_csv

    results = evaluate(root=Path(a.root))
    if a.table:
        results = [r for r in results if r["table"] in a.table]
    sys.stdout.write(to_csv(results))


def add_parsers(sub: Any) -> None:
    s = sub.add_parser("table", help="build a table's CSV, Markdown and LaTeX from metrics files")
    s.add_argument("--experiment", required=True, help="the table's experiment file (workflow/experiments/)")
    s.add_argument("--run", required=True, help="the run's name, recorded in every row")
    s.add_argument("--scale", required=True, help="the run's scale (demo, mini, small, paper)")
    s.add_argument("--corpus", default="", help="the corpus the table ran on at this scale")
    s.add_argument("--max-seeds", type=count(0), default=0, help="the scale's cap on seeds per row (0: none)")
    s.add_argument("--seeds", type=count(0), default=0, help="the scale's seeds per row (0: each row's own)")
    s.add_argument("--scale-note", default="", help="what the scale changes (config scales.<scale>.note)")
    s.add_argument("--csv", required=True, help="the tidy CSV to write")
    s.add_argument("--md", required=True, help="the Markdown table to write")
    s.add_argument("--tex", help="the LaTeX table to write")
    s.add_argument("--html", help="the table as an HTML page (the report shows it)")
    s.add_argument("--claims", help="the paper's claims, checked, as a tidy CSV to write (one row per comparison)")
    s.add_argument("--gates", nargs="*", default=[], help="gate statistics (rnmt gates) of the rows' models")
    s.add_argument("--cells", nargs="*", default=[], help="cell counts (rnmt cell-counts) of a table of kind cells")
    s.add_argument("--data-reports", nargs="*", default=[],
                   help="the corpus' prepare.json: its warnings go into the table's notes")
    s.add_argument("--rows", choices=["all", "finished"], default="all",
                   help="all: every row's metrics files must exist; finished: the table of a run that ended early, "
                        "from the files that exist, the other rows saying they have not finished")
    s.add_argument("--expected", default="",
                   help="JSON of the metrics files and each row's settings now (rnmt.planning.current.table_expected; "
                        "the table rule gives it): a file made with others is refused, or with --rows finished its "
                        "row says what changed")
    s.add_argument("metrics", nargs="*", help="the rows' metrics files (rnmt score)")
    s.set_defaults(func=cmd_table)

    s = sub.add_parser("figure", help="draw a table's figure (gates, BLEU by length, training cost) as PNG")
    s.add_argument("--experiment", required=True, help="the table's experiment file (its figure: block)")
    s.add_argument("--scale", default="", help="the run's scale, for the figure's subtitle")
    s.add_argument("--max-seeds", type=count(0), default=0, help="the scale's cap on seeds per row (0: none)")
    s.add_argument("--seeds", type=count(0), default=0, help="the scale's seeds per row (0: each row's own)")
    s.add_argument("--output", required=True, help="the PNG to write (a PDF beside it)")
    s.add_argument("--metrics", nargs="*", default=[], help="the rows' metrics files (rnmt score)")
    s.add_argument("--gates", nargs="*", default=[], help="gate statistics (rnmt gates) of the rows' models")
    s.add_argument("--logs", nargs="*", default=[], help="train.jsonl of the rows' models")
    s.add_argument("--curves", action="store_true", help="the rows' learning curves instead of the paper's figure")
    s.set_defaults(func=cmd_figure)

    s = sub.add_parser("runs", help="one CSV row per run (model + decoding) with every metric and setting")
    s.add_argument("--output", required=True, help="the CSV to write")
    s.add_argument("metrics", nargs="*", help="metrics files (rnmt score)")
    s.set_defaults(func=cmd_runs)

    s = sub.add_parser("plot-curve", help="plot a training log's learning curve")
    s.add_argument("--title", default="", help="the figure's title")
    s.add_argument("log", help="a model's train.jsonl")
    s.add_argument("output", help="the PNG to write (a PDF beside it)")
    s.set_defaults(func=cmd_plot_curve)

    s = sub.add_parser("plot-cost", help="training cost per minibatch of several runs (UD paper, Figure 2)")
    s.add_argument("--output", required=True, help="the PNG to write")
    s.add_argument("--name", action="append", help="legend name of each log, in order (default: its folder)")
    s.add_argument("--smooth", type=count(1), default=5, help="moving-average window in logged minibatches (1: none)")
    s.add_argument("--title", default="Training cost per minibatch", help="the figure's title")
    s.add_argument("logs", nargs="+", help="train.jsonl of each run")
    s.set_defaults(func=cmd_plot_cost)

    s = sub.add_parser("record", help="keep a finished run's numbers (write), or check a run against them (check)")
    s.add_argument("action", choices=["write", "check"],
                   help="write: the run's table numbers (all but speeds) to RECORD; check: does the run give "
                        "RECORD's numbers (exit 1 and the differences if not)")
    s.add_argument("run", metavar="RUN", help="a finished run's folder (results/<run>)")
    s.add_argument("record", metavar="RECORD", help="the record's CSV (the demo's: benchmarks/demo/record.csv)")
    s.set_defaults(func=cmd_record)

    s = sub.add_parser("params", help="parameter counts of the papers' rows, rebuilt at the papers' settings")
    s.add_argument("--table", action="append", help="only these tables (e.g. atr-table4)")
    s.add_argument("--root", default=".", help="the checkout whose systems and experiment files to read")
    s.set_defaults(func=cmd_params)
