"""Training under faults: killed (SIGKILL) or stopped (SIGTERM, SIGUSR1) mid-run, a full disk while
checkpointing, a diverging loss, a truncated or foreign checkpoint."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import SESSION_ENV
from faults.faultlib import ROOT, fill, log_messages
from rnmt.io import DiskFullError, InputError
from rnmt.models import checkpoint
from rnmt.train.trainer import Trainer, TrainSettings
from tinytrain import MODEL, assert_same_weights

pytestmark = pytest.mark.faults
STEPS = 36
SETTINGS = {"batch_size": 8, "lr": 0.003, "valid_every": 6, "valid_bleu": False, "threads": 1, "checkpoint_every": 2,
            "log_every": 1}


def train_cmd(corpus: dict[str, Path], out: Path, **settings) -> list[str]:
    c = corpus
    return [sys.executable, "-m", "rnmt", "train", "--model", json.dumps(MODEL),
            "--settings", json.dumps({**SETTINGS, "max_steps": STEPS, **settings}),
            "--train-src", str(c["train_src"]), "--train-tgt", str(c["train_tgt"]), "--dev-src", str(c["dev_src"]),
            "--dev-tgt", str(c["dev_tgt"]), "--src-vocab", str(c["src_vocab"]), "--tgt-vocab", str(c["tgt_vocab"]),
            "--out-dir", str(out)]


# A trainer's own environment: rnmt's sources, one thread, no virtual environment on PATH (and the test
# session's fast-path settings)
ENV = {**SESSION_ENV, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}


def run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=300)


def wait_for_step(log: Path, step: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    end = time.time() + timeout
    while time.time() < end and proc.poll() is None:
        if log.is_file() and any(json.loads(x)["step"] >= step for x in log.read_text().splitlines() if x.strip()):
            return
        time.sleep(0.02)
    raise AssertionError(f"training never reached step {step}")


@pytest.fixture(scope="module")
def uninterrupted(corpus: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("uninterrupted")
    ref = run(train_cmd(corpus, out))
    assert ref.returncode == 0, ref.stderr[-2000:]
    return out


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGUSR1], ids=["SIGKILL", "SIGTERM", "SIGUSR1"])
def test_killed_training_resumes_to_the_same_weights(corpus: dict[str, Path], uninterrupted: Path, tmp_path: Path,
                                                    sig: int, record) -> None:
    record.fault(f"{signal.Signals(sig).name} to `rnmt train` at step 13 of {STEPS}, then rerun")
    proc = subprocess.Popen(train_cmd(corpus, tmp_path), stderr=subprocess.PIPE, text=True, env=ENV)
    wait_for_step(tmp_path / "train.jsonl", 13, proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
    else:      # graceful: checkpoint at the step boundary, then the "rerun to resume" exit code and message
        assert proc.returncode == 75, err[-2000:]
        assert "last.pt saved: rerun the same command to resume" in err
    assert not (tmp_path / "train.json").exists(), "an interrupted run must not look finished"
    assert not list(tmp_path.glob(".*.part")) or sig == signal.SIGKILL
    interrupted_at = checkpoint.load(tmp_path / "last.pt")["step"]
    assert 12 <= interrupted_at < STEPS
    again = run(train_cmd(corpus, tmp_path))
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"resumed from {tmp_path / 'last.pt'} at step {interrupted_at}" in again.stderr
    # Snakemake starts the rerun's log afresh; the rerun says first what the killed run had said, up to the
    # step it resumes from, in the same words (less the time left then)
    before = [re.sub(r", about .+ left$", "", m) for m in log_messages(err)
              if (at := re.match(r"(?:validation at )?step (\d+)", m)) and int(at[1]) <= interrupted_at]
    assert len(before) > interrupted_at                   # a progress line a step, and the validations
    assert [m[2:] for m in log_messages(again.stderr) if m.startswith("  ")] == before
    assert_same_weights(uninterrupted / "last.pt", tmp_path / "last.pt")
    assert_same_weights(uninterrupted / "model.pt", tmp_path / "model.pt")
    steps = [json.loads(x)["step"] for x in (tmp_path / "train.jsonl").read_text().splitlines()
             if json.loads(x)["kind"] == "train"]
    assert steps == list(range(1, STEPS + 1))            # the log has each step once


def trainer(corpus: dict[str, Path], out: Path, **settings) -> Trainer:
    c = corpus
    s = TrainSettings.from_dict({**SETTINGS, **settings})
    return Trainer(MODEL, s, c["train_src"], c["train_tgt"], c["dev_src"], c["dev_tgt"], c["src_vocab"],
                   c["tgt_vocab"], out)


def test_full_disk_while_checkpointing_keeps_the_previous_checkpoint(corpus: dict[str, Path], small_disk: Path,
                                                                    tmp_path: Path, record) -> None:
    record.fault("disk full (2 MiB tmpfs) while training saves its checkpoints; space freed, then rerun")
    out = small_disk / "run"
    trainer(corpus, out, max_steps=6).run()
    before = checkpoint.load(out / "last.pt")
    assert before["step"] == 6
    size = (out / "last.pt").stat().st_size
    filler = fill(small_disk, leave=size // 3)           # room for less than a third of a checkpoint
    t = trainer(corpus, out, max_steps=12)
    with pytest.raises(DiskFullError) as e:
        t.run()
    msg = str(e.value)
    assert "no space left on the device" in msg and "last.pt" in msg
    assert "previous checkpoint is still valid" in msg and "rerunning the same command resumes" in msg
    after = checkpoint.load(out / "last.pt")             # the previous checkpoint is whole and unchanged
    assert after["step"] == 6
    for k, v in before["state_dict"].items():
        assert torch.equal(v, after["state_dict"][k])
    assert not [p for p in out.iterdir() if p.name.endswith(".part")], "no partial file is left"
    filler.unlink()                                       # space is back: the rerun resumes and finishes
    trainer(corpus, out, max_steps=12).run()
    trainer(corpus, tmp_path / "whole", max_steps=12).run()
    assert_same_weights(tmp_path / "whole/last.pt", out / "last.pt")


def test_full_disk_message_from_the_command(corpus: dict[str, Path], small_disk: Path, record) -> None:
    record.fault("disk full before `rnmt train` writes its first checkpoint")
    out = small_disk / "run"
    out.mkdir()
    fill(small_disk, leave=8 * 1024)
    got = run(train_cmd(corpus, out, max_steps=4))
    assert got.returncode == 2, got.stderr[-2000:]
    assert "rnmt train: error:" in got.stderr and "no space left on the device" in got.stderr
    assert "Traceback" not in got.stderr
    assert not (out / "last.pt").exists() and not (out / "model.pt").exists()
    assert not [p for p in out.iterdir() if p.name.endswith(".part")]


def test_diverging_loss_stops_with_the_last_good_checkpoint(corpus: dict[str, Path], tmp_path: Path, record) -> None:
    record.fault("a diverging run (lr = inf makes the weights NaN): nan_policy stop")
    got = run(train_cmd(corpus, tmp_path, lr=float("inf"), checkpoint_every=1, clip=0.0))
    assert got.returncode == 2, got.stderr[-2000:]
    assert "the training loss is nan" in got.stderr or "the weights are no longer finite" in got.stderr
    assert "Lower lr or clip" in got.stderr
    if (tmp_path / "last.pt").exists():                  # whatever was saved holds finite weights
        assert "the last good state is in" in got.stderr
        assert all(torch.isfinite(v).all() for v in checkpoint.load(tmp_path / "last.pt")["state_dict"].values()
                   if v.is_floating_point())
    else:
        assert "no checkpoint had been saved yet" in got.stderr


def test_truncated_checkpoint_is_refused_with_the_fix(corpus: dict[str, Path], tmp_path: Path, record) -> None:
    record.fault("last.pt truncated to half (a copy cut short), then resumed")
    trainer(corpus, tmp_path, max_steps=2).run()
    data = (tmp_path / "last.pt").read_bytes()
    (tmp_path / "last.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match=r"last.pt: not a readable rnmt checkpoint .*delete it"):
        trainer(corpus, tmp_path, max_steps=4).run()


def test_checkpoint_of_another_vocabulary_or_architecture(corpus: dict[str, Path], tmp_path: Path, record,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    record.bad_input("a checkpoint of another architecture (sizes) given to decoding")
    trainer(corpus, tmp_path, max_steps=2).run()
    ckpt = checkpoint.load(tmp_path / "model.pt")
    ckpt["model_config"] = {**ckpt["model_config"], "hidden": 32}
    torch.save(ckpt, tmp_path / "other.pt")
    with pytest.raises(InputError, match=r"other.pt: the weights do not fit the architecture .*has shape .*retrain"):
        checkpoint.load_model(tmp_path / "other.pt")
    record.bad_input("a checkpoint of another vocabulary found when resuming")
    vocab = tmp_path / "vocab.tgt"
    vocab.write_text(Path(corpus["tgt_vocab"]).read_text() + "extra-word\n")
    c = {**corpus, "tgt_vocab": vocab}
    with caplog.at_level("WARNING"):
        trainer(c, tmp_path, max_steps=2).run()
    assert "target vocabulary (" in caplog.text and "training afresh" in caplog.text
    kept = list(tmp_path.glob("superseded/*/last.pt"))
    assert kept and checkpoint.load(kept[0])["tgt_vocab"] == Path(corpus["tgt_vocab"]).read_text().splitlines()
    shutil.rmtree(tmp_path)


def copied(corpus: dict[str, Path], folder: Path) -> dict[str, Path]:
    folder.mkdir()
    out = {}
    for role, path in corpus.items():
        out[role] = folder / Path(path).name
        shutil.copyfile(path, out[role])
    return out


def shifted(path: Path) -> None:
    """The file's lines moved up by one, the first one last: every pair misaligned, the line count kept."""
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[1:] + lines[:1]) + "\n")


