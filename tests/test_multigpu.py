"""Local multi-GPU runs: disjoint GPU ids per job from the slot pool, and torch.distributed training with
two processes (gloo on the CPU) inside a Snakemake job."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from conftest import ROOT
from rnmt.cluster import gpus
from rnmt.data.synthetic import generate_pairs
from rnmt.data.tokenize import tokenize
from rnmt.data.vocab import Vocab
from rnmt.io import InputError, write_lines
from rnmt.models import checkpoint

HOLDER = textwrap.dedent("""
    import sys, time
    from rnmt.cluster import gpus
    lease = gpus.acquire(int(sys.argv[2]), sys.argv[3].split(","), sys.argv[1], timeout=float(sys.argv[4]), poll=0.05)
    print(",".join(lease.ids), flush=True)
    time.sleep(600)
""")


def hold(pool: Path, n: int, ids: str, timeout: float = 30) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.Popen([sys.executable, "-c", HOLDER, str(pool), str(n), ids, str(timeout)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_concurrent_jobs_get_disjoint_gpus_and_a_crashed_holder_frees_its_own(tmp_path: Path) -> None:
    a, b = hold(tmp_path, 2, "0,1,2,3"), hold(tmp_path, 1, "0,1,2,3")
    try:
        got_a, got_b = set(a.stdout.readline().strip().split(",")), set(b.stdout.readline().strip().split(","))
        assert len(got_a) == 2 and len(got_b) == 1 and not got_a & got_b
        free = {"0", "1", "2", "3"} - got_a - got_b
        with pytest.raises(TimeoutError, match="no 2 free GPU slots"):      # only one left
            gpus.acquire(2, ["0", "1", "2", "3"], tmp_path, timeout=0.2, poll=0.05)
        a.kill()                                    # a crash: no clean-up code runs
        a.wait()
        with gpus.acquire(3, ["0", "1", "2", "3"], tmp_path, timeout=10, poll=0.05) as lease:
            assert set(lease.ids) == got_a | free
        with gpus.acquire(3, ["0", "1", "2", "3"], tmp_path, timeout=10, poll=0.05) as again:
            assert set(again.ids) == got_a | free, "release() gives the slots back"
    finally:
        for p in (a, b):
            p.kill()
            p.communicate()


def test_asking_for_more_gpus_than_visible_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="3 GPUs asked for, but only 2 are visible.*lower the rule's gpu"):
        gpus.acquire(3, ["0", "1"], tmp_path)


def test_jobs_per_gpu_share_each_gpu_after_spreading_over_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gpus.SHARE_ENV, "2")
    first, second = gpus.acquire(1, ["0", "1"], tmp_path, timeout=0), gpus.acquire(1, ["0", "1"], tmp_path, timeout=0)
    assert {first.ids[0], second.ids[0]} == {"0", "1"}, "the second job takes the idle GPU, not a shared one"
    third, fourth = gpus.acquire(1, ["0", "1"], tmp_path, timeout=0), gpus.acquire(1, ["0", "1"], tmp_path, timeout=0)
    assert sorted(third.ids + fourth.ids) == ["0", "1"]
    with pytest.raises(TimeoutError, match="no 1 free GPU slots"):          # 2 GPUs x 2 slots, all taken
        gpus.acquire(1, ["0", "1"], tmp_path, timeout=0.1, poll=0.05)
    for lease in (first, second, third, fourth):
        lease.release()
    with gpus.acquire(1, ["0"], tmp_path, timeout=0) as one, gpus.acquire(2, ["0", "1"], tmp_path, timeout=0) as two:
        assert one.ids == ["0"] and sorted(two.ids) == ["0", "1"], "a 2-GPU job gets 2 different GPUs"
    monkeypatch.setenv(gpus.SHARE_ENV, "0")
    with pytest.raises(InputError, match="RNMT_JOBS_PER_GPU='0' must be a whole number >= 1"):
        gpus.acquire(1, ["0"], tmp_path)


MODEL = {"arch": "rnnsearch", "cell": "gru", "emb": 16, "hidden": 24, "dropout": 0.0}
# float32 (amp off): two ranks and one process must agree to the float32 sum order, which bfloat16 autocast
# (on CPUs that multiply it in hardware) would blur
SETTINGS = {"batch_size": 16, "lr": 0.003, "valid_every": 10, "valid_bleu": False, "threads": 1, "max_steps": 10,
            "log_every": 1, "amp": False}
SNAKEFILE = """
TRAIN = ('{python} -m rnmt train --model "$(cat model.json)" --settings "$(cat settings.json)" '
         '--train-src train.src --train-tgt train.tgt --dev-src dev.src --dev-tgt dev.tgt '
         '--src-vocab vocab.src --tgt-vocab vocab.tgt')

rule all:
    input: "two/model.pt", "one/model.pt"

rule two_processes:
    output: "two/model.pt"
    resources: gpu=2
    shell: "exec " + TRAIN + " --gpus {{resources.gpu}} --out-dir two 2> two.log"

rule one_process:
    output: "one/model.pt"
    shell: "exec " + TRAIN + " --out-dir one 2> one.log"
