"""The papers' figures from our runs, each a PNG (and a PDF beside it) next to its table. A row of several
seeds is drawn as its table reports it, the mean over its seeds (at the points every seed has), with each
seed's own line thin behind it and the legend saying over how many seeds; against training time, where seeds
do not share an axis, each seed is drawn in its row's colour.

- `gates` (ATR Figure 3): mean input and forget gate of the decoder's ATR units by target position,
  averaged over the test sentences, with Pearson's r of the two in the legend;
- `length` (DTMT Figure 3): BLEU by source-sentence length, one line per system;
- `cost` (UD Figure 2): training cost per minibatch, smoothed by a trailing mean that widens with the
  number of minibatches (`window_for`), one line per system;
- `perplexity` (SR-NMT Figure 3): training and dev perplexity against training time, one colour per
  system (training: every logged minibatch, smoothed; dev: every validation).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rnmt.io import InputError, read_json
from rnmt.planning.table import Table
from rnmt.report import ran
from rnmt.report.curves import read_log, train_loss
from rnmt.report.plotting import save


def _axes(title: str, ours: str = "", figsize: tuple[float, float] = (6.4, 4.0)) -> tuple[Any, Any]:
    """A figure titled with the paper's figure and, below it, what our curves ran with (`ours`)."""
    import matplotlib

    matplotlib.use("Agg")
    import textwrap

    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=figsize)
    lines = textwrap.wrap(title, 70) + textwrap.wrap(ours, 90)          # long titles stay inside
    ax.set_title("\n".join(lines), fontsize=9 if not ours else 8)
    return fig, ax


def _systems(table: Table, paths: Sequence[str | Path], depth: int) -> dict[str, list[Path]]:
    """Files grouped by the row they belong to; the variant is the folder `depth` levels up."""
    by_variant: dict[str, list[Path]] = {}
    for p in map(Path, paths):
        by_variant.setdefault(p.parents[depth - 1].name, []).append(p)
    return {r.system: by_variant[r.variant] for r in table.trained_rows if r.variant in by_variant and not r.ensemble}


def _over_seeds(system: str, shown: int, seeds: int) -> str:
    """A row's legend entry: its system, and over how many of its seeds its line is the mean where it has
    more than one (fewer where a seed has nothing to draw: a model that gave no output)."""
    if seeds <= 1:
        return system
    return f"{system} (mean of {shown} seeds)" if shown == seeds else f"{system} (mean of {shown} of {seeds} seeds)"


def _mean(ax: Any, series: list[dict[float, float]], style: str, label: str, color: Any = None) -> Any:
    """Draw the mean of `series` (each seed's x → y) at the x every one of them has, and each seed's own line
    thin behind it where there are several; the mean's line."""
    common = sorted(set.intersection(*(set(s) for s in series)))
    line = ax.plot(common, [sum(s[x] for s in series) / len(series) for x in common], style, label=label,
                   color=color)[0]
    if len(series) > 1:
        for s in series:
            xs = sorted(s)
            ax.plot(xs, [s[x] for x in xs], "-", lw=0.6, alpha=0.35, color=line.get_color(), label="_seed")
    return line


def gates(table: Table, gate_files: Sequence[str | Path], out_png: str | Path, ours: str = "") -> None:
    if not gate_files:
        raise InputError(f"{table.name}: no gate statistics to plot (rows need ATR decoder cells)")
    from rnmt.report.tables import reported_unit

    fig, ax = _axes(table.title, ours)
    for system, files in _systems(table, gate_files, 2).items():
        units = [reported_unit(read_json(f)) for f in files]
        cell, seeds = units[0][0], [st for _, st in units]
        by_position = {key: [{i + 1: v for i, v in enumerate(st[key])} for st in seeds]
                       for key in ("mean_input_gate_by_position", "mean_forget_gate_by_position")}
        r = sum(st["pearson_r"] for st in seeds) / len(seeds)
        row = _over_seeds(system, len(seeds), len(seeds))
        line = _mean(ax, by_position["mean_input_gate_by_position"], "-", f"{row}: input gate ({cell})")
        _mean(ax, by_position["mean_forget_gate_by_position"], "--", f"{row}: forget gate, r = {r:.3f}",
              color=line.get_color())
    ax.set_xlabel("target position")
    ax.set_ylabel("mean gate value")
    ax.legend(fontsize=7)
    save(fig, out_png)


