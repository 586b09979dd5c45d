"""From a validated config and the experiment files to the jobs the Snakefile runs.

A *variant* is one trained configuration (architecture, cell, sizes, training and decoding
settings) on one corpus; it has a name that is unique across tables, so a table whose rows share
models with another table reuses them. Settings are the config's defaults overlaid with the row's
own `model`, `train` and `decode` entries.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rnmt.config import ConfigError, load_yaml, validate
from rnmt.data.registry import check_corpora
from rnmt.io import InputError

SPLITS = ("train", "dev", "test")
SIDES = ("src", "tgt")


@dataclass(frozen=True)
class Variant:
    name: str
    corpus: str
    model: dict[str, Any]
    train: dict[str, Any]
    decode: dict[str, Any]
    seeds: tuple[int, ...]

    def key(self) -> str:
        return json.dumps([self.corpus, self.model, self.train, self.decode], sort_keys=True)

    def train_settings(self, seed: int) -> str:
        return json.dumps({**self.train, "seed": seed}, sort_keys=True)

    def model_settings(self) -> str:
        return json.dumps(self.model, sort_keys=True)


@dataclass
class Row:
    system: str
    variant: str
    paper: dict[str, float | None]
    seeds: tuple[int, ...] = (1,)
    ensemble: bool = False          # one decoding with all seeds' models together

    def members(self) -> list[str]:
        """What gets decoded: each seed's model, or one ensemble of them all."""
        if self.ensemble:
            return ["ens" + "-".join(str(s) for s in self.seeds)]
        return [f"seed{s}" for s in self.seeds]


def member_seeds(member: str) -> list[int]:
    """`seed3` → [3]; `ens1-2` → [1, 2]."""
    if member.startswith("seed"):
        return [int(member[4:])]
    return [int(x) for x in member[3:].split("-")]


@dataclass
class Table:
    name: str
    path: Path
    title: str
    corpus: str
    testset: str
    metrics: list[str]
    rows: list[Row] = field(default_factory=list)
    paper: str = ""


def table_from_experiment(exp: dict[str, Any], path: Path) -> Table:
    """The table's layout (rows, metrics, paper numbers) from a validated experiment file."""
    rows = [Row(r["system"], r["variant"], r.get("paper") or {}, tuple(r["seeds"]), bool(r.get("ensemble", False)))
            for r in exp["rows"]]
    return Table(exp["table"], path, exp["title"], exp["corpus"], exp["testset"], exp["metrics"], rows,
                 exp.get("paper", ""))


def _overlay(base: dict[str, Any], over: dict[str, Any] | None) -> dict[str, Any]:
    return {**base, **(over or {})}


class Plan:
    def __init__(self, config: dict[str, Any], root: Path) -> None:
        self.root = Path(root)
        self.config = validate(config, self.root / "workflow/schemas/config.schema.yaml", "config")
        check_corpora(config, self.root)
        self.run = config["run"]
        self.tables: dict[str, Table] = {}
        self.variants: dict[str, Variant] = {}
        owner: dict[str, str] = {}
        exp_dir = self.root / "workflow/experiments"
        for name in config["tables"]:
            path = exp_dir / f"{name}.yaml"
            if not path.is_file():
                known = sorted(p.stem for p in exp_dir.glob("*.yaml"))
                raise ConfigError(f"config 'tables' names {name!r}, but {path} does not exist; "
                                  f"known tables: {', '.join(known)}")
            exp = validate(load_yaml(path), self.root / "workflow/schemas/experiment.schema.yaml", str(path))
            if exp["table"] != name:
                raise ConfigError(f"{path}: 'table' is {exp['table']!r} but the file is named {name}.yaml; "
                                  "make them equal")
            if exp["corpus"] not in config["corpora"]:
                raise ConfigError(f"{path}: corpus {exp['corpus']!r} is not in config 'corpora' "
                                  f"(defined: {', '.join(sorted(config['corpora']))})")
            table = table_from_experiment(exp, path)
            for row in exp["rows"]:
                model = {"arch": row["arch"], "cell": row["cell"], **_overlay(config["model"], row.get("model"))}
                v = Variant(row["variant"], exp["corpus"], model, _overlay(config["train"], row.get("train")),
                            _overlay(config["decode"], row.get("decode")), tuple(row["seeds"]))
                if v.name in self.variants and self.variants[v.name].key() != v.key():
                    raise ConfigError(f"variant {v.name!r} is defined differently in {owner[v.name]} and {path}; "
                                      "give one of them another name")
                old = self.variants.get(v.name)
                seeds = tuple(sorted(set(v.seeds) | set(old.seeds if old else ())))
                self.variants[v.name] = Variant(v.name, v.corpus, v.model, v.train, v.decode, seeds)
                owner.setdefault(v.name, str(path))
            self.tables[name] = table
        self.owner = owner

    def check_models(self) -> None:
        """Build every variant's model on PyTorch's meta device (no memory, no weights): an unknown cell or
        architecture, or incompatible settings, stops `rnmt check-config` before any job runs.

        Not part of the Snakefile's own check, which stays free of the torch import."""
        import torch

        from rnmt.models import build_model

        for v in self.variants.values():
            cfg = dict(v.model)
            try:
                with torch.device("meta"):
                    build_model(cfg.pop("arch"), 64, 64, **cfg)
            except InputError as e:
                raise ConfigError(f"{self.owner[v.name]}: variant {v.name!r}: {e}") from None

    # ---- paths, all under results/<run>/ -------------------------------------------------------
    @property
    def results(self) -> str:
        return f"results/{self.run}"

    def corpus(self, name: str) -> dict[str, Any]:
        """A config corpus entry; a registry corpus gets its languages from the corpus registry."""
        from rnmt.data.registry import registry_languages

        c = self.config["corpora"][name]
        return {**registry_languages(self.root, c["registry"]), **c} if "registry" in c else c

    def synth_args(self, name: str) -> list[str]:
        """Command-line arguments of `rnmt synth` for a synthetic corpus entry (a list: rules quote each)."""
        c = self.corpus(name)
        flags = [x for split, n in c.get("sizes", {}).items() for x in (f"--{split}", str(int(n)))]
        for key in ("seed", "language_seed", "max_words"):
            if key in c:
                flags += [f"--{key.replace('_', '-')}", str(int(c[key]))]
        return flags

    def metrics_paths(self, table: str) -> list[str]:
        t = self.tables[table]
        return [f"{self.results}/metrics/{r.variant}/{m}/{t.testset}.json" for r in t.rows for m in r.members()]

    def table_targets(self) -> list[str]:
        return [f"{self.results}/tables/{t}.{ext}" for t in self.tables for ext in ("csv", "md")]

    def plot_targets(self) -> list[str]:
        return [f"{self.results}/plots/{v.name}/seed{s}/curve.png" for v in self.variants.values() for s in v.seeds]
