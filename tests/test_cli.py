"""The command line as a person types it: --version, -q before or after the subcommand, log lines
without placeholders."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rnmt import __version__, cli

ROOT = Path(__file__).resolve().parents[1]


def rnmt(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "rnmt", *args], capture_output=True, text=True, env=env, timeout=120)


def test_version_names_the_release_and_the_commit(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith(f"rnmt {__version__}")
    if (ROOT / ".git").exists():
        assert " (git " in out


@pytest.mark.parametrize("where", ["before", "after"])
def test_quiet_before_or_after_the_subcommand_leaves_only_warnings(tmp_path: Path, where: str) -> None:
    text = tmp_path / "t.txt"
    text.write_text("a b c\na b\n")
    args = ["vocab", str(text), str(tmp_path / "v.txt")]
    loud = rnmt(*args)
    assert loud.returncode == 0 and " INFO: " in loud.stderr
    quiet = rnmt(*(["-q", *args] if where == "before" else [*args, "-q"]))
    assert quiet.returncode == 0 and " INFO: " not in quiet.stderr, quiet.stderr


def test_score_logs_no_placeholder_for_a_score_it_did_not_compute(tmp_path: Path) -> None:
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text("the house is red .\n")
    ref.write_text("the house is red .\n")
    got = rnmt("score", "--hyp", str(hyp), "--ref", str(ref), "--output", str(tmp_path / "m.json"))
    assert got.returncode == 0, got.stderr
    assert "BLEU 100.00, chrF 100.00" in got.stderr and "nan" not in got.stderr


def test_every_option_of_every_command_says_what_it_takes() -> None:
    import argparse

    def silent(name: str, p: argparse.ArgumentParser) -> list[str]:
        out = []
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                out += [f"{name} {sub}: no help" for sub, q in a.choices.items()
                        if not any(c.dest == sub and c.help for c in a._choices_actions)]
                out += [x for sub, q in a.choices.items() for x in silent(f"{name} {sub}", q)]
            elif a.help is None and not isinstance(a, argparse._HelpAction):
                out.append(f"{name} {' '.join(a.option_strings) or a.dest}")
        return out

    assert silent("rnmt", cli.parser()) == []
