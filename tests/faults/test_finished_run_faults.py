"""A finished training run under the faults that come after it: its model.pt damaged or deleted (as
Snakemake deletes a failed job's outputs), the same job run again, two trainers on one folder."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from faults.faultlib import ROOT
from faults.test_training_faults import run, train_cmd, wait_for_step
from rnmt.train import checkpoint

pytestmark = pytest.mark.faults
ENV = {"PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}


def logged_steps(log: Path) -> list[int]:
    return [json.loads(x)["step"] for x in log.read_text().splitlines()]


def test_a_damaged_model_pt_is_not_brought_back(corpus: dict[str, Path], tmp_path: Path, record) -> None:
    record.fault("model.pt of a finished run truncated, deleted as the error says, and its job rerun")
    cmd = train_cmd(corpus, tmp_path, max_steps=12)
    assert run(cmd).returncode == 0
    model = tmp_path / "model.pt"
    good = model.read_bytes()
    model.write_bytes(good[: len(good) // 2])
    got = subprocess.run([sys.executable, "-m", "rnmt", "translate", str(corpus["dev_src"]), str(tmp_path / "hyp"),
                          "--model", str(model)], capture_output=True, text=True, env=ENV)
    assert got.returncode == 2 and "Traceback" not in got.stderr
    assert "not a readable rnmt checkpoint" in got.stderr and "delete it and rerun its training job" in got.stderr
    model.unlink()
    got = run(cmd)
    assert got.returncode == 0, got.stderr[-2000:]
    assert model.read_bytes() == good, "the rerun must bring back the good weights, not the damaged bytes"

    record.fault("model.pt deleted and its copy damaged too: the rerun names every file to delete")
    keep = tmp_path / ".model.pt.keep"
    keep.write_bytes(good[:100])
    model.unlink()
    got = run(cmd)
    assert got.returncode == 2 and "Traceback" not in got.stderr
    assert "rnmt train: error:" in got.stderr and "is damaged" in got.stderr and "train it afresh" in got.stderr
    named = got.stderr.split("Delete ", 1)[1].split(" and rerun")[0].split()
    assert {Path(n).name for n in named} >= {".model.pt.keep", "last.pt", "train.jsonl"}
    assert not model.exists(), "a damaged copy is never restored"
    for n in named:
        Path(n).unlink()
    got = run(cmd)
    assert got.returncode == 0, got.stderr[-2000:]
    assert model.read_bytes() == good, "trained afresh, the same seed gives the same weights"


@pytest.mark.parametrize("budget", [{"max_steps": 12}, {"max_steps": 0, "max_epochs": 2},
                                    {"max_steps": 0, "max_minutes": 0.0005}], ids=["steps", "epochs", "minutes"])
def test_a_finished_run_resumed_trains_no_further_step(corpus: dict[str, Path], tmp_path: Path, budget: dict,
                                                       record) -> None:
    record.fault(f"a finished run ({', '.join(f'{k} {v}' for k, v in budget.items() if v)}): its outputs deleted "
                 "as after a failed job, then rerun")
    cmd = train_cmd(corpus, tmp_path, **budget)
    assert run(cmd).returncode == 0
    model, log = tmp_path / "model.pt", tmp_path / "train.jsonl"
    weights, steps = model.read_bytes(), logged_steps(log)
    last = checkpoint.load(tmp_path / "last.pt")["step"]
    assert steps[-1] == last and (budget["max_steps"] == 0 or last == budget["max_steps"])
    model.unlink()
    log.unlink()
    got = run(cmd)
    assert got.returncode == 0, got.stderr[-2000:]
    assert "validation at step" not in got.stderr
    assert model.read_bytes() == weights, "the rerun must end with the uninterrupted run's model.pt, bit for bit"
    assert checkpoint.load(tmp_path / "last.pt")["step"] == last
    assert logged_steps(log) == steps
    assert json.loads((tmp_path / "train.json").read_text())["steps"] == last


def test_a_second_trainer_on_one_folder_stops_naming_the_first(corpus: dict[str, Path], tmp_path: Path,
                                                               record) -> None:
    record.fault("a second `rnmt train` on the folder of a running one (a killed Snakemake's orphan and the rerun)")
    endless = {"max_steps": 100000, "max_epochs": 100000}
    first = subprocess.Popen(train_cmd(corpus, tmp_path, **endless), stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        wait_for_step(tmp_path / "train.jsonl", 2, first)
        got = run(train_cmd(corpus, tmp_path, **endless))
        assert got.returncode == 2 and "Traceback" not in got.stderr
        assert f"is being trained by process {first.pid} (on " in got.stderr
        assert "two trainers must not write one folder" in got.stderr
        assert first.poll() is None, "the first trainer goes on"
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=60)
    stopped_at = checkpoint.load(tmp_path / "last.pt")["step"]
    got = run(train_cmd(corpus, tmp_path, max_steps=stopped_at + 4))   # the dead one's lock is gone
    assert got.returncode == 0, got.stderr[-2000:]
    assert "resumed from" in got.stderr