def length(table: Table, metrics_files: Sequence[str | Path], out_png: str | Path, ours: str = "") -> None:
    """BLEU against source length over the table's bleu_len@ (or tokenized tok_bleu_len@) metrics, one
    line per system."""
    from rnmt.report.layout import label, tokenized
    from rnmt.report.tables import length_sentences, metric_value

    lengths = [m for m in table.metrics if tokenized(m)[1].startswith("bleu_len@")]
    if not lengths:
        raise InputError(f"{table.path}: a length figure needs bleu_len@<a>-<b> or tok_bleu_len@<a>-<b> metrics")
    fig, ax = _axes(table.title, ours)
    plotted, sentences = 0, [None] * len(lengths)
    for system, files in _systems(table, metrics_files, 2).items():
        runs = [read_json(f) for f in files]
        series = [{i: v for i, name in enumerate(lengths) if (v := metric_value(m, name)) is not None} for m in runs]
        drawn = [s for s in series if s]            # a seed whose model gave no output has no BLEU to draw
        if drawn:
            _mean(ax, drawn, "o-", _over_seeds(system, len(drawn), len(runs)))
            if not plotted:                         # one test split: the first row's counts are every row's
                sentences = length_sentences(runs[0], lengths)
            plotted += 1
    if not plotted:
        raise InputError(f"{table.name}: the metrics have no BLEU by source length (score with --src)")
    ticks = [label(tokenized(m)[1]).replace("len ", "") for m in lengths]
    counted = any(n is not None for n in sentences)     # a point over 2 sentences must not read as a trend
    if counted:
        ticks = [f"{t}\n({n:,})" if n is not None else t for t, n in zip(ticks, sentences, strict=True)]
    ax.set_xticks(range(len(lengths)), ticks)
    ax.set_xlabel("source length (words); in brackets, the test sentences a point rests on" if counted
                  else "source length (words)")
    ax.set_ylabel("BLEU (tokenized, multi-bleu)" if all(tokenized(m)[0] for m in lengths) else "BLEU")
    ax.legend(fontsize=7)
    save(fig, out_png)


