"""The plan of the import guard in tests/envguard/: for each `rnmt` command the workflow's rules run, the
conda environment of those rules (envs/*.yaml) and the installed packages' top-level modules it lacks.
An environment holds what its yaml lists (pip among its conda packages), what those packages require (from
their installed metadata) and rnmt itself, which jobs run from the checkout's src/."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from functools import cache
from importlib import metadata
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
GUARD_DIR = Path(__file__).resolve().parent / "envguard"
_RULE = re.compile(r"^rule (\w+):\n(.*?)(?=^rule |\Z)", re.M | re.S)
_COMMAND = re.compile(r"(?:\brnmt|-m rnmt) ([a-z][a-z-]*)")


def env_specs(name: str) -> list[str]:
    deps = yaml.safe_load((ROOT / "envs" / f"{name}.yaml").read_text())["dependencies"]
    return next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)


def closure(specs: list[str]) -> set[str]:
    """The distributions `pip install specs` brings, as far as this machine has them installed."""
    todo = [Requirement(s) for s in specs]
    seen: set[tuple[str, frozenset[str]]] = set()
    names: set[str] = set()
    while todo:
        req = todo.pop()
        name, extras = canonicalize_name(req.name), frozenset(req.extras)
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        names.add(name)
        for line in dist.requires or []:
            sub = Requirement(line)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in (extras or {""})):
                todo.append(sub)
    return names


def rule_commands() -> dict[str, set[str]]:
    """rnmt command -> the environments of the rules that run it."""
    out: dict[str, set[str]] = {}
    for smk in sorted((ROOT / "workflow/rules").glob("*.smk")):
        for _, body in _RULE.findall(smk.read_text()):
            env = re.search(r'conda:\s*\n\s*"[^"]*envs/(\w+)\.yaml"', body)
            shell = body.split("shell:", 1)[1] if "shell:" in body else ""
            for command in _COMMAND.findall(shell):
                out.setdefault(command, set()).add(env.group(1) if env else "")
    return out


@cache
def _top_level_modules() -> dict[str, set[str]]:
    return {module: {canonicalize_name(d) for d in dists}
            for module, dists in metadata.packages_distributions().items()}


def blocked_modules(envs: set[str]) -> list[str]:
    """Top-level modules of installed packages missing from any one of `envs` (a command that rules of
    several environments run must work in each)."""
    allowed = {"rnmt", "pip"} | set.intersection(*(closure(env_specs(e)) for e in envs))
    return sorted(m for m, dists in _top_level_modules().items()
                  if not dists & allowed and not m.startswith("__editable__"))


@cache
def plan_file(folder: Path) -> Path:
    plan = {"commands": {command: {"env": "+".join(sorted(envs)), "blocked": blocked_modules(envs)}
                         for command, envs in rule_commands().items() if "" not in envs}}
    path = folder / "envguard-plan.json"
    path.write_text(json.dumps(plan, indent=1))
    return path


def guard_env(plan: Path, log: Path) -> dict[str, str]:
    """Environment variables that put a process's `python -m rnmt` children under the guard."""
    path = os.pathsep.join(p for p in (str(GUARD_DIR), os.environ.get("PYTHONPATH", "")) if p)
    return {"RNMT_ENV_GUARD": str(plan), "RNMT_ENV_GUARD_LOG": str(log), "PYTHONPATH": path}


def guarded(log: Path) -> list[dict]:
    return [json.loads(x) for x in log.read_text().splitlines()] if log.is_file() else []


def run_guarded(args: list[object], log: Path, plan_folder: Path) -> subprocess.CompletedProcess[str]:
    """`python -m rnmt ARGS` from the checkout's src/, under the guard."""
    env = {**os.environ, **guard_env(plan_file(plan_folder), log)}
    env["PYTHONPATH"] = os.pathsep.join((env["PYTHONPATH"], str(ROOT / "src")))
    return subprocess.run([sys.executable, "-m", "rnmt", *map(str, args)], env=env, capture_output=True, text=True)
