"""What a table's or figure's rows actually ran with, read from their metrics files rather than from the
configuration: the corpus and scale, each trained model's budget and the steps it trained, and the run's
override. A table whose run forced `max_steps: 200` must not read as if its models trained the 6,000
steps its scale's note describes, nor a figure trained on the synthetic pair as the paper's corpus."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from rnmt.settings import leaves


def _models(metrics: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each trained model once (an ensemble's metrics repeat its members'), as its train record."""
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for m in metrics:
        train = m.get("train") or {}
        for t in train.get("members", [train]):
            settings = t.get("train_settings") or {}
            if "steps" in t:
                seen.setdefault((m.get("corpus"), m.get("variant"), settings.get("seed")), t)
    return list(seen.values())


def _span(values: Iterable[Any]) -> str:
    """'600' for one value, '600–1,000' for several numbers, else the values joined."""
    distinct = sorted({v for v in values if v is not None}, key=str)
    if not distinct:
        return "?"
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in distinct):
        lo, hi = min(distinct), max(distinct)
        return f"{lo:,}" if lo == hi else f"{lo:,}–{hi:,}"
    return ", ".join(map(str, distinct))


def _budget(settings: Mapping[str, Any]) -> str:
    parts = [f"max_steps {settings['max_steps']:,}" if settings.get("max_steps") else "",
             f"max_epochs {settings['max_epochs']:g}" if settings.get("max_epochs") else "",
             f"max_minutes {settings['max_minutes']:g}" if settings.get("max_minutes") else ""]
    return ", ".join(p for p in parts if p) or "no limit"


def _batch(settings: Mapping[str, Any]) -> str:
    if settings.get("batch_tokens"):
        return f"{settings['batch_tokens']:,} tokens"
    return f"{settings['batch_size']:,} sentences" if settings.get("batch_size") else "?"


def summary(metrics: Iterable[Mapping[str, Any]]) -> str:
    """One sentence: the corpus and scale the rows ran at, how many models trained how many steps under
    which budgets and stopped why, and their batch size."""
    metrics = list(metrics)
    corpora = _span(m.get("corpus") for m in metrics)
    scales = _span(m.get("scale") for m in metrics)
    models = _models(metrics)
    where = f"corpus `{corpora}`" + (f", scale `{scales}`" if scales != "?" else "")
    if not models:
        return f"Ran on {where}."
    settings = [t.get("train_settings") or {} for t in models]
    stops = Counter(t.get("stop_reason") or "?" for t in models)
    stopped = ", ".join(f"{reason} ×{n}" if len(stops) > 1 else reason for reason, n in sorted(stops.items()))
    n = len(models)
    return (f"Ran on {where}: {n} model{'s' if n > 1 else ''} trained {_span(t.get('steps') for t in models)} "
            f"steps ({_span(_budget(s) for s in settings)}; stopped by {stopped}), batches of "
            f"{_span(_batch(s) for s in settings)}.")


def _flat(d: Mapping[str, Any]) -> list[str]:
    """`section.key value` of every setting, in key order."""
    return [f"{'.'.join(path)} {value}" for path, value in sorted(leaves(d)) if value != {}]


def override(metrics: Iterable[Mapping[str, Any]]) -> str:
    """The run's override as the metrics recorded it, or '' where there was none."""
    seen = {tuple(_flat(m.get("override") or {})) for m in metrics}
    forced = sorted({item for items in seen for item in items})
    if not forced:
        return ""
    return ("Forced on every row by the run's override, over the settings the notes describe: "
            + "; ".join(forced) + ".")


def subtitle(metrics: Iterable[Mapping[str, Any]]) -> str:
    """A figure's second title line: what its curves ran with."""
    metrics = list(metrics)
    run = _span(m.get("run") for m in metrics)
    forced = override(metrics)
    text = ("ours: " + (f"run `{run}`, " if run != "?" else "") + summary(metrics)[len("Ran on "):].rstrip("."))
    return text + ("; overridden: " + forced.split(": ", 1)[1].rstrip(".") if forced else "")


def warnings(metrics: Iterable[Mapping[str, Any]], data_reports: Iterable[Mapping[str, Any]] = ()) -> list[str]:
    """What the runs warned about, each once: the data's (a corpus' prepare.json: test sentences in the
    training data, repeated pairs, both sides the same), the training's (train.json: word vectors that
    matched nothing) and the decoding's (a test source mostly unknown to the model)."""
    metrics = list(metrics)
    found: dict[str, None] = {}
    for report in data_reports:
        found.update(dict.fromkeys(report.get("warnings") or []))
    for model in _models(metrics):
        found.update(dict.fromkeys(model.get("warnings") or []))
    for m in metrics:
        found.update(dict.fromkeys((m.get("decode") or {}).get("warnings") or []))
    return [f"Warning: {w.rstrip('.')}." for w in found]


SPEEDS = ("per_s", "seconds", "_ratio")          # a metric measuring speed has one of these in its name


def paths(metrics: Iterable[Mapping[str, Any]], shown: Iterable[str]) -> str:
    """For a table that shows a speed (`shown`: its metrics): whether its rows' recurrences trained on the
    same kind of path (train.json's `paths`: step loop, rnmt's kernels, torch's layer), so that its speed
    ratios compare the cells and not their implementations; '' where it shows no speed or no model
    recorded its paths."""
    if not any(s in name for name in shown for s in SPEEDS):
        return ""
    kinds: dict[str, set[str]] = {}
    for m in metrics:
        train = m.get("train") or {}
        for t in train.get("members", [train]):
            if t.get("paths"):
                kinds.setdefault(str(m.get("variant")), set()).update(t["paths"].values())
    if not kinds:
        return ""
    described = {row: ", ".join(sorted(k)) for row, k in sorted(kinds.items())}
    if len(set(described.values())) == 1:
        return (f"Speeds: every row's recurrences trained on the same kind of path ({next(iter(described.values()))}),"
                " so the speed ratios compare the cells.")
    return ("Speeds compare implementations as well as cells, the rows' recurrences having trained on different "
            "kinds of path: " + "; ".join(f"{row}: {k}" for row, k in described.items()) + ".")
