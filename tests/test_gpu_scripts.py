"""The GPU scripts (benchmarks/gpu/) run only where a GPU is lent, a few minutes a session at most, so a
command in them that no longer parses, or Python in them that calls rnmt with an argument it no longer
takes, would spend a lease on an error. Checked here, without a GPU: every `python3 -m rnmt` line parses
with rnmt's own parser, every Python block and script compiles and calls the rnmt functions it imports with
arguments they take, and the shell scripts pass `bash -n`."""

from __future__ import annotations

import ast
import importlib
import inspect
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
