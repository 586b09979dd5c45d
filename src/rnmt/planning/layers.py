"""Where a trained row's settings come from: the layers its model, train and decode settings are made of,
weakest first, each named by its file and key. The plan builds every variant from these layers
(`resolve`) and `rnmt explain` shows them (`explain`), so what is explained is what runs.

Weakest first: the settings class's default (`TrainSettings`, `DecodeSettings`; a model setting's default is
its architecture's constructor's); the config's section (config.yaml `train:`); the scale's
(`scales.<scale>.train`); the paper's at this scale (its systems file's `settings.<scale>`); the table's at
this scale (the experiment file's `settings.<scale>`); the system's own (its definition in the systems
file, or the row's in place); the system's own at this scale (its `scales.<scale>`: where a system that
learns slower takes more demo steps); and last the run's `override`, forced on every row.
A model setting of a shared layer (all but the system's own) that the row's architecture does not take
is left out for that row (the Transformer has no `emb`), and `explain` says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SECTIONS = ("model", "train", "decode")


@dataclass(frozen=True)
class Layer:
    where: str                                  # the file and key it is read from, {s} for the section
    values: dict[str, dict[str, Any]]           # section -> settings
    own: bool = False                           # the system's own: kept even where the architecture lacks it


def setting_layers(config: dict[str, Any], scale: str, row: dict[str, Any], paper: dict[str, Any],
                   paper_where: str, table: dict[str, Any], table_where: str, row_where: str,
                   config_where: str = "config.yaml") -> list[Layer]:
    """The layers of a row (resolved: a system's definition in it), weakest first; `paper` and `table` are
    the systems file's and the experiment file's `settings` (per scale)."""
    at_scale = (config.get("scales") or {}).get(scale) or {}
    own_scale = (row.get("scales") or {}).get(scale) or {}

    def sections(d: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {s: dict(d.get(s) or {}) for s in SECTIONS}

    return [
        Layer(f"{config_where} {{s}}", sections(config)),
        Layer(f"{config_where} scales.{scale}.{{s}}", sections(at_scale)),
        Layer(f"{paper_where} settings.{scale}.{{s}}", sections(paper.get(scale) or {})),
        Layer(f"{table_where} settings.{scale}.{{s}}", sections(table.get(scale) or {})),
        Layer(f"{row_where}.{{s}}", sections(row), own=True),
        Layer(f"{row_where}.scales.{scale}.{{s}}", sections(own_scale), own=True),
        Layer(f"{config_where} override.{{s}} (forced on every row)", sections(config.get("override") or {})),
    ]


def resolve(layers: list[Layer], taken: Callable[[str], bool]) -> dict[str, dict[str, Any]]:
    """Each section's settings: the layers overlaid in order, the model settings of shared layers only
    where the architecture takes them (`taken`)."""
    out: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
    for layer in layers:
        for s in SECTIONS:
            out[s].update({k: v for k, v in layer.values[s].items() if s != "model" or layer.own or taken(k)})
    return out


def explain(layers: list[Layer], taken: Callable[[str], bool], resolved: dict[str, dict[str, Any]],
            defaults: dict[str, tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per resolved setting: section, key, value, the layer that set it (else the default's source) and the
    values of the weaker layers it is over; plus a record per model setting a shared layer gave that the
    architecture does not take (`dropped`). `defaults`: section -> (where, default values)."""
    out = []
    for s in SECTIONS:
        where_default, default = defaults[s]
        for key in sorted(set(resolved[s]) | set(default)):
            setters = [(layer.where.format(s=s), layer.values[s][key]) for layer in layers if key in layer.values[s]
                       and (s != "model" or layer.own or taken(key))]
            value = resolved[s].get(key, default.get(key))
            source = setters[-1][0] if setters else f"default ({where_default})"
            over = [f"{w}: {v!r}" for w, v in setters[:-1]]
            if setters and key in default:
                over.insert(0, f"default: {default[key]!r}")
            out.append({"section": s, "key": key, "value": value, "from": source, "over": over, "dropped": False})
        if s == "model":
            for layer in layers:
                for key, v in layer.values[s].items():
                    if not layer.own and not taken(key):
                        out.append({"section": s, "key": key, "value": v, "from": layer.where.format(s=s), "over": [],
                                    "dropped": True})
    return out


def rel(path: str | Path, root: Path) -> str:
    """A path as the user reads it: relative to the checkout where it is inside it."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(p)


def render(records: list[dict[str, Any]], keys: list[str], show_all: bool) -> str:
    """The explanation as text: per section, each setting a layer set (every setting with `show_all`, only
    `keys` where given) with its value, where it came from and what it is over; then the model settings
    left out because the architecture does not take them."""
    lines = []
    for s in SECTIONS:
        chosen = [r for r in records if r["section"] == s and not r["dropped"]
                  and (r["key"] in keys if keys else show_all or not r["from"].startswith("default"))]
        dropped = [r for r in records if r["section"] == s and r["dropped"] and (not keys or r["key"] in keys)]
        if not chosen and not dropped:
            continue
        lines.append(f"{s}:")
        width = max((len(r["key"]) for r in chosen), default=0)
        for r in chosen:
            lines.append(f"  {r['key']:<{width}} = {r['value']!r:<10}  from {r['from']}")
            lines += [f"  {'':<{width}}   {'':<10}  over {o}" for o in reversed(r["over"])]
        for r in dropped:
            lines.append(f"  {r['key']} = {r['value']!r} from {r['from']}: left out, the architecture does not take it")
    return "\n".join(lines)