"""


def write_corpus(d: Path) -> None:
    pairs = list(generate_pairs(9, 80, max_words=10))
    for split, part in (("train", pairs[:64]), ("dev", pairs[64:])):
        write_lines(d / f"{split}.src", [tokenize(p.source_text, "en") for p in part])
        write_lines(d / f"{split}.tgt", [tokenize(p.target_text, "en") for p in part])
    for side in ("src", "tgt"):
        Vocab.build((d / f"train.{side}").read_text().splitlines()).save(d / f"vocab.{side}")


def test_signalled_two_process_training_exits_75_and_resumes(tmp_path: Path) -> None:
    write_corpus(tmp_path)
    settings = {**SETTINGS, "max_steps": 150, "valid_every": 150, "max_epochs": 1000}
    cmd = [sys.executable, "-m", "rnmt", "train", "--gpus", "2", "--model", json.dumps(MODEL), "--settings",
           json.dumps(settings), "--out-dir", "out",
           *[f"--{k}={v}" for k, v in (("train-src", "train.src"), ("train-tgt", "train.tgt"), ("dev-src", "dev.src"),
                                       ("dev-tgt", "dev.tgt"), ("src-vocab", "vocab.src"),
                                       ("tgt-vocab", "vocab.tgt"))]]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    log = tmp_path / "out/train.jsonl"
    end = time.time() + 120
    while proc.poll() is None and time.time() < end and not (log.is_file() and len(log.read_text().splitlines()) > 3):
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)                 # to the launcher only, as Snakemake or a user would
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, err[-3000:]
    stopped = checkpoint.load(tmp_path / "out/last.pt")["step"]
    assert 3 <= stopped < 150
    again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"at step {stopped} " in again.stderr and "resumed from" in again.stderr
    assert json.loads((tmp_path / "out/train.json").read_text())["steps"] == 150


@pytest.mark.workflow
def test_a_two_gpu_rule_trains_with_two_gloo_processes_inside_snakemake(tmp_path: Path) -> None:
    write_corpus(tmp_path)
    (tmp_path / "model.json").write_text(json.dumps(MODEL))
    (tmp_path / "settings.json").write_text(json.dumps(SETTINGS))
    (tmp_path / "Snakefile").write_text(SNAKEFILE.format(python=sys.executable))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    t0 = time.time()
    r = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", "--resources", "gpu=2"], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=600)
    logs = "".join(p.read_text()[-3000:] for p in tmp_path.glob("*.log"))
    assert r.returncode == 0, r.stderr[-3000:] + logs
    assert time.time() - t0 < 300
    assert json.loads((tmp_path / "two/train.json").read_text())["world_size"] == 2
    log = (tmp_path / "two.log").read_text()
    assert "running on the CPU" in log                  # no GPU visible: the two processes are gloo CPU ranks
    # two ranks on half batches each = one process on the whole batch (sum order aside)
    two, one = checkpoint.load(tmp_path / "two/model.pt"), checkpoint.load(tmp_path / "one/model.pt")
    assert two["step"] == one["step"] == 10
    for k, w in one["state_dict"].items():
        torch.testing.assert_close(two["state_dict"][k], w, rtol=1e-4, atol=1e-5)


def train_cli(d: Path, out: str, settings: dict, gpus: int) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "rnmt", "train", "--gpus", str(gpus), "--model", json.dumps(MODEL), "--settings",
           json.dumps(settings), "--out-dir", out, "--train-src", "train.src", "--train-tgt", "train.tgt",
           "--dev-src", "dev.src", "--dev-tgt", "dev.tgt", "--src-vocab", "vocab.src", "--tgt-vocab", "vocab.tgt"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, cwd=d, env=env, capture_output=True, text=True, timeout=300)


def test_two_ddp_processes_equal_one_process_on_the_doubled_batch(tmp_path: Path) -> None:
    """Two gloo ranks on 8 sentences each, two batches an update (the first kept local by no_sync), end with
    the weights and the logged losses of one process on the 16-sentence batches. Adam's eps at 1 makes its
    step follow the gradient's scale, so ranks that averaged their gradients instead of summing them (each
    rank's loss is already over the update's global token count) would end elsewhere."""
    write_corpus(tmp_path)
    settings = {**SETTINGS, "eps": 1.0, "lr": 0.5, "accumulate": 2, "max_steps": 8, "valid_every": 8}
    runs = {n: train_cli(tmp_path, f"w{n}", settings, n) for n in (2, 1)}
    for n, r in runs.items():
        assert r.returncode == 0, f"{n} process(es): {r.stderr[-3000:]}"
    two, one = (json.loads((tmp_path / f"w{n}/train.json").read_text()) for n in (2, 1))
    assert two["data_parallel"] == "DistributedDataParallel over 2 processes (gloo)"
    assert one["data_parallel"] is None and two["world_size"] == 2
    assert two["paths"] == one["paths"] and set(one["paths"].values()) == {"rnmt kernel", "step loop"}
    losses = [[json.loads(line)["loss"] for line in (tmp_path / f"w{n}/train.jsonl").read_text().splitlines()
               if '"loss"' in line] for n in (2, 1)]
    assert len(losses[0]) == 8
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=0)
    a, b = (checkpoint.load(tmp_path / f"w{n}/last.pt")["state_dict"] for n in (2, 1))
    for k, w in b.items():
        torch.testing.assert_close(a[k], w, rtol=1e-4, atol=1e-5)
    first = checkpoint.load(tmp_path / "w1/last.pt")
    assert first["step"] == 8
