"""The trained models behind a table's metrics files, each once, and how a row's seeds' trainings differ:
the rnmt commits that trained them and the arithmetic they trained in. A row's mean and spread describe one
system only where its seeds share both."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any


def trained(m: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The train records behind one metrics file: its model's, or each member's of an ensemble."""
    train = m.get("train") or {}
    return train.get("members", [train])


def each_model(metrics: Iterable[Mapping[str, Any]]) -> dict[tuple[Any, Any, Any], dict[str, Any]]:
    """Each trained model once (an ensemble's metrics repeat its members'): its train record by (corpus,
    variant, seed). A seed trained more than once among `metrics` (an ensemble's member trained again in a
    later run, beside its seed's own row kept from an earlier one: another draw of the same settings) is
    each training, the one its seed's own row reports under the seed, another under '<seed> of <ensemble>'
    (`report.ran.other_trainings` says so in a table's notes)."""
    metrics = sorted(metrics, key=lambda m: not str(m.get("member", "")).startswith("seed"))    # own rows first
    seen: dict[tuple[Any, Any, Any], dict[str, Any]] = {}
    for m in metrics:
        for t in trained(m):
            settings = t.get("train_settings") or {}
            if "steps" not in t:
                continue
            key = (m.get("corpus"), m.get("variant"), settings.get("seed"))
            if seen.setdefault(key, t) != t and t not in seen.values():
                seen[(*key[:2], f"{key[2]} of {m.get('member')}")] = t
    return seen


def in_order(item: tuple[tuple[Any, Any, Any], Any]) -> tuple[str, ...]:
    """`each_model`'s items by variant, then seed, a seed's own training before its others ('1', '1 of ens1-2')."""
    return tuple(map(str, item[0][1:]))


def commits(t: Mapping[str, Any]) -> list[str]:
    """The rnmt commits (10 digits, '+' where uncommitted changes ran) that trained one model, in order: a
    training resumed by other code has several (train.json's `code`)."""
    code = t.get("code") or [t]
    return list(dict.fromkeys(f"{(c.get('git_commit') or '?')[:10]}{'+' if c.get('git_dirty') else ''}"
                              for c in code))


def _mixed(metrics: Iterable[Mapping[str, Any]], of: Callable[[Mapping[str, Any]], Any]) -> dict[Any, dict[Any, Any]]:
    """The rows whose models differ in `of` (of a model's train record; None: not recorded, left out): by
    variant, each seed's value, in `in_order`'s order."""
    rows: dict[Any, dict[Any, Any]] = {}
    for (_, variant, seed), t in sorted(each_model(metrics).items(), key=in_order):
        if (value := of(t)) is not None:
            rows.setdefault(variant, {})[seed] = value
    return {v: seeds for v, seeds in rows.items() if len(set(seeds.values())) > 1}


def mixed_code(metrics: Iterable[Mapping[str, Any]]) -> str:
    """A line naming the rows whose seeds were trained by different commits of rnmt, with each seed's, ''
    where every row's seeds ran the same ones: a row's mean and spread are one system's only where no commit
    between them changed its training, which the commits let a reader check (`git log A..B`). A model
    resumed by other code is the train warning's ("trained by more than one version")."""
    mixed = _mixed(metrics, lambda t: tuple(commits(t)) if t.get("git_commit") or t.get("code") else None)
    if not mixed:
        return ""
    return ("Rows whose seeds were trained by different commits of rnmt (one system only where no commit between "
            "them changed its training; `+`: with uncommitted changes): " + "; ".join(
                f"{v} ({', '.join(f'seed {s} ' + ' then '.join(c) for s, c in seeds.items())})"
                for v, seeds in sorted(mixed.items(), key=str)) + ".")


def ran_on(t: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The machines one model trained on: train.json's `machines` where it was resumed on another, else its
    `hardware`; none where it recorded no machine."""
    if not t.get("hardware"):
        return []
    return t.get("machines") or [t["hardware"]]


def _precision(t: Mapping[str, Any]) -> str | None:
    """'bfloat16 autocast', 'float32' or 'bfloat16 autocast, then float32' (a training resumed on a machine
    of the other kind, train.json's `machines`) for one model; None where it did not record its machine."""
    ran = [hw.get("bf16_autocast") for hw in ran_on(t)]
    if not ran or None in ran:
        return None
    return ", then ".join(dict.fromkeys("bfloat16 autocast" if b else "float32" for b in ran))


def seed_list(seeds: list[str]) -> str:
    """'seed 1' or 'seeds 2, 3'."""
    return f"seed{'s' if len(seeds) > 1 else ''} {', '.join(seeds)}"


def mixed_precision(metrics: Iterable[Mapping[str, Any]]) -> str:
    """A line naming the rows whose seeds trained in different precisions, '' where each row's did in one:
    `amp` asks for bfloat16 autocast, which a machine that does not multiply bfloat16 in hardware
    (`machine.hardware.native_bf16`) runs in float32, so seeds kept from different machines may share their
    settings but not their arithmetic."""
    mixed = _mixed(metrics, _precision)
    if not mixed:
        return ""
    told = []
    for v, seeds in sorted(mixed.items(), key=str):
        kinds: dict[str, list[str]] = {}
        for seed, kind in seeds.items():
            kinds.setdefault(kind, []).append(str(seed))
        told.append(f"{v} ({', '.join(f'{seed_list(s)} in {k}' for k, s in kinds.items())})")
    return ("Rows whose seeds trained in different precisions (`amp`'s bfloat16 autocast where the machine "
            "multiplies bfloat16 in hardware, float32 where not): " + "; ".join(told) + ".")
