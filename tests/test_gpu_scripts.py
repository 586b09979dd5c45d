"""The GPU scripts (benchmarks/gpu/) run only where a GPU is lent, a few minutes a session at most, so a
command in them that no longer parses, or Python in them that calls rnmt with an argument it no longer
takes, would spend a lease on an error. Checked here, without a GPU: every `python3 -m rnmt` line parses
with rnmt's own parser, every Python block and script compiles and calls the rnmt functions it imports with
arguments they take, the shell scripts pass `bash -n`, and, with python3 and nvidia-smi replaced by stubs
that log their arguments, the scripts do their work in the order a lease's plan relies on."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from rnmt.cli import parser

ROOT = Path(__file__).resolve().parents[1]
GPU = ROOT / "benchmarks/gpu"
SCRIPTS = sorted(GPU.glob("*.sh"))


def joined(script: Path) -> str:
    """The script with its continued lines (a trailing backslash) joined."""
    return re.sub(r"\\\n\s*", " ", script.read_text())


def rnmt_commands(text: str) -> list[list[str]]:
    """The arguments of each `python3 -m rnmt ...` in `text`, up to the first redirection, pipe or closing
    parenthesis."""
    out = []
    for line in text.splitlines():
        if line.lstrip().startswith("#") or "python3 -m rnmt " not in line:
            continue
        lexer = shlex.shlex(line.split("python3 -m rnmt ", 1)[1], posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        args = []
        for token in lexer:
            if set(token) <= set("();<>|&"):
                break
            args.append(token)
        out.append(args)
    return out


def python_blocks(script: Path) -> dict[str, str]:
    """The Python of `script`'s quoted here-documents (<<'EOF' ... EOF) by where they start."""
    text = script.read_text()
    return {f"{script.name}:{text[:m.start()].count(chr(10)) + 1}": m.group(2)
            for m in re.finditer(r"<<'(\w+)'\n(.*?)\n\1\n", text, re.S)}


def wrong_calls(source: str) -> list[str]:
    """Calls of functions imported from rnmt (`from rnmt.x import f`) whose keyword arguments f does not take,
    and names imported from rnmt that are not there."""
    tree = ast.parse(source)
    imported: dict[str, Any] = {}
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "rnmt":
            module = importlib.import_module(node.module)
            for alias in node.names:
                if not hasattr(module, alias.name) and hasattr(module, "__path__") \
                        and importlib.util.find_spec(f"{node.module}.{alias.name}"):
                    importlib.import_module(f"{node.module}.{alias.name}")      # a submodule (`import graphs`)
                if not hasattr(module, alias.name):
                    problems.append(f"{node.module} has no {alias.name}")
                else:
                    imported[alias.asname or alias.name] = getattr(module, alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and callable(imported.get(node.func.id)):
            params = inspect.signature(imported[node.func.id]).parameters
            if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
                continue
            problems += [f"line {node.lineno}: {node.func.id}() takes no {k.arg}=" for k in node.keywords
                         if k.arg is not None and k.arg not in params]
    return problems


def test_the_gpu_scripts_parse_as_bash() -> None:
    assert SCRIPTS
    for script in SCRIPTS:
        r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert r.returncode == 0, f"{script.name}: {r.stderr}"


def test_every_rnmt_command_of_the_gpu_scripts_parses() -> None:
    commands = [(s.name, args) for s in SCRIPTS for args in rnmt_commands(joined(s))]
    assert {args[1] for _, args in commands if args[0] == "bench"} >= {"train", "decode", "decoder", "cells"}
    for name, args in commands:
        try:
            parser().parse_args(args)
        except SystemExit:
            pytest.fail(f"{name}: `rnmt {shlex.join(args)}` does not parse (rnmt's parser said why above)")


@pytest.mark.parametrize("where", sorted({k for s in SCRIPTS for k in python_blocks(s)}
                                         | {p.name for p in GPU.glob("*.py")}))
def test_the_python_of_the_gpu_scripts_calls_rnmt_as_it_is(where: str) -> None:
    if where.endswith(".py"):
        source = (GPU / where).read_text()
    else:
        source = next(b for s in SCRIPTS for k, b in python_blocks(s).items() if k == where)
    compile(source, where, "exec")
    assert wrong_calls(source) == [], where


def test_a_wrong_option_or_keyword_is_caught() -> None:
    """The checks above fail on what they are there for (an option or keyword that rnmt does not take)."""
    (args,) = rnmt_commands('timeout "$(within 9)" python3 -m rnmt bench decode --tf33 --out x > log 2>&1')
    assert args == ["bench", "decode", "--tf33", "--out", "x"]
    with pytest.raises(SystemExit):
        parser().parse_args(args)
    assert wrong_calls("from rnmt.bench.cells import bench\nbench(None, hiden=(1000,))\n") == \
        ["line 2: bench() takes no hiden="]
    assert wrong_calls("from rnmt.bench.cells import bnech\n") == ["rnmt.bench.cells has no bnech"]


def _stubbed(tmp_path: Path, fail: str = "") -> tuple[Path, dict[str, str]]:
    """A folder holding the GPU scripts and a PATH whose python3 and nvidia-smi only log their arguments (a
    python3 whose arguments hold `fail` exits 1), so a script's order of work runs here without a GPU."""
    work = tmp_path / "work"
    (work / "benchmarks/gpu").mkdir(parents=True)
    for script in SCRIPTS:
        (work / "benchmarks/gpu" / script.name).write_text(script.read_text())
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    log = tmp_path / "calls.log"
    for name in ("python3", "nvidia-smi"):
        stub = bin_ / name
        stub.write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\n'
                        f'case "$*" in *"{fail or "@@none@@"}"*) exit 1 ;; esac\n')
        stub.chmod(0o755)
    return work, {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}"}


