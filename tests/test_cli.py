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


# the commands a person runs by hand; the pipeline's stage commands (corpus, parse, labels, synth, tokenize,
# bpe, vocab) are what Snakemake's rules run, with every argument written in the rule
BY_HAND = {"train", "average-checkpoints", "translate", "export", "postprocess", "score", "gates", "cell-counts",
           "compare", "table", "figure", "runs", "plot-curve", "plot-cost", "record", "params", "bench",
           "check-config"}


def test_every_option_of_a_command_run_by_hand_says_what_it_takes() -> None:
    import argparse

    sub = next(a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) >= BY_HAND
    silent = [f"{name} {' '.join(a.option_strings) or a.dest}" for name in sorted(BY_HAND)
              for a in sub.choices[name]._actions if a.help is None and not isinstance(a, argparse._HelpAction)]
    assert silent == []
