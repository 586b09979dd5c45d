"""What a table's or figure's rows actually ran with, read from their metrics files rather than from the
configuration: the corpus and scale, each trained model's budget and the steps it trained, and the run's
override. A table whose run forced `max_steps: 200` must not read as if its models trained the 6,000
steps its scale's note describes, nor a figure trained on the synthetic pair as the paper's corpus."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from rnmt.evaluate.metric_names import timed
from rnmt.report.trainings import commits, each_model, in_order, mixed_code, mixed_precision, ran_on, seed_list, trained
from rnmt.settings import leaves
from rnmt.train import schedules


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


def _rate(settings: Mapping[str, Any]) -> str:
    """The learning rate a model trained with, by its schedule; '?' where unrecorded."""
    if settings.get("lr") is None:
        return "?"
    return schedules.describe(settings.get("schedule", "constant"), **settings)


def summary(metrics: Iterable[Mapping[str, Any]]) -> str:
    """One sentence: the corpus and scale the rows ran at, how many models trained how many steps under
    which budgets and stopped why, their batch size and learning rate."""
    metrics = list(metrics)
    corpora = _span(m.get("corpus") for m in metrics)
    scales = _span(m.get("scale") for m in metrics)
    models = list(each_model(metrics).values())
    where = f"corpus `{corpora}`" + (f", scale `{scales}`" if scales != "?" else "")
    if not models:
        return f"Ran on {where}."
    settings = [t.get("train_settings") or {} for t in models]
    stops = Counter(t.get("stop_reason") or "?" for t in models)
    stopped = ", ".join(f"{reason} ×{n}" if len(stops) > 1 else reason for reason, n in sorted(stops.items()))
    n = len(models)
    return (f"Ran on {where}: {n} model{'s' if n > 1 else ''} trained {_span(t.get('steps') for t in models)} "
            f"steps ({_span(_budget(s) for s in settings)}; stopped by {stopped}), batches of "
            f"{_span(_batch(s) for s in settings)}, learning rate {_span(_rate(s) for s in settings)}.")


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def retrained(metrics: Iterable[Mapping[str, Any]]) -> str:
    """Which models went back to their best checkpoint at a lower rate when their dev score stopped improving
    (`plateau_retrains`, train.json's `retrained`), and when: such a model trained the rest of its budget
    slower than the learning-rate sentence says. '' where none did. A model trained before train.json kept
    the steps is counted only ('once')."""
    told = []
    for (_corpus, variant, seed), t in sorted(each_model(metrics).items(), key=in_order):
        n, events = t.get("retrains") or 0, t.get("retrained") or []
        if n:
            when = (", ".join(f"at step {e['step']:,} to step {e['from_step']:,}'s checkpoint at "
                              f"{e['lr_factor']:g} × the rate" for e in events)
                    if len(events) == n else _times(n))
            told.append(f"{variant} seed {seed} {when}")
    return ("Went back to their best checkpoint at a lower rate when their dev score stopped improving "
            "(`plateau_retrains`): " + "; ".join(told) + ".") if told else ""


BUDGETS = ("max_steps", "max_epochs", "max_minutes")     # stop reasons that are the budget's, not the dev score's


def still_improving(metrics: Iterable[Mapping[str, Any]]) -> str:
    """The rows whose every model was still improving when its budget stopped it: its best dev score
    (`select_by`) at its last step, stopped by `max_steps`, `max_epochs` or `max_minutes`, not by
    `patience`. Such a row's number is what the budget gave, not where its system levels off, so longer
    training may reorder it against rows that had levelled off. A model that did not learn to translate
    is left out (`unlearned` says so); '' where no row is such."""
    rows: dict[Any, list[tuple[Any, bool]]] = {}
    for (_corpus, variant, seed), t in sorted(each_model(metrics).items(), key=in_order):
        if t.get("learned") is False or t.get("best_step") is None:
            continue
        rows.setdefault(variant, []).append(
            (seed, t["best_step"] == t["steps"] and t.get("stop_reason") in BUDGETS))
    told = [f"{variant} (seed{'s' if len(seeds) > 1 else ''} {', '.join(str(s) for s, _ in seeds)})"
            for variant, seeds in sorted(rows.items(), key=str) if all(last for _, last in seeds)]
    return ("Still improving when their budget ended (each seed's best dev score at its last step; "
            "longer training may reorder these rows against the others): " + "; ".join(told) + ".") if told else ""


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
    matched nothing, a model that did not learn to translate; each named by its row and seed) and the
    decoding's (a test source mostly unknown to the model)."""
    metrics = list(metrics)
    found: dict[str, None] = {}
    for report in data_reports:
        found.update(dict.fromkeys(report.get("warnings") or []))
    for m in metrics:
        for t in trained(m):
            seed = (t.get("train_settings") or {}).get("seed")
            found.update(dict.fromkeys(f"{m.get('variant')} (seed {seed}): {w}" for w in t.get("warnings") or []))
    for m in metrics:
        found.update(dict.fromkeys((m.get("decode") or {}).get("warnings") or []))
    return [f"Warning: {w.rstrip('.')}." for w in found]


def paths(metrics: Iterable[Mapping[str, Any]], shown: Iterable[str]) -> str:
    """For a table that shows a speed or a time (`shown`: its metrics; `timed`): whether its rows'
    recurrences trained on the same kind of path (train.json's `paths`: step loop, rnmt's kernels, torch's
    layer), so that its speeds or times compare the cells and not their implementations; '' where it shows
    neither or no model recorded its paths."""
    clocked = [name for name in shown if timed(name)]
    if not clocked:
        return ""
    what = "Speeds" if any("_per_s" in name for name in clocked) else "Times"
    kinds: dict[str, set[str]] = {}
    for m in metrics:
        for t in trained(m):
            if t.get("paths"):
                kinds.setdefault(str(m.get("variant")), set()).update(t["paths"].values())
    if not kinds:
        return ""
    described = {row: ", ".join(sorted(k)) for row, k in sorted(kinds.items())}
    if len(set(described.values())) == 1:
        return (f"{what}: every row's recurrences trained on the same kind of path ({next(iter(described.values()))}),"
                f" so the {what.lower()} compare the cells.")
    return (f"{what} compare implementations as well as cells, the rows' recurrences having trained on different "
            "kinds of path: " + "; ".join(f"{row}: {k}" for row, k in described.items()) + ".")


LOAD_GAP = 0.5      # load averages this far apart: the runs shared the machine with different work


def _timed_hardware(m: Mapping[str, Any], metric: str) -> list[Mapping[str, Any]]:
    """The hardware records behind `metric` in one metrics file: its decoding's for a decoding speed,
    else each trained model's."""
    if metric.startswith("decode_"):
        hw = (m.get("decode") or {}).get("hardware")
        return [hw] if hw else []
    # a model resumed on another kind of machine was timed on each (train.json's `machines`)
    return [hw for t in trained(m) for hw in ran_on(t)]


def machine(hw: Mapping[str, Any]) -> str:
    """What sets a timed run's speed besides its cells and its code's paths, from a metrics file's
    `hardware`: the kind of device and its model, a CPU's vector instructions, the threads and bfloat16,
    as 'cpu <CPU name> ([<family and model>; ]<vector instructions>), <threads> thread(s)[, bf16]' or 'cuda
    <GPU name>[, bf16]' (the device's index left out: two GPUs of one kind are one machine). A CPU without its
    vector instructions or family recorded (older runs) says so or leaves it out, and so matches no CPU that
    has them. The machine's load is not part of it: that only says how much else ran beside the run."""
    device = str(hw.get("device", "?")).split(":")[0]
    isa = hw.get("cpu_isa") or "vector instructions not recorded"
    where = hw.get("gpu") or f"{hw.get('cpu', '?')} ({'; '.join(filter(None, (hw.get('cpu_family_model'), isa)))})"
    threads = hw.get("torch_threads")
    parts = [f"{device} {where}"]
    if threads is not None and device != "cuda":
        parts.append(f"{threads} thread{'s' if threads != 1 else ''}")
    if hw.get("bf16_autocast"):
        parts.append("bf16")
    return ", ".join(parts)


def unlearned(m: Mapping[str, Any]) -> str:
    """Why the models behind metrics file `m` say nothing of their system, '' where they learned: a model
    whose dev loss never left what word frequencies alone give (train.json's `learned`)."""
    stuck = [t for t in trained(m) if t.get("learned") is False]
    return "; ".join(
        f"{m.get('variant')} (seed {(t.get('train_settings') or {}).get('seed')}) did not learn to translate: its "
        f"lowest dev loss, {t.get('lowest_dev_loss')}, stayed near word frequencies' {t.get('frequency_dev_loss')}"
        for t in stuck)


def member_name(variant: Any, member: Any) -> str:
    """A decoding as the tables' notes name it: 'dtmt-4 (seed 2)', 'atr (ens1-2)'."""
    member = str(member)
    return f"{variant} ({'seed ' + member[4:] if member.startswith('seed') else member})"


def said_nothing(m: Mapping[str, Any]) -> str:
    """Why the translations of metrics file `m` say nothing of their system, '' where they do: its models did
    not learn to translate (`unlearned`, the cause where both) or gave no output (every hypothesis empty).
    One rule for a row's BLEU mean, its significance test and its claims: such a decoding is left out of
    each, saying so."""
    stuck, empty = unlearned(m), (m.get("scores") or {}).get("empty_output")
    if stuck or not empty:
        return stuck
    return f"{member_name(m['variant'], m.get('member'))}: {empty}" if m.get("variant") else str(empty)


def apart(a: Mapping[str, Any], b: Mapping[str, Any], metric: str) -> str:
    """Why `metric` in metrics files `a` and `b` does not compare, '' where it does: a metric that is not
    timed, or one timed on the same `machine` in both, both with their load recorded or neither (a run
    whose load is unknown may have shared the machine with anything: a test suite, three trainings)."""
    if not timed(metric):
        return ""
    ha, hb = _timed_hardware(a, metric), _timed_hardware(b, metric)
    if not ha or not hb:
        return ""
    verb = "decoded" if metric.startswith("decode_") else "trained"
    ma, mb = {machine(h) for h in ha}, {machine(h) for h in hb}
    if ma != mb or len(ma) > 1:
        return f"{verb} on {' and '.join(sorted(ma))} against {' and '.join(sorted(mb))}"
    la, lb = _load(ha), _load(hb)
    if (la is None) != (lb is None):
        return (f"{verb} at load average {la if la is not None else lb:.1f} against a run that did not record "
                "what else shared the machine")
    return ""


def _load(hardware: list[Mapping[str, Any]]) -> float | None:
    """The mean load average of some runs' hardware records; None where any did not record one."""
    loads = [h.get("load_avg") for h in hardware]
    return None if any(v is None for v in loads) else sum(loads) / len(loads)


def machines(metrics: Mapping[tuple[str, str], Mapping[str, Any]], shown: Iterable[str]) -> str:
    """For a table that shows a speed (`shown`: its metrics): the machine its rows were timed on and the
    load averages they shared it at; each row's machine where they differ, each row's load where the loads
    are LOAD_GAP or more apart; '' where the table shows no speed or no run recorded its machine. Training
    and decoding speeds are told apart (`apart` compares each with its own kind): a model trained under
    bfloat16 autocast and decoded in float32 was timed on one machine, not two."""
    speeds = [name.removesuffix("_ratio") for name in shown if timed(name)]
    on: dict[str, dict[str, set[str]]] = {}        # "training" or "decoding" → machine → rows
    loads: dict[str, list[float]] = {}
    for (variant, _member), m in sorted(metrics.items()):
        for metric in speeds:
            kind = "decoding" if metric.startswith("decode_") else "training"
            for hw in _timed_hardware(m, metric):
                on.setdefault(kind, {}).setdefault(machine(hw), set()).add(variant)
                if hw.get("load_avg") is not None:
                    loads.setdefault(variant, []).append(hw["load_avg"])
    if not on:
        return ""
    kinds = sorted(on, reverse=True)                # training first
    if all(len(on[k]) == 1 for k in kinds):
        where = {k: next(iter(on[k])) for k in kinds}
        text = "Timed on one machine: " + (next(iter(where.values())) if len(set(where.values())) == 1 else
                                           "; ".join(f"{k} on {w}" for k, w in where.items())) + "."
    else:
        def rows_on(k: str) -> str:
            return "; ".join(f"{', '.join(sorted(rows))} on {where}" for where, rows in sorted(on[k].items()))
        text = ("Timed on different machines, so the speeds of rows on different ones do not compare: "
                + (rows_on(kinds[0]) if len(kinds) == 1 else "; ".join(f"{k}: {rows_on(k)}" for k in kinds))
                + ".")
    every = [v for values in loads.values() for v in values]
    unrecorded = sorted({v for kind in on.values() for rows in kind.values() for v in rows} - set(loads))
    if every and max(every) - min(every) >= LOAD_GAP:
        text += (" The rows shared the machine with different work (load averages "
                 + ", ".join(f"{v} {_tenths(x)}" for v, x in sorted(loads.items()))
                 + "), so their speeds compare less closely than their cells.")
    elif every:
        text += f" Load average {_tenths(every)}."
    if every and unrecorded:
        text += (f" No load recorded for {', '.join(unrecorded)}: their speeds do not compare with those of the "
                 "rows that recorded theirs.")
    return text


def _tenths(values: list[float]) -> str:
    """'2.1' for values that round alike, else their range, '1.0–2.1'."""
    lo, hi = f"{min(values):.1f}", f"{max(values):.1f}"
    return lo if lo == hi else f"{lo}–{hi}"


def _where(records: Iterable[Mapping[str, Any]]) -> str:
    """Where some models were trained: 'on <machine>[ and <machine>] by <commit>, <commit>'."""
    records = list(records)
    on = sorted({machine(r.get("hardware") or {}) for r in records})
    by = sorted({c for r in records for c in commits(r)})
    return f"on {' and '.join(on)} by {', '.join(by)}"


def other_trainings(metrics: Mapping[tuple[str, str], Mapping[str, Any]]) -> str:
    """A line naming the ensembles (`metrics`: by variant and member) whose models are other trainings of
    their seeds than the ones the seeds' own rows report, with where each was trained; '' where every
    ensemble averages its rows' own models. A table's rows may be kept from an earlier run while the models,
    which are not kept, are trained again for an ensemble: same settings, another draw, so its gain over
    the row is not its gain over its own members."""
    told = []
    for (variant, member), m in sorted(metrics.items(), key=str):
        if str(member).startswith("seed") or "members" not in (m.get("train") or {}):
            continue
        again = {}
        for t in trained(m):
            seed = (t.get("train_settings") or {}).get("seed")
            own = metrics.get((variant, f"seed{seed}"))
            if own and trained(own)[0] != t:
                again[seed] = (t, trained(own)[0])
        if again:
            seeds = seed_list([str(s) for s in sorted(again, key=str)])
            told.append(f"{member_name(variant, member)} averages {seeds} "
                        f"trained {_where([a for a, _ in again.values()])}, the row's own trained "
                        f"{_where([o for _, o in again.values()])}")
    return ("Ensembles of other trainings of their seeds than the seeds' own rows report (trained again with the "
            "same settings: other draws, so an ensemble's gain over its row is not over its own members): "
            + "; ".join(told) + ".") if told else ""


def notes(metrics: Mapping[tuple[str, str], Mapping[str, Any]], shown: Iterable[str]) -> list[str]:
    """A table's lines on what its rows ran with (`metrics`: by row and member; `shown`: its metrics), ''
    for each that has nothing to say."""
    shown = list(shown)
    return [summary(metrics.values()), retrained(metrics.values()), still_improving(metrics.values()),
            override(metrics.values()), paths(metrics.values(), shown), machines(metrics, shown),
            mixed_precision(metrics.values()), mixed_code(metrics.values()), other_trainings(metrics)]