def _benches(tmp_path: Path) -> list[str]:
    """What the stubbed python3 was asked to run, in order: `bench train|cells|decode|decoder` or a script."""
    calls = (tmp_path / "calls.log").read_text().splitlines()
    named = []
    for call in calls:
        if " -m rnmt bench " in call:
            named.append("bench " + call.split(" -m rnmt bench ")[1].split()[0])
        elif call == "python3 -":
            named.append("cells script")
        elif "train-atr.py" in call:
            named.append("atr script")
    return named


def test_the_engine_checks_run_in_the_order_checks_names_and_go_on_after_a_failure(tmp_path: Path) -> None:
    """A short second call of a lease runs what CHECKS names first first (what is left of the budget cuts the
    last), a check that fails leaves the next to run, each finished check is packed into bench.tgz, and a
    check's name that does not exist stops the call before any GPU time is spent."""
    work, env = _stubbed(tmp_path, fail="bench decode")
    out = tmp_path / "out"
    r = subprocess.run(["bash", "benchmarks/gpu/engine-checks.sh", str(out), "", "skip"], cwd=work,
                       env={**env, "CHECKS": "decode cells atr", "BUDGET": "300"}, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert _benches(tmp_path) == ["bench decode", "bench decoder", "cells script", "atr script"]
    assert "exit 1" in (out / "run.log").read_text() and (out / "bench.tgz").is_file()

    (tmp_path / "calls.log").unlink()
    wrong = subprocess.run(["bash", "benchmarks/gpu/engine-checks.sh", str(out), "", "skip"], cwd=work,
                           env={**env, "CHECKS": "cells decod"}, capture_output=True, text=True)
    assert wrong.returncode == 2 and "unknown check 'decod'" in wrong.stdout
    assert not (tmp_path / "calls.log").exists()                      # not even nvidia-smi ran


def test_a_lease_that_times_a_whole_table_restores_none_of_its_kept_rows(tmp_path: Path) -> None:
    """mini-on-one-gpu.sh with RESTORE=no asks collect.py for nothing and hands Snakemake the whole table to
    train (the issue's 8 minutes time all of ATR Table 4, though its seeds are kept); by default it asks
    collect.py which kept rows to restore, and where every row is kept (collect.py names no target) trains
    nothing and builds the table of the kept rows."""
    work, env = _stubbed(tmp_path)
    (work / "results").mkdir()
    out = tmp_path / "out"
    for restore, asked in (("no", False), ("yes", True)):
        (tmp_path / "calls.log").unlink(missing_ok=True)
        r = subprocess.run(["bash", "benchmarks/gpu/mini-on-one-gpu.sh", str(out), "", "60", "1", "atr-table4",
                            "no"], cwd=work, env={**env, "RESTORE": restore}, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        calls = (tmp_path / "calls.log").read_text().splitlines()
        assert any("collect.py" in c and "--restore-only" in c for c in calls) is asked, calls
        trained = [c.split()[3] for c in calls if c.startswith("python3 -m snakemake results/")]
        assert trained == (["results/mini-gpu/tables/partial/atr-table4.md"] if asked else
                           ["results/mini-gpu/tables/atr-table4.csv", "results/mini-gpu/tables/partial/atr-table4.md"])