@pytest.mark.parametrize("change", ["train_tgt", "dev_tgt", "max_steps"])
def test_a_model_whose_inputs_changed_is_never_resumed_or_kept(corpus: dict[str, Path], tmp_path: Path, change: str,
                                                               record) -> None:
    """A model trained on misaligned data (or another dev set, or a longer budget), then the data fixed and
    the same job run again: the old model, logs and metrics move to superseded/ with the reason, and the
    rerun trains afresh to exactly the weights of a fresh run on the fixed inputs."""
    record.fault(f"{change} changed after a finished run, then its training job rerun in the same folder")
    good = copied(corpus, tmp_path / "data")
    first = dict(good)
    if change != "max_steps":
        first[change] = tmp_path / f"bad.{change}"
        shutil.copyfile(good[change], first[change])
        shifted(first[change])
    trainer(first, tmp_path / "run", max_steps=10).run()
    if change != "max_steps":
        shutil.copyfile(good[change], first[change])          # the file fixed in place
    again = trainer(first, tmp_path / "run", max_steps=6 if change == "max_steps" else 10)
    metrics = again.run()
    assert metrics["steps"] == (6 if change == "max_steps" else 10)
    fresh = trainer(good, tmp_path / "fresh", max_steps=6 if change == "max_steps" else 10)
    fresh.run()
    assert_same_weights(tmp_path / "fresh" / "model.pt", tmp_path / "run" / "model.pt")
    assert_same_weights(tmp_path / "fresh" / "last.pt", tmp_path / "run" / "last.pt")
    why = (next((tmp_path / "run" / "superseded").iterdir()) / "why.txt").read_text()
    assert (("max_steps 6 is below the 10 steps it trained" in why) if change == "max_steps"
            else f"{change} changed since it was trained" in why), why
    old = next((tmp_path / "run" / "superseded").iterdir())
    assert {"last.pt", "model.pt", "train.json", "train.jsonl"} <= {f.name for f in old.iterdir()}
    saved = json.loads((tmp_path / "run" / "train.json").read_text())["inputs"]
    assert saved == json.loads((tmp_path / "fresh" / "train.json").read_text())["inputs"]
    assert saved["train_tgt"] == checkpoint.load(tmp_path / "run" / "model.pt")["inputs"]["train_tgt"]


def test_an_unchanged_rerun_keeps_the_finished_model(corpus: dict[str, Path], tmp_path: Path) -> None:
    trainer(corpus, tmp_path, max_steps=6).run()
    before = (tmp_path / "model.pt").read_bytes()
    assert trainer(corpus, tmp_path, max_steps=6).run()["steps"] == 6
    assert (tmp_path / "model.pt").read_bytes() == before and not (tmp_path / "superseded").exists()
