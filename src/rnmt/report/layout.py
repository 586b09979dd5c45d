"""How a table's numbers and notes read, shared by its renderings (Markdown and LaTeX in report/tables.py,
HTML in report/htmltable.py): a metric's column label and its scorer's signature key, numbers to a
readable precision, and the notes under the table (what ran, why a cell is empty, signatures, warnings,
the table's own notes)."""

from __future__ import annotations

import math

import pandas as pd

from rnmt.evaluate.metric_names import METRIC_LABELS, TOKENIZED, bleu_family, length_range
from rnmt.evaluate.score import bucket_name
from rnmt.planning.table import Table


def tokenized(metric: str) -> tuple[str, str]:
    """A metric split into the score-key prefix of its side and its name among the detokenized metrics:
    "tok_bleu@nist-mt02" → ("tok_", "bleu@nist-mt02"), multi-bleu on tokenized text (the same for
    tok_bleu, tok_bleu_avg and tok_bleu_len@); any other metric → ("", metric)."""
    base = metric.removeprefix(TOKENIZED)
    return (TOKENIZED, base) if base != metric and bleu_family(base) else ("", metric)


def signature_key(metric: str) -> str | None:
    """The metrics.json key of the signature of the scorer that computed `metric`; None for a metric
    that is no BLEU or chrF score."""
    if metric in ("chrf", "tok_bleu_compound"):
        return f"{metric}_signature"
    prefix, base = tokenized(metric)
    return f"{prefix}bleu_signature" if bleu_family(base) else None


def label(metric: str) -> str:
    prefix, base = tokenized(metric)
    if prefix:
        return f"tok {label(base)}"
    if metric.startswith("bleu@"):
        return metric[5:].replace("nist-", "").upper()
    if metric.startswith("bleu_len@"):
        return f"len {bucket_name(*length_range(metric))}"
    return METRIC_LABELS.get(metric, metric)


def number(v: float, sign: str = "") -> str:
    if abs(v) >= 1000:
        return f"{v:{sign},.0f}"
    return f"{v:{sign}.2f}" if abs(v) >= 1 or v == 0 else f"{v:{sign}.3g}"   # 0.0054 s/sentence stays readable


def signed(x: float | None, decimals: int | None = None) -> str:
    """A difference with its sign (+0.31, −1.20), at `decimals` places where given (an interval at its
    difference's precision), a dash where there is none."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    shown = number(x, "+") if decimals is None else f"{x:+,.{decimals}f}"
    return shown.replace("-", "−")


def decimals_of(shown: str) -> int:
    """The decimal places of a number as written (0 for 1,234 and for 1.2e-05)."""
    return len(shown.split(".")[1]) if "." in shown and "e" not in shown else 0


def fmt(x: float, std: float = math.nan) -> str:
    """`x`, and `± std` at x's decimals (0.119 ± 0.004, 1,234 ± 12: a spread written as precisely as the value)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    shown = number(x)
    if math.isnan(std):
        return shown
    return f"{shown} ± {std:,.{decimals_of(shown)}f}"


COUNTS = {"weight_matrices", "matrix_transformations"}
FEW_SENTENCES = 100     # a BLEU over fewer test sentences (a source-length column) is noise, not a trend


def fmt_count(x: float, std: float = math.nan) -> str:
    return fmt(x, std) if math.isnan(x) or x != int(x) else str(int(x))


def seeds_ran(table: Table) -> str:
    """How many seeds the table's rows trained, from the rows as this run planned them (a run may set
    the scale's seeds otherwise): `; 3 seeds a row (mean ± std), ensembles of 3`."""
    single = sorted({len(r.seeds) for r in table.trained_rows if not r.ensemble})
    ensembles = sorted({len(r.seeds) for r in table.trained_rows if r.ensemble})
    if not single and not ensembles:
        return ""
    out = []
    if single:
        n = " or ".join(map(str, single))
        out.append(f"{n} seed{'s' if single != [1] else ''} a row" + (" (mean ± std)" if max(single) > 1 else ""))
    if ensembles:
        out.append(f"ensembles of {' or '.join(map(str, ensembles))} models")
    return "; " + ", ".join(out)


def footer(table: Table, df: pd.DataFrame, with_signatures: bool = True) -> list[str]:
    scale, run = df.scale.iloc[0], df.run.iloc[0]
    out = [f"Run `{run}` at scale `{scale}`" + (f" on corpus `{table.corpus}`" if table.corpus else "")
           + seeds_ran(table) + "."]
    out += [line for line in df.attrs.get("ran", []) if line]       # what the rows ran with, from their metrics
    empty = df[df.ours.isna() & (df.why_empty != "")]
    for reason in sorted(set(empty.why_empty) - {r.why_not for r in table.rows}):
        metrics = ", ".join(sorted(set(empty[empty.why_empty == reason].metric)))
        out.append(f"Empty ({metrics}): {reason}.")
    for avg in [m for m in table.metrics if tokenized(m)[1] == "bleu_avg"]:
        per_set = df[df.metric.str.startswith(avg.removesuffix("_avg") + "@")]
        if (per_set.empty or per_set.ours.isna().all()) and df[df.metric == avg].ours.notna().any():
            sets = df.attrs.get("test_sets") or []
            out.append(f"{label(avg)} (ours): the mean of the BLEU on the {len(sets)} test sets of scale `{scale}` "
                       f"({', '.join(sets)}), not the paper's." if len(sets) > 1 else
                       f"{label(avg)} (ours): BLEU of the one test set of scale `{scale}` (the paper averages its "
                       "test sets).")
    if df.attrs.get("lengths"):
        out.append(df.attrs["lengths"])
    if with_signatures:
        out += signatures(table, df)
    if df.attrs.get("cut_short"):
        out.append("Stopped by the time cap (`max_minutes`) before their step budget, so their numbers depend on "
                   "the machine's speed: " + "; ".join(df.attrs["cut_short"]) + ".")
    out += df.attrs.get("warnings", [])
    out += df.attrs.get("significance", [])
    if table.notes:
        out.append(table.notes.strip())
    return out


def signatures(table: Table, df: pd.DataFrame) -> list[str]:
    """One footnote per scorer signature naming the columns it computed, so that each BLEU column says
    how it was scored (a tokenized column `tok:none`, a detokenized one `tok:13a`)."""
    columns: dict[str, list[str]] = {}
    for metric in table.metrics:
        for s in dict.fromkeys(df[df.metric == metric].signature):
            if s:
                columns.setdefault(s, []).append(label(metric))
    return [f"Signature of {', '.join(names)}: `{s}`" for s, names in columns.items()]
