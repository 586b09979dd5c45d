"""Build a paper table from its experiment file and the metrics.json of every run in it.

The tidy CSV has one row per (system, metric): the paper's value, ours (the mean over seeds), the
difference, the spread over seeds, why a cell is empty where it is, and where the number came from
(run, scale, corpus, and the sacrebleu signature of the scorer behind that metric: 13a on detokenized
text for `bleu*`, multi-bleu on tokenized text for `tok_bleu*`; see evaluate/score.py). The Markdown and
LaTeX renderings put systems in rows and metrics in columns, as the papers lay out their tables. (Why
not pandas' writers: the CSV is pandas'; the renderings put a paper and an ours column under each
metric with booktabs' rules between groups, numbered footnotes on cells and a significance mark, which
Styler.to_latex does not lay out, and Markdown's three lines need no tabulate.)
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from rnmt.evaluate.metric_names import length_range
from rnmt.evaluate.metrics import scored_file
from rnmt.evaluate.score import bucket_name
from rnmt.io import InputError, atomic_writer, read_json
from rnmt.planning.current import member_of
from rnmt.planning.table import Row, Table
from rnmt.report import claims, ran, significance, trainings
from rnmt.report.layout import COUNTS, FEW_SENTENCES, fmt, fmt_count, footer, label, signature_key, tokenized

# `row`: the paper's row order; `members`: what a row's numbers come from (seeds, or one ensemble)
COLUMNS = ["table", "row", "system", "variant", "members", "metric", "paper", "ours", "diff", "std", "n_seeds",
           "why_empty", "scale", "run", "corpus", "signature", "p_value"]



RECURRENT_UNIT = "dec_lower"    # ATR eq. 13's unit that recurs over target positions (evaluate/gates.py)


def reported_unit(stats: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The gate statistics that tables and figures report: `RECURRENT_UNIT`'s, else the model's only unit's."""
    if RECURRENT_UNIT in stats:
        return RECURRENT_UNIT, stats[RECURRENT_UNIT]
    if len(stats) == 1:
        return next(iter(stats.items()))
    raise InputError(f"gate statistics of units {sorted(stats)}: none is {RECURRENT_UNIT!r}, and there is more "
                     "than one to choose from")


def metric_value(metrics: dict[str, Any], name: str) -> float | None:
    """Look one table metric up in a run's metrics.json (with its gate statistics under 'gates')."""
    scores, train, decode = metrics.get("scores", {}), metrics.get("train", {}), metrics.get("decode", {})
    tok, base = tokenized(name)                     # tok_: the same score on tokenized text (multi-bleu)
    if base.startswith("bleu@"):
        return (scores.get(f"{tok}bleu_by_part") or {}).get(base[5:])
    if base.startswith("bleu_len@"):
        return _length_score(scores, name, "bleu")
    if name == "gate_pearson_r":
        gates = metrics.get("gates") or {}
        return reported_unit(gates)[1]["pearson_r"] if gates else None
    if base == "bleu_avg":                          # the mean over the split's test sets; one set: its BLEU
        return scores.get(f"{tok}bleu_avg", scores.get(f"{tok}bleu"))
    if name in scores:
        return scores[name]
    if name == "params_m":
        return train["params"] / 1e6 if "params" in train else None
    if name == "train_minutes":
        return train["train_seconds"] / 60 if "train_seconds" in train else None
    if name in train:
        return train[name]
    if name in decode:
        return decode[name]
    return None


def _length_score(scores: dict[str, Any], name: str, what: str) -> Any:
    """A (tok_)bleu_len@ metric's `what` ("bleu", or "sentences": how many test sentences it rests on) from
    a run's scores; a-b: sources of a+1..b words (a bucket), a-inf: longer than a (a threshold)."""
    tok, base = tokenized(name)
    lo, hi = length_range(base)
    if hi is None:
        key = f"{tok}bleu_longer_than" if what == "bleu" else "sentences_longer_than"
        return (scores.get(key) or {}).get(str(lo))
    bucket = (scores.get(f"{tok}bleu_by_length") or {}).get(bucket_name(lo, hi))
    return bucket[what] if bucket else None


def length_sentences(metrics: dict[str, Any], lengths: list[str]) -> list[int | None]:
    """How many test sentences each bleu_len@ metric's BLEU rests on (None where the run did not record it)."""
    return [_length_score(metrics.get("scores", {}), name, "sentences") for name in lengths]


