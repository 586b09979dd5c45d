"""A finished training run under the faults that come after it: its model.pt damaged or deleted (as
Snakemake deletes a failed job's outputs), the same job run again, two trainers on one folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faults.faultlib import ROOT, log_messages
from faults.test_training_faults import ENV, run, train_cmd, wait_for_step
from rnmt.models import checkpoint

pytestmark = pytest.mark.faults


def logged_steps(log: Path) -> list[int]:
    return [json.loads(x)["step"] for x in log.read_text().splitlines()]


def test_a_damaged_model_pt_is_not_brought_back(corpus: dict[str, Path], tmp_path: Path, record) -> None:
    record.fault("model.pt of a finished run deleted, as Snakemake deletes a failed job's outputs, and its job rerun")
    cmd = train_cmd(corpus, tmp_path, max_steps=12)
    assert run(cmd).returncode == 0
    model, keep = tmp_path / "model.pt", tmp_path / ".model.pt.keep"
    good = model.read_bytes()
    # the copy costs no disk: one file under two names
    assert os.stat(model).st_ino == os.stat(keep).st_ino and os.stat(model).st_nlink == 2
    model.unlink()
    got = run(cmd)
    assert got.returncode == 0, got.stderr[-2000:]
    assert model.read_bytes() == good, "the rerun must bring back the trained weights"

    record.fault("model.pt of a finished run truncated in place (so its copy too), deleted as the error says, "
                 "and its job rerun: the rerun names every file to delete")
    model.write_bytes(good[: len(good) // 2])
    got = subprocess.run([sys.executable, "-m", "rnmt", "translate", str(corpus["dev_src"]), str(tmp_path / "hyp"),
                          "--model", str(model)], capture_output=True, text=True, env=ENV)
    assert got.returncode == 2 and "Traceback" not in got.stderr
    assert "not a readable rnmt checkpoint" in got.stderr and "delete it and rerun its training job" in got.stderr
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
    said = log_messages(got.stderr)
    assert not [m for m in said if m.startswith("validation at step")], "the rerun must not validate again"
    assert f"  validation at step {last}: dev ppl" in "\n".join(said)     # what the run had said, said again
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
    got = run(train_cmd(corpus, tmp_path, max_steps=stopped_at + 4, max_epochs=100000))   # the dead one's lock is gone
    assert got.returncode == 0, got.stderr[-2000:]
    assert "resumed from" in got.stderr


@pytest.mark.workflow
def test_snakemake_killed_mid_training_then_rerun(tmp_path: Path, record) -> None:
    record.fault("kill -9 of Snakemake mid-training: its orphaned trainer runs on while the user reruns, then ends")
    from conftest import run_snakemake

    cfg = {"run": "k", "tables": ["demo-rnnsearch"],
           "corpora": {"synthetic-demo": {"sizes": {"train": 400, "dev": 30, "test": 40}}}, "bpe": {"merges": 150},
           "override": {"model": {"emb": 16, "hidden": 24},
                        "train": {"max_steps": 200, "max_epochs": 1000, "valid_every": 100, "max_minutes": 0,
                                  "threads": 1, "batch_size": 32, "valid_bleu": False}}}
    (tmp_path / "k.yaml").write_text(json.dumps(cfg))
    d = tmp_path / "results/k/models/synthetic-demo/rnnsearch-gru/seed1"
    target = str(d.relative_to(tmp_path) / "model.pt")
    args = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), target, "--cores", "1",
            "--configfile", "k.yaml"]
    env = {**ENV, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    smk = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_step(d / "train.jsonl", 20, smk, timeout=300)
    trainer = int((d / ".train.lock").read_text().split()[0])
    # The orphan is paused while the user reruns, so that it is still running then on a machine of any
    # speed (it holds its folder's lock while stopped, as it does while training).
    os.kill(trainer, signal.SIGSTOP)
    smk.kill()                                            # SIGKILL to Snakemake alone: its trainer goes on
    smk.wait()
    try:
        run_snakemake([target, "--unlock", "--configfile", "k.yaml"], tmp_path)
        # the plain command: the default profile reruns the killed job's incomplete outputs
        got = run_snakemake([target, "--cores", "1", "--configfile", "k.yaml"], tmp_path)
    finally:
        os.kill(trainer, signal.SIGCONT)
    assert got.returncode != 0, "the rerun must not train beside the running orphan"
    assert f"is being trained by process {trainer} (on " in got.stdout + got.stderr
    while Path(f"/proc/{trainer}").exists() and "zombie" not in Path(f"/proc/{trainer}/status").read_text().lower():
        time.sleep(0.2)                                   # the orphan finishes the run
    finished = (d / ".model.pt.keep").read_bytes()      # the rerun had deleted the outputs of the job it failed
    assert checkpoint.load(d / "last.pt")["step"] == 200
    log = target.replace("model.pt", "train.jsonl")      # deleted after the failed rerun: its job runs again
    got = run_snakemake([target, log, "--cores", "1", "--configfile", "k.yaml"], tmp_path)
    assert got.returncode == 0, got.stderr[-3000:]
    assert "had already ended at step 200" in (tmp_path / "results/k/logs/train/synthetic-demo/"
                                                 "rnnsearch-gru.seed1.log").read_text()
    assert (d / "model.pt").read_bytes() == finished, "a rerun of a finished run restores its best model.pt"
    assert checkpoint.load(d / "last.pt")["step"] == 200 and logged_steps(d / "train.jsonl")[-1] == 200
