"""The config a run was built with, kept in its folder (results/<run>/config.yaml), so that every later
command on the run (one more table, the report, a bundle) builds with it without repeating `--config`.

A run's first build records the config it ran with (the `run_config` rule writes this file before any
other job). A later command on the same run takes the record; a `--config`/`--configfile` value that
contradicts it stops before any job starts, saying what differs and how to start a new run instead,
since Snakemake would otherwise retrain the run's models with other settings into the same folder.
What to build may change, and the change is recorded: `tables`, and a scale's `seeds` and `max_seeds`
(how many seeds a row trains: more seeds add models beside the finished ones, each trained as before,
so a run of one seed a row grows to three without retraining seed 1).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from rnmt.io import InputError, atomic_writer
from rnmt.settings import leaves

# What a command may change on a built run: which tables to build, and how many seeds a row (a seed's model
# trains the same whatever the count). Everything else shapes its results.
FREE_KEYS = ("run", "tables")
SEED_KEYS = ("seeds", "max_seeds")          # under scales.<scale>
RECORD = "config.yaml"
RUN_NAME = re.compile(r"(?![.-])[A-Za-z0-9_.-]+")      # config.schema.yaml's pattern for `run`
_MISSING = object()


def record_path(results: str | Path) -> Path:
    return Path(results) / RECORD


def _get(d: Any, path: tuple[str, ...]) -> Any:
    for k in path:
        if not isinstance(d, Mapping) or k not in d:
            return _MISSING
        d = d[k]
    return d


def _free(path: tuple[str, ...]) -> bool:
    return path[0] in FREE_KEYS or (len(path) == 3 and path[0] == "scales" and path[2] in SEED_KEYS)


def _set(d: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for k in path[:-1]:
        d = d.setdefault(k, {})
    d[path[-1]] = copy.deepcopy(value)


def _show(v: Any) -> str:
    return "(not set)" if v is _MISSING else json.dumps(v)


def load_record(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        record = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: the run's config record is not readable YAML ({e}); restore it, or delete "
                         "it to let this command's config become the run's record") from None
    if not isinstance(record, dict):
        raise InputError(f"{path}: the run's config record is not a mapping; restore it, or delete it to let "
                         "this command's config become the run's record")
    return record


def resolve(config: Mapping[str, Any], explicit: Mapping[str, Any], results_root: str | Path = "results"
            ) -> tuple[dict[str, Any], list[str]]:
    """The config this command builds with, and notes for the user.

    `config` is Snakemake's (config.yaml with the command's overrides applied), `explicit` the
    command's own overrides (`--configfile` and `--config`, merged). Without a record, `config` as it
    is. With one, the record, with `tables` and a scale's seed counts taken from the command when it
    names them; an explicit value that differs from the record raises InputError naming each difference
    and the fix; a config.yaml value that changed since the run was built is kept out, with a note
    saying so.
    """
    run = str(config.get("run"))
    if not RUN_NAME.fullmatch(run):           # the schema's message names the bad run name
        return dict(config), []
    path = record_path(Path(results_root, run))
    record = load_record(path)
    if record is None:
        return dict(config), []
    differs = [(p, _get(record, p), v) for p, v in leaves(explicit)
               if not _free(p) and _get(record, p) != v]
    if differs:
        lines = "\n".join(f"  {'.'.join(p)}: the run has {_show(was)}, this command gives {_show(now)}"
                          for p, was, now in differs)
        raise InputError(
            f"results/{run} was built with another config (its record: {path}):\n{lines}\n"
            f"Its models were trained with the recorded settings; building with these would retrain them into "
            f"the same folder. To build with these settings, start a new run: add run=<new name> to --config "
            f"(its results go to results/<new name>/). To continue this run, leave these keys out (the record "
            f"supplies them). To replace the run, delete results/{run} first.")
    resolved = copy.deepcopy(record)
    for p, v in leaves(explicit):
        if _free(p):
            _set(resolved, p, v)
    resolved["run"] = config.get("run", record.get("run"))
    notes = [f"config.yaml's {'.'.join(p)} is {_show(v)} but results/{run} was built with {_show(_get(record, p))}"
             for p, v in leaves({k: v for k, v in config.items() if k not in FREE_KEYS})
             if _get(record, p) != v and _get(explicit, p) is _MISSING]
    if notes:
        notes = [*notes, f"results/{run} keeps the config it was built with ({path}); to build with config.yaml's "
                         "values, start a new run (--config run=<new name>); a scale's seeds and max_seeds may be "
                         "given to this run instead (--config \"scales={<scale>: {seeds: N, max_seeds: N}}\")"]
    return resolved, notes


def update_record(results: str | Path, config: Mapping[str, Any]) -> Path | None:
    """Record `config` as the run's when the run has no record yet; add tables it builds that the record
    lacks, and take its scale's seed counts. Called when a build starts (Snakefile's onstart: never by a
    dry run). The path if written."""
    path = record_path(results)
    record = load_record(path)
    if record is not None:
        tables = list(dict.fromkeys([*(record.get("tables") or []), *(config.get("tables") or [])]))
        updated = copy.deepcopy(record)
        if tables or "tables" in record:
            updated["tables"] = tables
        scale = config.get("scale")
        for key in SEED_KEYS:
            value = _get(config, ("scales", scale, key))
            if value is not _MISSING:
                _set(updated, ("scales", scale, key), value)
        if updated == record:
            return None
        config = updated
    write_record(path, config)
    return path


def write_record(path: str | Path, config: Mapping[str, Any]) -> None:
    run = config.get("run")
    head = (f"# The config results/{run} was built with. Every later command on this run (snakemake with\n"
            f"# --config run={run}, or without --config when config.yaml's run is {run}) builds with it; a\n"
            "# --config that contradicts it is refused. Start a new run to build with other settings.\n")
    with atomic_writer(path) as f:
        f.write(head + yaml.safe_dump(dict(config), sort_keys=False, allow_unicode=True))