def length_note(table: Table, metrics: dict[tuple[str, str], dict[str, Any]]) -> str:
    """The footer line that says how many test sentences each source-length column rests on (the same for
    every row, one test split): a column over a handful of sentences is noise, not a trend."""
    lengths = [m for m in table.metrics if tokenized(m)[1].startswith("bleu_len@")]
    run = next(iter(metrics.values()), None)
    counts = zip(map(label, lengths), length_sentences(run, lengths), strict=True) if run else []
    known = [(name, n) for name, n in counts if n is not None]
    if not known:
        return ""
    few = [name for name, n in known if n < FEW_SENTENCES]
    return ("Test sentences in each length column: " + "; ".join(f"{name}: {n:,}" for name, n in known) + "."
            + (f" {', '.join(few)}: fewer than {FEW_SENTENCES} sentences, too few for a BLEU to mean much."
               if few else ""))


def why_empty(metric: str, scale: str) -> str:
    base = tokenized(metric)[1]
    if base.startswith("bleu@"):
        return f"the test split at scale {scale} holds other test sets than the paper's"
    if base.startswith("bleu_len@"):
        return "no test sentence of this source length"
    if metric == "gate_pearson_r":
        return "the model has no ATR decoder cells"
    return f"{metric} is not in this run's metrics"


def _row_runs(table: Table, row: Row, metrics: dict[tuple[str, str], dict[str, Any]]) -> list[dict[str, Any]]:
    runs = [metrics[(row.variant, m)] for m in row.members() if (row.variant, m) in metrics]   # type: ignore[index]
    if len(runs) != len(row.members()):
        raise InputError(f"table {table.name}: row {row.system!r} needs metrics of {', '.join(row.members())} "
                         f"of variant {row.variant!r}, found {len(runs)}")
    return runs


def finished_rows(table: Table, found: set[tuple[str, str]], run: str,
                  outdated: dict[tuple[str, str], str] | None = None) -> Table:
    """`table` with each trained row whose decodings have no metrics among `found` ((variant, member)s)
    turned into a row without numbers that says so, for a table of a run that ended early (`rnmt table
    --rows finished`); the table's notes say how many rows it holds. A row missing any of its seeds shows
    none: a mean over fewer seeds than the row's would read as the row's. A member in `outdated` ((variant,
    member) → what changed) has a file made with other settings than the run's now: the row says what changed."""
    rows, left, outdated = [], [], outdated or {}
    for row in table.rows:
        missing = [m for m in row.members() if (row.variant, m) not in found] if row.trained else []
        if missing:
            left.append(row.system)
            stale = [f"{m} ({outdated[(row.variant, m)]})" for m in missing if (row.variant, m) in outdated]
            why = (f"made with other settings than run {run}'s now, to be retrained: {row.variant} {'; '.join(stale)}"
                   if stale else f"not finished in run {run}: no metrics of {row.variant} {', '.join(missing)}")
            row = replace(row, variant=None, unfinished=True, why_not=why)
        rows.append(row)
    if not left:
        return table
    done = len(table.trained_rows) - len(left)
    note = (f"Partial table: {done} of the {len(table.trained_rows)} rows this run trains had finished when it "
            f"was built; {', '.join(left)} have no numbers yet.")
    return replace(table, rows=rows, title=f"{table.title} (partial: {done} of {len(table.trained_rows)} rows)",
                   notes="\n\n".join(n for n in (note, table.notes.strip()) if n))


