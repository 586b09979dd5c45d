"""Whether a row's metrics are what its run makes now.

Each metrics file records what made it: the model's configuration and training settings of every model
it decoded with, and the search's settings. `expected` is what the plan gives a row now, and
`differences` compares the two for each of its members. Snakemake redoes a model whose settings changed
where it kept how the model was made; where it did not (results copied from another machine,
`--rerun-triggers mtime`) only the files can tell, so the table command checks every metrics file against
what the plan expects of it, and a partial table leaves out (and does not retrain) the rows made with
other settings, saying what changed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rnmt.io import read_json
from rnmt.planning.plan import Plan, Variant
from rnmt.planning.table import member_seeds


def expected(variant: Variant) -> dict[str, Any]:
    """What the plan makes a row's metrics with: the model, the training settings but the seed (each member's
    own), the search."""
    return {"model": json.loads(variant.model_settings()), "train": json.loads(json.dumps(variant.train)),
            "search": json.loads(variant.decode_settings())}     # as JSON gives them: lists, not tuples


def member_of(path: str | Path) -> tuple[str, str]:
    """(variant, member) of a row member's file: .../<variant>/<member>/<testset>.json, or a gates file
    .../<variant>/seed<N>/gates.<testset>.json."""
    return Path(path).parent.parent.name, Path(path).parent.name


def _same(made: Any, now: Any) -> bool:
    """Whether a recorded setting is the planned one; in a mapping, the keys the plan gives (training adds
    what it derives from the data: a label factor's vocabulary size)."""
    if isinstance(made, dict) and isinstance(now, dict):
        return all(_same(made.get(k), v) for k, v in now.items())
    return bool(made == now)


def _changes(what: str, made: dict[str, Any], now: dict[str, Any], keys: set[str] | None = None) -> list[str]:
    keys = set(made) | set(now) if keys is None else keys
    changed = sorted(k for k in keys if not _same(made.get(k), now.get(k)))
    return [f"{what} " + ", ".join(f"{k}: {made.get(k)!r} → {now.get(k)!r}" for k in changed)] if changed else []


def differences(want: dict[str, Any], member: str, metrics: dict[str, Any]) -> list[str]:
    """What in `metrics` (the metrics file of a row's `member`: seed3, ens1-2) differs from `want` (the row's
    `expected`); empty where it is current. A search that did not record its settings (an older rnmt) is not
    current: the settings it left out may be other than the plan's now."""
    train = metrics.get("train") or {}
    models, seeds = train.get("members") or [train], member_seeds(member)
    out: list[str] = []
    for made, seed in zip(models, seeds, strict=False):
        out += _changes("model", made.get("model_config") or {}, want["model"], set(want["model"]))
        out += _changes("training", made.get("train_settings") or {}, {**want["train"], "seed": seed})
    if len(models) != len(seeds):
        out.append(f"{len(models)} trained model(s) for {len(seeds)} seed(s)")
    decode, search = metrics.get("decode") or {}, want["search"]
    if "settings" in decode:
        out += _changes("search", decode["settings"], search)
    else:                   # an older rnmt recorded some of the search's settings only: what it left out may differ
        out.append("search settings not recorded (an older rnmt decoded it): decode it again")
    return list(dict.fromkeys(out))          # an ensemble's members changed alike say it once


def made_with(metrics: dict[str, Any]) -> dict[str, Any]:
    """The part of a metrics file that `differences` reads (what made it), to keep beside a table's numbers."""
    train = metrics.get("train") or {}

    def model(m: dict[str, Any]) -> dict[str, Any]:
        return {k: m.get(k) for k in ("model_config", "train_settings")}

    decode = metrics.get("decode") or {}
    search = ({"settings": decode["settings"]} if "settings" in decode
              else {k: v for k, v in decode.items() if not isinstance(v, (dict, list))})
    return {"train": {"members": [model(m) for m in train["members"]]} if "members" in train else model(train),
            "decode": search}


def table_expected(plan: Plan, table: str) -> dict[str, Any]:
    """What `table`'s metrics files must have been made with: {"files": the paths `Plan.metrics_paths`
    gives, "variants": {variant: `expected`}} (each row's settings once, whatever its seeds, so that the
    table command's argument stays short)."""
    t = plan.table(table)
    return {"files": plan.metrics_paths(table),
            "variants": {row.variant: expected(plan.variant(t.corpus, row.variant))   # type: ignore[arg-type]
                         for row in t.trained_rows}}


def outdated(expectations: dict[str, Any], where: str | Path = ".") -> dict[str, str]:
    """Of the metrics files `expectations` (`table_expected`) names, under `where`, those that exist but were
    made with other settings than their rows' now, each with what changed."""
    out = {}
    for path in expectations["files"]:
        variant, member = member_of(path)
        if (Path(where) / path).is_file():
            why = differences(expectations["variants"][variant], member, read_json(Path(where) / path))
            if why:
                out[path] = "; ".join(why)
    return out
