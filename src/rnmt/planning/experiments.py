"""What an experiment or systems file must hold beyond what its schema says: complete rows, an existing
baseline, a name that matches the file, claims about its own rows and metrics, and model settings that
each system's architecture takes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rnmt.config import ConfigError, closest


def check_experiment(exp: dict[str, Any], path: Path) -> None:
    """What the schema cannot say: rows to train are complete, the baseline exists, names agree."""
    if exp["table"] != path.stem:
        raise ConfigError(f"{path}: 'table' is {exp['table']!r} but the file is named {path.name}; make them equal")
    systems = [r["system"] for r in exp["rows"]]
    if exp.get("baseline") and exp["baseline"] not in systems:
        raise ConfigError(f"{path}: baseline {exp['baseline']!r} is not a row's system; systems: {', '.join(systems)}")
    if any(m.endswith("_ratio") for m in exp["metrics"]) and not exp.get("baseline"):
        raise ConfigError(f"{path}: a *_ratio metric needs 'baseline: <system>' (the row the speeds divide by)")
    kind = exp.get("kind", "translation")
    for i, r in enumerate(exp["rows"]):
        where = f"{path}: rows[{i}] ({r['system']!r})"
        if kind == "cells":
            if "cell" not in r:
                raise ConfigError(f"{where}: a cells table counts a cell; give 'cell'")
            continue
        if r.get("ensemble") and len(r.get("seeds", [])) < 2:
            raise ConfigError(f"{where}: 'ensemble: true' decodes the models of several seeds as one; give the row "
                              "two or more seeds, or drop 'ensemble'")
        if "arch" in r and "variant" not in r:
            raise ConfigError(f"{where}: a row to train needs 'variant' (a name for its models)")
        if "variant" not in r and not r.get("why_not"):
            raise ConfigError(f"{where}: give 'variant' (a system of workflow/systems/, or one the row defines "
                              "with 'arch') to train this row, or 'why_not' to say why the table shows only the "
                              "paper's number")
    if kind == "translation" and "corpus" not in exp:
        raise ConfigError(f"{path}: missing key 'corpus' (the paper's corpus, e.g. atr-wmt14-en-de)")
    check_claims(exp, path)


def check_claims(exp: dict[str, Any], path: Path) -> None:
    """Each claim compares rows of the table on metrics the table shows; `within` has a margin."""
    systems = [r["system"] for r in exp["rows"]]
    for k, c in enumerate(exp.get("claims") or [], 1):
        where = f"{path}: claims[{k - 1}] ({c['says']!r})"
        for metric in [c["metric"]] if isinstance(c["metric"], str) else c["metric"]:
            if metric not in exp["metrics"]:
                raise ConfigError(f"{where}: metric {metric!r} is not one of the table's metrics "
                                  f"({', '.join(exp['metrics'])}); a claim is checked on a column the table shows")
        for name in [c["row"], *([c["than"]] if isinstance(c["than"], str) else c["than"])]:
            if name not in systems:
                hint = closest(name, systems)
                raise ConfigError(f"{where}: no row {name!r} in the table" + (f" (did you mean {hint[0]!r}?)" if hint
                                  else "") + f"; rows: {', '.join(systems)}")
        if c["kind"] == "within" and not c.get("margin"):
            raise ConfigError(f"{where}: a `within` claim needs `margin` (the largest difference, in the metric's "
                              "units)")


def takes(arch: str) -> Callable[[str], bool]:
    """Whether architecture `arch` takes a model setting: shared settings (config, scale, the table's for
    all its rows, override) reach a row only where its architecture takes them (the transformer has no
    `emb`, most recurrent ones no `tie_output`). A row's own settings are never dropped, so a typo there
    still stops the run."""
    from rnmt.models.catalog import architectures

    names = architectures().get(arch)
    return lambda key: names is None or key in names


def check_row_models(exp: dict[str, Any], path: Path) -> None:
    """Each trained row's own model settings (also those of its `scales:`) are ones its architecture takes.

    Settings for all rows (config, scale, the table's) are filtered per architecture instead, so a row's
    own settings are the ones that can name a setting its architecture does not have.
    """
    for i, row in enumerate(exp["rows"]):
        if "arch" in row and exp.get("kind", "translation") == "translation":
            check_definition(row, f"{path}: rows[{i}] ({row['system']!r})")


def check_definition(definition: dict[str, Any], where: str) -> None:
    """A system's architecture exists and its model settings (also those of its `scales:`) are ones the
    architecture takes; `where` names the definition in the error."""
    from rnmt.models.catalog import architectures

    known = architectures()
    arch = definition["arch"]
    if arch not in known:
        hint = closest(arch, sorted(known))
        raise ConfigError(f"{where}: unknown architecture {arch!r}" + (f" (did you mean {hint[0]!r}?)" if hint
                          else "") + f"; valid architectures: {', '.join(sorted(known))}")
    names = known[arch]
    if names is None:
        return
    blocks = [("model", definition.get("model"))] + [(f"scales.{sc}.model", (v or {}).get("model"))
                                                      for sc, v in (definition.get("scales") or {}).items()]
    for where_in, block in blocks:
        for key in sorted(set(block or {}) - names):
            hint = closest(key, sorted(names))
            raise ConfigError(f"{where}: {where_in}.{key} is not a setting of architecture {arch!r}"
                              + (f" (did you mean {hint[0]!r}?)" if hint else "")
                              + f"; its settings: {', '.join(sorted(names))}")