def cut_short(table: Table, metrics: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    """The trained models of `table` whose training the wall-clock cap (`max_minutes`) ended before their
    step or epoch budget: their numbers depend on the machine's speed and load."""
    out = []
    for row in table.trained_rows:
        for member in row.members():
            for m in trainings.trained(metrics.get((row.variant, member), {})):
                if m.get("stop_reason") == "max_minutes":
                    settings = m.get("train_settings") or {}
                    minutes = f", {settings['max_minutes']:g} min" if settings.get("max_minutes") else ""
                    out.append(f"{row.system} ({row.variant}, seed {settings.get('seed', '?')}: "
                               f"step {m.get('steps')}{minutes})")
    return sorted(set(out))


def _cell_counts(table: Table, row: Row, cells: dict[str, dict[str, Any]]) -> dict[str, Any]:
    if table.kind != "cells" or not row.cell:
        return {}
    if row.cell not in cells:
        raise InputError(f"table {table.name}: row {row.system!r} needs the counts of cell {row.cell!r}: "
                         f"rnmt cell-counts --cell {row.cell} --output FILE, then pass FILE to --cells")
    return cells[row.cell]


def tidy(table: Table, metrics: dict[tuple[str, str], dict[str, Any]], run: str, scale: str,
         cells: dict[str, dict[str, Any]] | None = None, p_values: dict[str, float] | None = None) -> pd.DataFrame:
    """`metrics` maps (variant, member) to a metrics.json; a row reads its members' files. A table of kind
    cells reads its rows' counts from `cells` (cell name -> rnmt cell-counts' file). `p_values`: each
    row's BLEU against the reference row's (report.significance), in the p_value of the column that
    `significance.tested` names."""
    p_column = (significance.tested(table) or ("", ""))[1]
    records = []
    for number, row in enumerate(table.rows, 1):
        runs = _row_runs(table, row, metrics) if row.trained else []
        counts = _cell_counts(table, row, cells or {})
        silent = [ran.said_nothing(m) for m in runs]  # why each seed says nothing, or '': a BLEU leaves those out
        for metric in table.metrics:
            told = [m for m, why in zip(runs, silent, strict=True) if not (claims.resampled(metric) and why)]
            if table.kind == "cells":
                values = [counts[metric]] if metric in counts else []
            else:
                values = [v for v in (metric_value(m, metric) for m in told) if v is not None]
            ours = statistics.fmean(values) if values else math.nan
            std = statistics.stdev(values) if len(values) > 1 else math.nan
            paper = row.paper.get(metric)
            key = signature_key(metric)
            signature = runs[0].get("scores", {}).get(key, "") if runs and key else ""
            reason = ""
            if not values:
                # seeds that say nothing explain the gap only if every seed is one (not a test set the scale lacks)
                unscored = "; ".join(dict.fromkeys(silent)) if all(silent) else ""
                reason = (row.why_not if not row.trained and table.kind != "cells"
                          else unscored or why_empty(metric, scale))
            records.append({"table": table.name, "row": number, "system": row.system,
                            "variant": row.variant or "", "members": ";".join(row.members()), "metric": metric,
                            "paper": math.nan if paper is None else float(paper), "ours": ours, "std": std,
                            "n_seeds": len(values), "why_empty": reason, "scale": scale, "run": run,
                            "corpus": table.corpus or "", "signature": signature,
                            "p_value": (p_values or {}).get(row.system, math.nan) if metric == p_column else math.nan})
    df = pd.DataFrame.from_records(records, columns=[c for c in COLUMNS if c != "diff"])
    df = _ratios(table, df, metrics)
    df.insert(COLUMNS.index("diff"), "diff", df.ours - df.paper)
    return df[COLUMNS]


def _ratios(table: Table, df: pd.DataFrame, metrics: dict[tuple[str, str], dict[str, Any]]) -> pd.DataFrame:
    """`<speed>_ratio`: each row's speed over the baseline row's, ours from our runs and the paper's
    from the paper's absolute numbers (speeds on different hardware compare only as ratios)."""
    for metric in [m for m in table.metrics if m.endswith("_ratio")]:
        speed = metric[: -len("_ratio")]
        base = next(r for r in table.rows if r.system == table.baseline)
        ours, runs = {}, {}
        for row in table.trained_rows:
            runs[row.system] = _row_runs(table, row, metrics)
            values = [v for v in (metric_value(m, speed) for m in runs[row.system]) if v is not None]
            if values:
                ours[row.system] = statistics.fmean(values)
        for row in table.rows:
            sel = (df.system == row.system) & (df.metric == metric)
            theirs, base_paper = row.paper.get(speed), base.paper.get(speed)
            df.loc[sel, "paper"] = theirs / base_paper if theirs and base_paper else math.nan
            apart = next((why for a in runs.get(row.system, []) for b in runs.get(base.system, [])
                          if (why := ran.apart(a, b, speed))), "")
            if apart and row.system in ours:
                df.loc[sel, "why_empty"] = f"not comparable with the baseline {table.baseline!r}: {apart}"
            elif row.system in ours and ours.get(base.system):
                df.loc[sel, ["ours", "std", "n_seeds", "why_empty"]] = [ours[row.system] / ours[base.system],
                                                                       math.nan, 1, ""]
            elif row.trained:
                df.loc[sel, "why_empty"] = f"no {speed} for this row or the baseline {table.baseline!r}"
    return df


def _grid(table: Table, df: pd.DataFrame) -> tuple[list[str], list[list[str]], list[str]]:
    """Header, body and footnotes shared by the Markdown and LaTeX renderings."""
    has_paper = {m: bool(df[(df.metric == m)].paper.notna().any()) for m in table.metrics}
    header = ["System"]
    for m in table.metrics:
        header += [f"{label(m)} (paper)", f"{label(m)} (ours)"] if has_paper[m] else [label(m)]
    body, notes = [], []
    for row in table.rows:
        cells = [row.system]
        sub = df[df.system == row.system].set_index("metric")
        mark = ""
        if not row.trained and table.kind != "cells":
            if row.why_not not in notes:
                notes.append(row.why_not)
            mark = f" [{notes.index(row.why_not) + 1}]"
        for m in table.metrics:
            r = sub.loc[m]
            show = fmt_count if m in COUNTS else fmt
            if has_paper[m]:
                cells.append(show(r.paper))
            cells.append(show(r.ours, r["std"]) + (significance.MARK if r.p_value < significance.ALPHA else "")
                         + _fewer(row, m, r.n_seeds))
        cells[0] += mark
        body.append(cells)
    return header, body, notes


def _fewer(row: Row, metric: str, n: float) -> str:
    """' (2 of 3 seeds)' where a row's mean is over fewer of its models than it trained (one gave no output,
    its BLEU unscored); an ensemble row decodes one member, and a ratio of two rows' means has no seeds."""
    planned = len(row.members())
    if metric.endswith("_ratio") or not 0 < n < planned:
        return ""
    return f" ({int(n)} of {planned} seeds)"


def markdown(table: Table, df: pd.DataFrame) -> str:
    """Systems in rows; per metric a 'paper' column when the paper gave a number, then ours."""
    header, body, notes = _grid(table, df)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    out = [f"# {table.title}", ""]
    if table.paper:
        out += [f"Paper numbers: {table.paper.strip().rstrip('.')}.", ""]
    out += lines + [""]
    out += [f"- [{i}] {n}" for i, n in enumerate(notes, 1)] + ([""] if notes else [])
    out += [f"{line}  " for line in footer(table, df)]
    checked = df.attrs.get("claims")
    if checked is not None and len(checked):
        out += ["", "## The paper's claims, checked", "",
                "| " + " | ".join(claims.HEADER) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * 2 + ["---"]) + "|"]
        out += ["| " + " | ".join(cells) + " |" for cells in claims.lines(checked)]
        out += ["", claims.note(checked)]
    return "\n".join(out) + "\n"


