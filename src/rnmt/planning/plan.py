"""From a validated config and the experiment files to the jobs the Snakefile runs.

A *variant* is one trained configuration (architecture, cell, sizes, training and decoding settings)
on one corpus; it is named by (corpus, name), so a system shared by several tables on the same corpus
is trained once. Systems are defined in the papers' systems files (rnmt.planning.systems) or in a row. A row's
settings are, from weakest to strongest: the config's `model` / `train` / `decode` defaults, the
config's `scales.<scale>` entries, the paper's `settings.<scale>` (its systems file), the table's
`settings.<scale>`, the system's own `model` / `train` / `decode`, its `scales.<scale>`, and the
config's `override`.

The scale also picks each table's corpus: at `demo` every table runs on `scales.demo.corpus` (the
synthetic pair); at `mini` on the Multi30k pair `scales.mini.corpus` maps the paper's corpus to; at `small` on
the paper's corpus with `scales.small.corpora` applied (a cap on the
training pairs, fewer BPE merges), named `<corpus>-small`; at `paper` on the paper's corpus.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rnmt.config import ConfigError, load_yaml, validate
from rnmt.data.registry import check_corpora, registry_corpus_ids
from rnmt.decode.settings import DEFAULT as DECODE_DEFAULT
from rnmt.decode.settings import LEFT_OUT_AT_DEFAULT, DecodeSettings
from rnmt.io import InputError
from rnmt.models.catalog import check_built
from rnmt.planning.experiments import check_experiment, check_row_models, takes
from rnmt.planning.layers import Layer, rel, resolve, setting_layers
from rnmt.planning.systems import load_systems
from rnmt.planning.table import Table, row_seeds, table_from_experiment
from rnmt.settings import closest
from rnmt.train.settings import complete

SPLITS = ("train", "dev", "test")
SIDES = ("src", "tgt")
RESOURCES = {
    "train": {"gpu": 0, "mem_mb": 4000, "runtime": 24 * 60},
    "translate": {"gpu": 0, "mem_mb": 4000, "runtime": 4 * 60},
    "data": {"gpu": 0, "mem_mb": 4000, "runtime": 4 * 60, "threads": 1},
}


@dataclass(frozen=True)
class Variant:
    name: str
    corpus: str
    model: dict[str, Any]
    train: dict[str, Any]
    decode: dict[str, Any]
    seeds: tuple[int, ...]
    labels: str | None = None               # gold | stanza: source dependency labels as a second factor

    def key(self) -> str:
        return json.dumps([self.corpus, self.model, self.train, self.decode, self.labels], sort_keys=True)

    def train_settings(self, seed: int) -> str:
        return json.dumps({**self.train, "seed": seed}, sort_keys=True)

    def model_settings(self) -> str:
        return json.dumps(self.model, sort_keys=True)

    def decode_settings(self) -> str:
        """The search's settings as `rnmt translate --settings` takes them (threads are the job's), without the
        later ones at their defaults (decode/settings.py `LEFT_OUT_AT_DEFAULT`: the translate jobs of runs built
        before they existed keep their parameters, so Snakemake does not decode them again)."""
        return json.dumps({k: v for k, v in self.decode.items() if k != "threads" and not (
            k in LEFT_OUT_AT_DEFAULT and v == getattr(DECODE_DEFAULT, k))}, sort_keys=True)


def _differing(a: Variant, b: Variant) -> str:
    """The settings in which two definitions of one variant differ, as `section.key: a → b`."""
    out = []
    for section in ("model", "train", "decode"):
        x, y = getattr(a, section), getattr(b, section)
        out += [f"{section}.{k}: {x.get(k)!r} → {y.get(k)!r}" for k in sorted(set(x) | set(y)) if x.get(k) != y.get(k)]
    if a.labels != b.labels:
        out.append(f"labels: {a.labels!r} → {b.labels!r}")
    return ", ".join(out) or "their settings"


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


class Plan:
    def __init__(self, config: dict[str, Any], root: Path, config_where: str = "config.yaml") -> None:
        self.root = Path(root)
        self.config = validate(config, self.root / "workflow/schemas/config.schema.yaml", "config")
        self.config_where = config_where
        self.run = config["run"]
        self.scale = config["scale"]
        self.scale_settings: dict[str, Any] = (config.get("scales") or {}).get(self.scale) or {}
        self.max_seeds: int | None = self.scale_settings.get("max_seeds")
        self.seeds: int | None = self.scale_settings.get("seeds")        # at least this many a row
        # how the run's computations choose among their paths (rnmt.machine.fastpath): measured once per run and
        # kept in results/<run>/fast_paths.json, or each computation's default (the demo: no timing decides)
        self.fast_paths: str = self.scale_settings.get("fast_paths", "measure")
        self.corpora_config: dict[str, Any] = dict(config["corpora"])
        self.tables: dict[str, Table] = {}
        self.variants: dict[tuple[str, str], Variant] = {}
        owner: dict[tuple[str, str], str] = {}                  # the first table that trains a variant
        self.defined_in: dict[tuple[str, str], str] = {}        # the file that defines its system
        self.layers: dict[tuple[str, str], list[Layer]] = {}    # where its settings come from (rnmt explain)
        exp_dir = self.experiments_dir = Path(config.get("experiments_dir") or self.root / "workflow/experiments")
        self.systems_dir = Path(config.get("systems_dir") or self.root / "workflow/systems")
        systems = load_systems(self.systems_dir, self.root / "workflow/schemas")
        missing = [name for name in config["tables"] if not (exp_dir / f"{name}.yaml").is_file()]
        if missing:
            raise ConfigError(f"config 'tables' names {self._unknown(missing)}, but {exp_dir} has no such experiment "
                              f"file{'s' if len(missing) > 1 else ''}; known tables: {', '.join(self._shipped())}")
        for name in config["tables"]:
            path = exp_dir / f"{name}.yaml"
            raw = validate(load_yaml(path), self.root / "workflow/schemas/experiment.schema.yaml", str(path))
            exp = systems.resolve(raw, path)
            check_experiment(exp, path)
            check_row_models(exp, path)
            corpus = self._table_corpus(exp, path) if exp.get("kind", "translation") == "translation" else None
            table = table_from_experiment(exp, path, corpus, self.max_seeds, self.seeds)
            for i, row in enumerate(exp["rows"]):
                if "arch" not in row or not table.rows[i].trained:
                    continue
                paper = raw.get("systems")
                layers = setting_layers(
                    config, self.scale, row, systems.settings.get(paper) or {},
                    rel(systems.paper_files[paper], self.root) if paper else "(no systems file)",
                    raw.get("settings") or {}, rel(path, self.root),
                    f"{rel(systems.system_files[row['variant']], self.root)} systems.{row['variant']}"
                    if row["variant"] in systems.definitions else f"{rel(path, self.root)} rows[{i}]",
                    self.config_where)
                v = self._variant(exp, row, corpus, layers)
                k = (v.corpus, v.name)
                if k in self.variants and self.variants[k].key() != v.key():
                    raise ConfigError(f"variant {v.name!r} on corpus {v.corpus} is defined differently in "
                                      f"{owner[k]} and in {path} ({_differing(self.variants[k], v)}); rows "
                                      "that share a variant name share their models: give one of them another "
                                      "name")
                old = self.variants.get(k)
                seeds = tuple(sorted(set(v.seeds) | set(old.seeds if old else ())))
                self.variants[k] = Variant(v.name, v.corpus, v.model, v.train, v.decode, seeds, v.labels)
                owner.setdefault(k, str(path))
                self.layers.setdefault(k, layers)
                self.defined_in.setdefault(k, str(systems.system_files.get(v.name, path)))
            self.tables[name] = table
        self.owner = owner
        check_corpora({**config, "corpora": self.corpora_config}, self.root)

    # ---- scales ------------------------------------------------------------------------------------
    def _table_corpus(self, exp: dict[str, Any], path: Path) -> str:
        """The corpus a table runs on at this scale (added to corpora_config where it is implicit): the
        scale's corpus (one for every table, or one per paper corpus), else the paper's, capped by the
        scale's `corpora` settings where it has them."""
        paper_corpus = exp["corpus"]
        chosen = self.scale_settings.get("corpus")
        if isinstance(chosen, dict):
            chosen = chosen.get(paper_corpus)
        if chosen:
            return self._known_corpus(str(chosen), f"config scales.{self.scale}.corpus")
        caps = self.scale_settings.get("corpora")
        if not caps:
            return self._known_corpus(paper_corpus, str(path))
        base = self.corpora_config.get(paper_corpus) or {"registry": self._known_corpus(paper_corpus, str(path), False)}
        name = f"{paper_corpus}-{self.scale}"
        self.corpora_config.setdefault(name, _deep_merge(base, caps))
        return name

    def _known_corpus(self, name: str, where: str, add: bool = True) -> str:
        """`name` if it is a config corpus, or a registry corpus (then added to corpora_config if `add`)."""
        if name not in self.corpora_config:
            if name not in registry_corpus_ids(self.root):
                raise ConfigError(f"{where}: corpus {name!r} is neither in config 'corpora' (defined: "
                                  f"{', '.join(sorted(self.corpora_config))}) nor a corpus of workflow/corpora.yaml "
                                  f"(known: {', '.join(registry_corpus_ids(self.root))})")
            if add:
                self.corpora_config[name] = {"registry": name}
        return name

    def _variant(self, exp: dict[str, Any], row: dict[str, Any], corpus: str, layers: list[Layer]) -> Variant:
        parts = resolve(layers, takes(row["arch"]))
        model = {"arch": row["arch"], **({"cell": row["cell"]} if "cell" in row else {}), **parts["model"]}
        try:
            train = complete(parts["train"])
            decode = asdict(DecodeSettings.from_dict(parts["decode"]))
            if decode["average_last"] > train["keep_checkpoints"]:
                raise InputError(f"decode average_last: {decode['average_last']} averages the last validations' "
                                 f"checkpoints, but training keeps {train['keep_checkpoints']} (train "
                                 f"keep_checkpoints); set keep_checkpoints: {decode['average_last']} or more in the "
                                 "row's train settings")
        except InputError as e:
            raise ConfigError(f"table {exp['table']}, row {row['system']!r} (variant {row['variant']}): {e}") from None
        return Variant(row["variant"], corpus, model, train, decode,
                       row_seeds(row, self.max_seeds, self.seeds), row.get("labels"))

    def variant(self, corpus: str, name: str) -> Variant:
        try:
            return self.variants[(corpus, name)]
        except KeyError:
            raise ConfigError(f"no table of this run trains variant {name!r} on corpus {corpus!r}") from None

    def resources(self, group: str) -> dict[str, int]:
        """The job resources of a rule group at this scale (config scales.<scale>.resources)."""
        own = (self.scale_settings.get("resources") or {}).get(group) or {}
        return {**RESOURCES[group], **own}

    def check_models(self) -> None:
        """Build every variant's model on PyTorch's meta device (no memory, no weights): an unknown cell or
        architecture, or incompatible settings, stops `rnmt check-config` and `snakemake` before any job runs.
        Settings that built before with this rnmt source and torch version are not built again
        (rnmt.models.catalog)."""
        cfgs = {}
        for key, v in self.variants.items():
            cfg = dict(v.model)
            if isinstance(cfg.get("factors"), dict) and "vocab_sizes" not in cfg["factors"]:
                # the label vocabulary's size is only known from its file; any size checks the shapes
                cfg["factors"] = {**cfg["factors"], "vocab_sizes": [64] * len(cfg["factors"].get("dims", []))}
            cfgs[key] = cfg

        def build_each() -> None:
            from rnmt.models.registry import check_model

            for (corpus, name), cfg in cfgs.items():
                settings = dict(cfg)
                try:
                    check_model(settings.pop("arch"), **settings)
                except InputError as e:
                    raise ConfigError(f"{self.defined_in[(corpus, name)]}: variant {name!r}: {e}") from None

        check_built(list(cfgs.values()), build_each)

    # ---- paths, all under results/<run>/ -------------------------------------------------------
    @property
    def results(self) -> str:
        return f"results/{self.run}"

    def corpus(self, name: str) -> dict[str, Any]:
        """A corpus entry; a registry corpus gets its languages from the corpus registry."""
        from rnmt.data.registry import registry_languages

        c = self.corpora_config[name]
        return {**registry_languages(self.root, c["registry"]), **c} if "registry" in c else c

    def synth_args(self, name: str) -> list[str]:
        """Command-line arguments of `rnmt synth` for a synthetic corpus entry (a list: rules quote each)."""
        c = self.corpus(name)
        flags = [x for split, n in c.get("sizes", {}).items() for x in (f"--{split}", str(int(n)))]
        for key in ("seed", "language_seed", "max_words"):
            if key in c:
                flags += [f"--{key.replace('_', '-')}", str(int(c[key]))]
        return flags

    def table(self, name: str) -> Table:
        """A table of this run; a target of a table that `tables:` does not list says how to add it."""
        if name in self.tables:
            return self.tables[name]
        if name in self._shipped():
            fix = (f"add it to `tables:` in your config, or run it alone with "
                   f"`--config tables='[{name}]' run={self.run}`")
        else:
            fix = (f"{self.experiments_dir} has no {self._unknown([name])}.yaml; the tables there: "
                   f"{', '.join(self._shipped())}")
        raise ConfigError(f"table {name!r} is not in this run's `tables:` (run {self.run!r} builds: "
                          f"{', '.join(self.tables) or 'none'}); {fix}")

    def _shipped(self) -> list[str]:
        return sorted(p.stem for p in self.experiments_dir.glob("*.yaml"))

    def _unknown(self, names: list[str]) -> str:
        """Table names without an experiment file, each with the closest one that exists."""
        known = self._shipped()
        return ", ".join(f"{n!r} (did you mean {closest(n, known)[0]!r}?)" if closest(n, known) else repr(n)
                         for n in names)

    def metrics_paths(self, table: str) -> list[str]:
        t = self.table(table)
        return [f"{self.results}/metrics/{t.corpus}/{r.variant}/{m}/{t.testset}.json"
                for r in t.trained_rows for m in r.members()]

    def gates_paths(self, table: str) -> list[str]:
        """ATR Figure 3's gate statistics: one file per trained seed of each row with a gate metric."""
        t = self.table(table)
        if "gate_pearson_r" not in t.metrics and (t.figure or {}).get("kind") != "gates":
            return []
        return [f"{self.results}/analysis/{t.corpus}/{r.variant}/seed{s}/gates.{t.testset}.json"
                for r in t.trained_rows if not r.ensemble for s in r.seeds]

    def cell_count_paths(self, table: str) -> list[str]:
        """ATR Table 1's counts: one file per cell of a table of kind cells."""
        t = self.table(table)
        cells = dict.fromkeys(r.cell for r in t.rows if r.cell) if t.kind == "cells" else {}
        return [f"{self.results}/analysis/cells/{c}.json" for c in cells]

    def data_report_paths(self, table: str) -> list[str]:
        """The preparing report (prepare.json, with the data's warnings) of the corpus a table trains on."""
        t = self.table(table)
        return [f"{self.results}/data/{t.corpus}/prepare.json"] if t.corpus and t.trained_rows else []

    def train_logs(self, table: str) -> list[str]:
        t = self.table(table)
        return [f"{self.results}/models/{t.corpus}/{r.variant}/seed{s}/train.jsonl"
                for r in t.trained_rows if not r.ensemble for s in r.seeds]

    def table_targets(self) -> list[str]:
        out = [f"{self.results}/tables/{t}.{ext}" for t in self.tables
               for ext in ("csv", "md", "tex", "html", "claims.csv")]
        return out + [f"{self.results}/figures/{t}.{ext}" for t, tab in self.tables.items() if tab.figure
                      for ext in ("png", "pdf")]

    def plot_targets(self) -> list[str]:
        """One learning-curve figure per table with trained rows."""
        return [f"{self.results}/plots/{t}.curves.{ext}" for t, tab in self.tables.items() if tab.trained_rows
                for ext in ("png", "pdf")]

    def built_targets(self) -> list[str]:
        """What `snakemake --report` shows: each table, figure and learning-curve plot of this run whose
        files all exist (a report on a run that built one table shows that table)."""
        groups = [[p for p in self.table_targets() if p.startswith(f"{self.results}/{kind}/{t}.")]
                  for t in self.tables for kind in ("tables", "figures")]
        groups += [[p for p in self.plot_targets() if p.startswith(f"{self.results}/plots/{t}.curves.")]
                   for t in self.tables]
        runs = [f"{self.results}/runs.csv"]
        return [p for g in [*groups, runs] if g and all(Path(p).is_file() for p in g) for p in g]

    def all_metrics_paths(self) -> list[str]:
        return sorted({p for t in self.tables for p in self.metrics_paths(t)})
