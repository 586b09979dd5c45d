"""Runs a workflow job's `python -m rnmt <command>` as `snakemake --sdm conda` would: with only the packages
of its rule's conda environment importable. Active where RNMT_ENV_GUARD names the guard's plan (written by
tests/envblock.py); every other Python process, Snakemake's own included, is left alone. An installed package
outside the environment is absent, as it would be there: importing it fails with ModuleNotFoundError, probing
for it finds nothing. RNMT_ENV_GUARD_LOG gets each guarded process's command and environment, and each
package it looked for in vain."""

import json
import os
import sys


def _log(record: dict) -> None:
    path = os.environ.get("RNMT_ENV_GUARD_LOG")
    if path:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"pid": os.getpid(), **record}) + "\n")


class _Hidden:
    """A meta-path finder that finds nothing of the blocked packages, so an import of one fails and a probe
    (importlib.util.find_spec) says it is absent, exactly as where the package is not installed."""

    def __init__(self, finder: object, command: str, blocked: set[str]) -> None:
        self.finder, self.command, self.blocked = finder, command, blocked

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
        if name.partition(".")[0] in self.blocked:
            _log({"command": self.command, "absent": name})
            return None
        find = getattr(self.finder, "find_spec", None)
        return find(name, path, target) if find else None

    def __getattr__(self, attr: str) -> object:
        return getattr(self.finder, attr)


def _install() -> None:
    plan_path = os.environ.get("RNMT_ENV_GUARD")
    argv = list(getattr(sys, "orig_argv", ()))
    if not plan_path or "-m" not in argv:
        return
    i = argv.index("-m")
    if argv[i + 1:i + 2] != ["rnmt"]:
        return
    words = [a for a in argv[i + 2:] if not a.startswith("-")]
    command = words[0] if words else ""
    with open(plan_path, encoding="utf-8") as f:
        plan = json.load(f)
    entry = plan["commands"].get(command)
    if entry is None:
        _log({"command": command, "env": None})
        return
    _log({"command": command, "env": entry["env"]})
    blocked = set(entry["blocked"])
    sys.meta_path[:] = [_Hidden(f, command, blocked) for f in sys.meta_path]


_install()