def window_for(points: int, least: int = 5) -> int:
    """The trailing mean a per-minibatch curve is drawn with: `least` minibatches, or a fiftieth of the
    curve where that is more, so that 6,000 minibatch costs read as a curve rather than as their noise
    (the paper's 215-minibatch Figure 2 keeps `least`)."""
    return max(least, points // 50)


def smooth(values: Sequence[float], window: int) -> list[float]:
    """Trailing moving average (the paper's curves are 'slightly smoothed')."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def cost(table: Table, logs: Sequence[str | Path], out_png: str | Path, window: int = 5, ours: str = "") -> None:
    """Each system's training cost by minibatch, a trailing mean over `window_for` its logged minibatches
    (the widest one drawn is named on the axis)."""
    fig, ax = _axes(table.title, ours)
    widest = 0
    for system, files in _systems(table, logs, 2).items():
        series = []
        for f in files:
            train = [r for r in read_log(f) if r["kind"] == "train"]
            if train:
                mean = window_for(len(train), window)
                widest = max(widest, mean)
                series.append(dict(zip([r["step"] for r in train], smooth([train_loss(r) for r in train], mean),
                                       strict=True)))
        if series:
            _mean(ax, series, "-", _over_seeds(system, len(series), len(files))).set_linewidth(1)
    ax.set_xlabel("minibatch")
    ax.set_ylabel("training cost (cross-entropy per token)" +
                  (f",\nmean over the last {widest} logged minibatches" if widest > 1 else ""))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save(fig, out_png)


def perplexity(table: Table, logs: Sequence[str | Path], out_png: str | Path, window: int = 5, ours: str = "") -> None:
    import math

    fig, ax = _axes(table.title, ours)
    plotted = 0
    for system, files in _systems(table, logs, 2).items():
        color = None                                # each seed its own curve, in its row's colour
        for f in files:
            records = read_log(f)
            train = [r for r in records if r["kind"] == "train"]
            valid = [r for r in records if r["kind"] == "valid"]
            if not train or not valid:
                continue
            row = system if len(files) == 1 else f"{system} ({len(files)} seeds)"
            line = ax.plot([r["train_seconds"] / 60 for r in train],
                           [math.exp(min(v, 50.0)) for v in smooth([train_loss(r) for r in train],
                                                                   window_for(len(train), window))], lw=1,
                           label=f"{row}: training" if color is None else "_seed", color=color)[0]
            ax.plot([r["train_seconds"] / 60 for r in valid], [r["dev_ppl"] for r in valid], "o--", ms=3,
                    color=line.get_color(), label=f"{row}: validation" if color is None else "_seed")
            color = line.get_color()
            plotted += 1
    if not plotted:
        raise InputError(f"{table.name}: no training log with training and validation records to plot")
    ax.set_yscale("log")
    ax.set_xlabel("training minutes")
    ax.set_ylabel("perplexity")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save(fig, out_png)


def curves(table: Table, logs: Sequence[str | Path], out_png: str | Path) -> None:
    """Learning curves of every trained row of a table: dev perplexity and greedy dev BLEU against
    training minutes, one line per seed, a row's seeds in one colour."""
    import matplotlib.pyplot as plt

    fig, (ax_ppl, ax_bleu) = plt.subplots(1, 2, figsize=(11, 4.2))
    trained = [{"corpus": Path(p).parents[2].name, "variant": Path(p).parents[1].name, "train": read_json(t)}
               for p in logs if (t := Path(p).with_name("train.json")).is_file()]
    fig.suptitle(f"{table.title}: learning curves" + (f"\n{ran.subtitle(trained)}" if trained else ""), fontsize=9)
    for system, files in _systems(table, logs, 2).items():
        color = None
        for f in files:
            valid = [r for r in read_log(f) if r["kind"] == "valid"]
            if not valid:
                continue
            minutes = [r["train_seconds"] / 60 for r in valid]
            label = (system if len(files) == 1 else f"{system} ({len(files)} seeds)") if color is None else "_seed"
            line = ax_ppl.plot(minutes, [r["dev_ppl"] for r in valid], "o-", ms=3, label=label, color=color)[0]
            if any(r.get("dev_bleu") is not None for r in valid):
                ax_bleu.plot(minutes, [r.get("dev_bleu") for r in valid], "o-", ms=3, color=line.get_color())
            color = line.get_color()
    ax_ppl.set_yscale("log")
    ax_ppl.set_ylabel("dev perplexity")
    ax_bleu.set_ylabel("dev BLEU (greedy)")
    for ax in (ax_ppl, ax_bleu):
        ax.set_xlabel("training minutes")
        ax.grid(alpha=0.3)
    ax_ppl.legend(fontsize=6)
    save(fig, out_png)


def draw(table: Table, out_png: str | Path, metrics: Sequence[str | Path] = (), gate_files: Sequence[str | Path] = (),
         logs: Sequence[str | Path] = ()) -> None:
    kind = (table.figure or {}).get("kind")
    ours = ran.subtitle(read_json(p) for p in metrics) if metrics else ""
    if kind == "gates":
        gates(table, gate_files, out_png, ours=ours)
    elif kind == "length":
        length(table, metrics, out_png, ours=ours)
    elif kind == "cost":
        cost(table, logs, out_png, ours=ours)
    elif kind == "perplexity":
        perplexity(table, logs, out_png, ours=ours)
    else:
        raise InputError(f"{table.path}: no figure to draw (give figure: {{kind: gates|length|cost|perplexity}})")
