"""The papers' systems, each defined once (workflow/systems/<paper>.yaml), and what a table's rows become
with them.

A systems file holds one paper's settings per scale (those its tables share) and its systems: a name (the
`variant` of the rows that train it, and the folder its models are in) with the architecture, cell and
settings of its own. A table names the paper whose settings it takes (`systems: atr`) and may put its own
`settings` over them; a row names a system of any systems file by `variant`, or defines one in place with
`arch` (a table of your own, a new cell). `resolve` turns a table into the self-contained form the plan
reads: the paper's settings under the table's, and each named system's definition in its rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rnmt.config import ConfigError, closest, load_yaml, validate
from rnmt.planning.experiments import check_definition

DEFINITION = ("arch", "cell", "labels", "model", "train", "decode", "scales")     # what a system defines


@dataclass
class Systems:
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)      # paper → settings per scale
    definitions: dict[str, dict[str, Any]] = field(default_factory=dict)   # system name → its definition
    paper_files: dict[str, Path] = field(default_factory=dict)             # paper → its file
    system_files: dict[str, Path] = field(default_factory=dict)            # system name → its file
    folder: Path = Path("workflow/systems")

    def resolve(self, exp: dict[str, Any], path: Path) -> dict[str, Any]:
        """The experiment `exp` (read from `path`) with its paper's settings under its own and each row that
        names a system completed with the system's definition."""
        paper = exp.get("systems")
        if paper is not None and paper not in self.settings:
            raise ConfigError(f"{path}: 'systems: {paper}' names no systems file; {self.folder} holds "
                              f"{', '.join(sorted(self.settings)) or 'none'} (one <paper>.yaml each; config "
                              "systems_dir names another folder)")
        settings = _merge_settings(self.settings.get(paper) or {}, exp.get("settings") or {})
        rows = [self._row(row, i, path) for i, row in enumerate(exp["rows"])] \
            if exp.get("kind", "translation") == "translation" else exp["rows"]
        return {**exp, "settings": settings, "rows": rows}

    def _row(self, row: dict[str, Any], i: int, path: Path) -> dict[str, Any]:
        name = row.get("variant")
        if name is None:
            return row
        where = f"{path}: rows[{i}] ({row.get('system')!r})"
        if name in self.definitions:
            own = [k for k in DEFINITION if k in row]
            if own:
                raise ConfigError(f"{where}: variant {name!r} is a system of {self.system_files[name]}, which "
                                  f"defines it; remove {', '.join(own)} from the row, or give the row another variant "
                                  "name to define a system of its own")
            return {**row, **self.definitions[name]}
        if "arch" not in row:
            hint = closest(name, sorted(self.definitions))
            raise ConfigError(f"{where}: variant {name!r} is no system of the systems files"
                              + (f" (did you mean {hint[0]!r}?)" if hint else "")
                              + "; name one of theirs, or give the row 'arch' (and 'cell', 'model', ...) to "
                              "define it in place")
        return row


def _merge_settings(under: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Per scale and per section (model, train, decode), `over`'s keys over `under`'s."""
    out: dict[str, Any] = {}
    for scale in dict.fromkeys([*under, *over]):
        a, b = under.get(scale) or {}, over.get(scale) or {}
        out[scale] = {s: {**(a.get(s) or {}), **(b.get(s) or {})} for s in dict.fromkeys([*a, *b])}
    return out


def load_systems(folder: Path, schemas: Path) -> Systems:
    """Every systems file of `folder`, checked against the schema in `schemas`; a system name defined in two
    files, or a model setting its architecture does not take, is refused naming the file."""
    out = Systems(folder=Path(folder))
    for path in sorted(Path(folder).glob("*.yaml")):
        doc = validate(load_yaml(path), schemas / "systems.schema.yaml", str(path))
        out.settings[path.stem] = doc.get("settings") or {}
        out.paper_files[path.stem] = path
        for name, definition in doc["systems"].items():
            if name in out.definitions:
                raise ConfigError(f"system {name!r} is defined in {out.system_files[name]} and in {path}; a system is "
                                  "defined once: remove one, or rename it")
            check_definition(definition, f"{path}: systems.{name}")
            out.definitions[name] = definition
            out.system_files[name] = path
    return out
