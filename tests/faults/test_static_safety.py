"""What the code itself promises: checkpoints load with weights_only=True, files are written through
the atomic writers, and workflow rules pass values to the shell only quoted."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from faults.faultlib import ROOT

pytestmark = pytest.mark.faults
SRC = ROOT / "src/rnmt"
# Files that open a file for writing themselves, and why that is safe.
DIRECT_WRITERS = {
    "io.py": "the atomic writers",
    "data/download.py": "appends to <name>.part, renamed only after the sha256 check (resumable downloads)",
    "train/records.py": "appends to train.jsonl after trimming it atomically; a log, never read as finished",
}


def calls(path: Path) -> list[ast.Call]:
    return [n for n in ast.walk(ast.parse(path.read_text(), str(path))) if isinstance(n, ast.Call)]


def name(call: ast.Call) -> str:
    f = call.func
    if isinstance(f, ast.Attribute):
        return f"{ast.unparse(f.value)}.{f.attr}"
    return ast.unparse(f)


def sources() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py"))


def test_every_torch_load_uses_weights_only(record) -> None:
    record.safety("torch.load(weights_only=True) at every call in src/")
    found = []
    for path in sources():
        for c in calls(path):
            if name(c) == "torch.load":
                kw = {k.arg: k.value for k in c.keywords}
                found.append(path)
                assert "weights_only" in kw and ast.literal_eval(kw["weights_only"]) is True, \
                    f"{path}:{c.lineno}: torch.load without weights_only=True"
    assert found, "the checkpoint loader was not found"


def test_files_are_written_atomically(record) -> None:
    record.safety("every file written in src/ goes through the atomic writers (temporary name, then rename)")
    for path in sources():
        rel = str(path.relative_to(SRC))
        if rel.startswith("bench/"):        # benchmark scripts write reports, not pipeline outputs
            continue
        for c in calls(path):
            n = name(c)
            assert not n.endswith((".write_text", ".write_bytes")), f"{rel}:{c.lineno}: {n} is not atomic"
            assert n not in ("torch.save",) or rel == "models/checkpoint.py", f"{rel}:{c.lineno}: torch.save"
            if n in ("open", "os.fdopen", "io.open") and len(c.args) > 1:
                mode = ast.literal_eval(c.args[1]) if isinstance(c.args[1], ast.Constant) else "?"
                if any(x in str(mode) for x in "wax?"):
                    assert rel in DIRECT_WRITERS, f"{rel}:{c.lineno}: open(..., {mode!r}): use rnmt.io.atomic_writer"
            if n.endswith((".savefig", ".to_csv", ".to_parquet")) and c.args:
                assert isinstance(c.args[0], ast.Name), f"{rel}:{c.lineno}: {n} to a path (write to an atomic file)"


SHELL = re.compile(r'shell:\s*\n((?:[ \t]+[rf]?"[^\n]*"[ \t]*\n)+)')
PLACEHOLDER = re.compile(r"(?<!\{)\{([^{}]+)\}(?!\})")


def test_rules_pass_values_to_the_shell_only_quoted(record) -> None:
    record.safety("every value in a workflow rule's shell command is quoted ({x:q})")
    rules = sorted((ROOT / "workflow/rules").glob("*.smk"))
    checked = 0
    for path in rules:
        for block in SHELL.findall(path.read_text()):
            for ph in PLACEHOLDER.findall(block):
                checked += 1
                assert ph.endswith(":q"), f"{path.name}: {{{ph}}} reaches the shell unquoted"
    assert checked > 50