# Every character LaTeX would read as markup, and what prints it as itself: one pass, so that the
# replacements' own backslashes and braces are not escaped again. A backslash is text too (a title's
# `\input` or `\write18` must print, never run); a bare | prints as an em dash, < and > as ¡ and ¿ in
# LaTeX's default font encoding.
_TEX_TEXT = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
             "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
             "|": r"\textbar{}", "<": r"\textless{}", ">": r"\textgreater{}",
             "±": r"$\pm$", "×": r"$\times$", "–": "--", "−": "$-$"}
_TEX_SPECIAL = re.compile("|".join(map(re.escape, _TEX_TEXT)))


def _tex(s: str) -> str:
    return _TEX_SPECIAL.sub(lambda m: _TEX_TEXT[m.group()], s)


def latex(table: Table, df: pd.DataFrame) -> str:
    """A booktabs table with the same grid as the Markdown and the notes as a footnote block. A table
    wider than the text is scaled down to the line width (adjustbox's `max width`; a narrower one keeps
    its size), and the signatures may break after each `|`, so the table fits the page."""
    header, body, notes = _grid(table, df)
    cols = "l" + "r" * (len(header) - 1)
    # a metric with the paper's number heads two columns, "paper" and "ours", under one rule
    top, sub, rules, col = ["System"], [""], [], 2
    for m in table.metrics:
        if df[df.metric == m].paper.notna().any():
            top.append(rf"\multicolumn{{2}}{{c}}{{{_tex(label(m))}}}")
            sub += ["paper", "ours"]
            rules.append(rf"\cmidrule(lr){{{col}-{col + 1}}}")
            col += 2
        else:
            top.append(_tex(label(m)))
            sub.append("")
            col += 1
    head = [" & ".join(top) + r" \\"]
    if rules:
        head += ["".join(rules), " & ".join(sub) + r" \\"]
    out = [r"% needs \usepackage{booktabs} and \usepackage{adjustbox}",
           r"\begin{table}[t]", r"\centering", r"\small", r"\begin{adjustbox}{max width=\linewidth}",
           rf"\begin{{tabular}}{{{cols}}}", r"\toprule", *head, r"\midrule"]
    out += [" & ".join(_tex(c) for c in cells) + r" \\" for cells in body]
    out += [r"\bottomrule", r"\end{tabular}", r"\end{adjustbox}"]
    foot = [f"[{i}] {n}" for i, n in enumerate(notes, 1)] + [s.replace("`", "") for s in footer(table, df)]
    checked = df.attrs.get("claims")
    if checked is not None and len(checked):
        foot += ["The paper's claims, checked: " + "; ".join(
            f"{claim + ' ' if claim else ''}{comparison} on {metric}: paper {paper}, ours {ours}: {verdict}"
            for claim, comparison, metric, paper, ours, verdict in claims.lines(checked)) + ".",
            claims.note(checked)]
    caption = _tex(table.title + (f" (paper: {table.paper.strip()})" if table.paper else ""))
    out += [rf"\caption{{{caption}}}", rf"\label{{tab:{table.name}}}"]
    out += [r"\par\footnotesize " + _tex(f).replace(r"\textbar{}", r"\textbar{}\allowbreak{}") for f in foot]
    out.append(r"\end{table}")
    return "\n".join(out) + "\n"


