"""Build a paper table from its experiment file and the metrics.json of every run in it.

The tidy CSV has one row per (system, metric): the paper's value, ours (the mean over seeds), the
difference, the spread over seeds, and where the number came from (run, scale, sacrebleu signature).
The Markdown puts systems in rows and metrics in columns, as the papers lay out their tables.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

import pandas as pd

from rnmt.io import InputError, atomic_writer, read_json
from rnmt.plan import Table

METRIC_LABELS = {
    "bleu": "BLEU",
    "tok_bleu": "tok BLEU",
    "chrf": "chrF",
    "params_m": "#Params (M)",
    "train_tgt_words_per_s": "Train words/s",
    "decode_words_per_s": "Decode words/s",
    "decode_seconds_per_sentence": "Decode s/sent",
    "decode_words_per_s_beam1": "Decode words/s (beam 1)",
    "decode_seconds_per_sentence_beam1": "Decode s/sent (beam 1)",
}
COLUMNS = ["table", "system", "variant", "metric", "paper", "ours", "diff", "std", "n_seeds", "scale", "run",
           "signature"]


def metric_value(metrics: dict[str, Any], name: str) -> float | None:
    """Look one table metric up in a run's metrics.json."""
    scores, train, decode = metrics.get("scores", {}), metrics.get("train", {}), metrics.get("decode", {})
    if name in scores:
        return scores[name]
    if name == "params_m":
        return train["params"] / 1e6 if "params" in train else None
    if name in train:
        return train[name]
    if name in decode:
        return decode[name]
    return None


def tidy(table: Table, metrics: dict[tuple[str, str], dict[str, Any]], run: str, scale: str) -> pd.DataFrame:
    """`metrics` maps (variant, member) to a metrics.json; a row reads its members' files."""
    records = []
    for row in table.rows:
        runs = [metrics[(row.variant, m)] for m in row.members() if (row.variant, m) in metrics]
        if len(runs) != len(row.members()):
            raise InputError(f"table {table.name}: row {row.system!r} needs metrics of {', '.join(row.members())} "
                             f"of variant {row.variant!r}, found {len(runs)}")
        signature = runs[0].get("scores", {}).get("bleu_signature", "")
        for metric in table.metrics:
            values = [v for v in (metric_value(m, metric) for m in runs) if v is not None]
            ours = statistics.fmean(values) if values else math.nan
            std = statistics.stdev(values) if len(values) > 1 else math.nan
            paper = row.paper.get(metric)
            paper = math.nan if paper is None else float(paper)
            records.append({"table": table.name, "system": row.system, "variant": row.variant,
                            "metric": metric, "paper": paper, "ours": ours, "diff": ours - paper, "std": std,
                            "n_seeds": len(values), "scale": scale, "run": run,
                            "signature": signature if "bleu" in metric else ""})
    return pd.DataFrame.from_records(records, columns=COLUMNS)


def _fmt(x: float, std: float = math.nan) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    def one(v: float) -> str:
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        return f"{v:.2f}" if abs(v) >= 1 or v == 0 else f"{v:.3g}"   # 0.0054 s/sentence stays readable

    return one(x) + (f" ± {one(std)}" if not math.isnan(std) else "")


def markdown(table: Table, df: pd.DataFrame) -> str:
    """Systems in rows; per metric a 'paper' column when the paper gave a number, then ours."""
    has_paper = {m: bool(df[(df.metric == m)].paper.notna().any()) for m in table.metrics}
    header = ["System"]
    for m in table.metrics:
        label = METRIC_LABELS.get(m, m)
        header += [f"{label} (paper)", f"{label} (ours)"] if has_paper[m] else [label]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    for row in table.rows:
        cells = [row.system]
        sub = df[df.system == row.system].set_index("metric")
        for m in table.metrics:
            r = sub.loc[m]
            if has_paper[m]:
                cells.append(_fmt(r.paper))
            cells.append(_fmt(r.ours, r["std"]))
        lines.append("| " + " | ".join(cells) + " |")
    sigs = sorted({s for s in df.signature if s})
    out = [f"# {table.title}", ""]
    if table.paper:
        out += [f"Paper numbers: {table.paper}.", ""]
    out += lines + [""]
    scale, run = df.scale.iloc[0], df.run.iloc[0]
    out.append(f"Run `{run}` at scale `{scale}`; mean ± std over seeds where a row has several.")
    out += [f"BLEU signature: `{s}`" for s in sigs]
    return "\n".join(out) + "\n"


def build(table: Table, metrics_files: list[str | Path], run: str, scale: str, out_csv: str | Path,
          out_md: str | Path) -> pd.DataFrame:
    metrics = {}
    for path in metrics_files:
        m = read_json(path)
        metrics[(m["variant"], m["member"])] = m
    df = tidy(table, metrics, run, scale)
    with atomic_writer(out_csv) as f:
        df.to_csv(f, index=False)
    with atomic_writer(out_md) as f:
        f.write(markdown(table, df))
    return df
