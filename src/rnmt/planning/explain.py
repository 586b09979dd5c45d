"""`rnmt explain RUN VARIANT`: every setting of a run's variant with the file and key it came from, from the
layers the plan builds the variant from (rnmt.planning.layers), for a built run from its record."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rnmt.config import ConfigError, closest, load_yaml
from rnmt.decode.settings import DecodeSettings
from rnmt.models.registry import model_defaults
from rnmt.planning.experiments import takes
from rnmt.planning.layers import SECTIONS, Layer, explain, rel, render
from rnmt.planning.plan import Plan
from rnmt.planning.runconfig import load_record, record_path
from rnmt.train.settings import TrainSettings


def explain_run(root: Path, run: str, variant: str, settings: Sequence[str] = (), corpus: str = "", scale: str = "",
                config_file: str = "config.yaml", configfiles: Sequence[str] = (), show_all: bool = False) -> str:
    """The explanation of `variant` in run `run` (every corpus the run trains it on, or `corpus`): from the
    run's record where it is built (and no `configfiles` are given), else from `config_file` with run `run`
    at `scale` (default: `run` where it names a scale, else the config's)."""
    from snakemake.utils import update_config

    record = load_record(record_path(root / "results" / run))
    if record is not None and not configfiles:
        where = rel(record_path(root / "results" / run), root)
        config, said = record, f"its record {where}"
    else:
        config = load_yaml(root / config_file)
        for extra in configfiles:
            update_config(config, load_yaml(extra))         # nested keys merge, as with snakemake --configfile
        config["run"] = run
        config["scale"] = scale or (run if run in (config.get("scales") or {}) else config["scale"])
        where = config_file + "".join(f" + {f}" for f in configfiles)
        said = f"{where} at scale {config['scale']}" + (" (the run is not built yet)" if record is None else "")
    plan = Plan(config, root, where)
    found = [k for k in plan.variants if k[1] == variant and (not corpus or k[0] == corpus)]
    if not found:
        names = sorted({v for _, v in plan.variants})
        hint = closest(variant, names)
        raise ConfigError(f"no table of run {run} trains variant {variant!r}" + (f" (did you mean {hint[0]!r}?)"
                          if hint else "") + f"; its variants: {', '.join(names)}")
    out = []
    for key in found:                           # a variant of tables on two corpora (ATR's En-De and En-Fr)
        v = plan.variants[key]
        train = {k: x for k, x in asdict(TrainSettings()).items() if k != "seed"}
        defaults = {"model": model_defaults(v.model["arch"]),
                    "train": ("TrainSettings in rnmt.train.settings", train),
                    "decode": ("DecodeSettings in rnmt.decode.settings", asdict(DecodeSettings()))}
        resolved = {"model": {k: x for k, x in v.model.items() if k not in ("arch", "cell")}, "train": v.train,
                    "decode": v.decode}
        records = with_cell(explain(plan.layers[key], takes(v.model["arch"]), resolved, defaults),
                            plan.layers[key], v.model, defaults["model"][1])
        out.append(f"variant {variant} on corpus {key[0]}, run {plan.run} at scale {plan.scale} (config: {said}); "
                   f"architecture {v.model['arch']}{', cell ' + v.model['cell'] if 'cell' in v.model else ''}; "
                   f"trained by {rel(plan.owner[key], root)}; seeds {', '.join(map(str, v.seeds))}")
        out.append(render(records, list(settings), show_all))
    return "\n".join(out)


def with_cell(records: list[dict[str, Any]], layers: list[Layer], model: dict[str, Any],
              default: dict[str, Any]) -> list[dict[str, Any]]:
    """`records` with the row's cell: a system names it beside its architecture, outside the layers'
    sections, so without this the cell would read as the architecture's default (RNNSearch's 'gru' for an
    ATR row)."""
    if "cell" not in model:
        return records
    own = next(layer for layer in layers if layer.own)
    cell = {"section": "model", "key": "cell", "value": model["cell"], "from": own.where.format(s="cell"),
            "over": [f"default: {default['cell']!r}"] if "cell" in default else [], "dropped": False}
    rest = [r for r in records if not (r["section"] == "model" and r["key"] == "cell" and not r["dropped"])]
    return sorted(rest + [cell], key=lambda r: (SECTIONS.index(r["section"]), r["dropped"], r["key"]))