def build(table: Table, metrics_files: list[str | Path], run: str, scale: str, out_csv: str | Path,
          out_md: str | Path, out_tex: str | Path | None = None,
          gates_files: list[str | Path] | None = None, out_html: str | Path | None = None,
          cell_files: list[str | Path] | None = None, data_reports: list[str | Path] | None = None,
          out_claims: str | Path | None = None, partial: bool = False,
          outdated: dict[tuple[str, str], str] | None = None) -> pd.DataFrame:
    """The table from its rows' metrics files (and a gates table's gate statistics, a cells table's
    counts); `data_reports` (the corpus' prepare.json) bring the data's warnings into its notes; the
    paper's claims, checked, go into the renderings and `out_claims` (a tidy CSV). `partial`: rows
    without their metrics files are shown without numbers, saying so (`finished_rows`), instead of
    refused; `outdated` ((variant, member) → what changed) says which of them have files made with other
    settings than the run's now."""
    claimed = claims.parse(table)
    metrics, scored, where = {}, {}, {}
    for path in metrics_files:
        m = read_json(path)
        key = (m["variant"], m["member"])
        if where.setdefault(key, Path(path)) != Path(path):     # one decoding, one number: never the last file's
            raise InputError(f"table {table.name}: {where[key]} and {path} are both the metrics of {key[0]} "
                             f"{key[1]}; pass one file for each of a row's decodings")
        metrics[key] = m
        if "files" in m:                # a translation's scores: the files scored must still be those (checked
            scored[key] = scored_file(Path(path), m)    # once here; the significance test and claims read them)
    for path in gates_files or []:                  # .../analysis/<corpus>/<variant>/seed<N>/gates.<testset>.json
        key = member_of(path)
        if key in metrics:
            metrics[key] = {**metrics[key], "gates": read_json(path)}
    cells = {c["cell"]: c for c in map(read_json, cell_files or [])}
    if partial:
        table = finished_rows(table, set(metrics), run, outdated)
    base = next((r for r in table.rows if r.system == table.baseline), None)
    no_base = base is not None and base.unfinished      # a partial table without its reference row
    tested = {} if no_base else significance.p_values(table, scored, metrics=metrics)
    df = tidy(table, metrics, run, scale, cells, {s: t["p_value"] for s, t in tested.items()})
    df.attrs["significance"] = ([significance.note(table), *significance.both_ways(table, tested)] if tested else
                                [f"No significance marks: the reference row {base.system!r} has no numbers yet."]
                                if no_base else [])
    evidence = claims.Evidence(table, metrics, scored, metric_value) if table.kind == "translation" else None
    df.attrs["claims"] = checked = claims.check(table, claimed, df, evidence)
    df.attrs["cut_short"] = cut_short(table, metrics)
    if table.kind != "cells":
        df.attrs["ran"] = ran.notes(metrics, table.metrics)
        df.attrs["warnings"] = ran.warnings(metrics.values(), map(read_json, data_reports or []))
        parts = {p for m in metrics.values() for p in m.get("scores", {}).get("bleu_by_part") or {}}
        df.attrs["test_sets"] = sorted(parts)            # what a *_avg column averages
        df.attrs["lengths"] = length_note(table, metrics)
    with atomic_writer(out_csv) as f:
        df.to_csv(f, index=False)
    if out_claims:
        with atomic_writer(out_claims) as f:
            checked.to_csv(f, index=False)
    with atomic_writer(out_md) as f:
        f.write(markdown(table, df))
    if out_tex:
        with atomic_writer(out_tex) as f:
            f.write(latex(table, df))
    if out_html:
        from rnmt.report.htmltable import html_table

        with atomic_writer(out_html) as f:
            f.write(html_table(table, df))
    return df
