"""Training: schedules, exact resume, NaN handling, batching, data-parallel gradients (killed runs: tests/faults)."""

import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rnmt.data.batching import load_parallel, make_batch, token_batches
from rnmt.data.vocab import PAD_ID, Vocab
from rnmt.models import build_model
from rnmt.models.init import initialise
from rnmt.train import distributed, schedules
from rnmt.train.loss import token_loss
from rnmt.train.trainer import Trainer, TrainingDiverged, TrainSettings
from tinytrain import MODEL, assert_same_weights


def trainer(corpus: dict[str, Path], out: Path, model: dict | None = None, **settings) -> Trainer:
    s = TrainSettings.from_dict({"batch_size": 8, "lr": 0.003, "valid_every": 5, "valid_bleu": False,
                                 "log_every": 1, "threads": 1, **settings})
    c = corpus
    return Trainer(model or MODEL, s, c["train_src"], c["train_tgt"], c["dev_src"], c["dev_tgt"], c["src_vocab"],
                   c["tgt_vocab"], out)


# ---- initialisation ---------------------------------------------------------------------------------
@pytest.mark.parametrize("scheme", ["uniform", "xavier"])
def test_initialisation_leaves_layer_norms_at_the_identity(scheme: str) -> None:
    """DTMT's per-gate layer norms: gains drawn like weights (about ±0.08) scale every normalised gate
    input down to a random-signed fraction, and the model sits at the unigram distribution."""
    model = build_model("dtmt", 30, 30, cell="lgru", emb=16, hidden=16, depth=2, heads=2)
    initialise(model, scheme, 0.08)
    norms = [m for m in model.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert len(norms) >= 10
    for m in norms:
        assert torch.equal(m.weight, torch.ones_like(m.weight)) and torch.equal(m.bias, torch.zeros_like(m.bias))
    weights = [p for n, p in model.named_parameters() if "norm" not in n]
    if scheme == "uniform":
        assert all(p.abs().max() <= 0.08 for p in weights)
    assert all(p.std() > 0 for p in weights if p.numel() > 1)


# ---- loss -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_the_training_loss_and_its_gradient_are_torchs_label_smoothed_cross_entropy(smoothing: float) -> None:
    g = torch.Generator().manual_seed(3)
    logits = (3 * torch.randn(3, 6, 13, generator=g, dtype=torch.float64)).requires_grad_()
    target = torch.randint(PAD_ID + 1, 13, (3, 6), generator=g)
    target[0, 4:], target[2, 1:] = PAD_ID, PAD_ID                  # padding contributes nothing
    ours = token_loss(logits, target, smoothing)
    (d_ours,) = torch.autograd.grad(3.5 * ours, logits)
    ref = torch.nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=PAD_ID,
                                            label_smoothing=smoothing, reduction="sum")
    (d_ref,) = torch.autograd.grad(3.5 * ref, logits)
    assert ours.item() == pytest.approx(ref.item(), rel=1e-12)
    torch.testing.assert_close(d_ours, d_ref, rtol=1e-12, atol=1e-14)
    assert d_ours[0, 4:].abs().max() == 0 and d_ours[2, 1:].abs().max() == 0
    with torch.no_grad():                                         # validation's route: the same value
        assert float(token_loss(logits, target, smoothing)) == pytest.approx(float(ref), rel=1e-12)


def test_the_cpu_trains_in_bfloat16_only_where_it_has_the_units_and_the_model_is_large_enough(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """bfloat16 is emulated (slower than float32) on CPUs without AVX512-BF16 or AMX, and its casts cost
    more than its products save in small models: the demo's would train slower."""
    from rnmt.machine import hardware

    cpu, big, small = torch.device("cpu"), hardware.CPU_BF16_MIN_PARAMS, hardware.CPU_BF16_MIN_PARAMS - 1
    monkeypatch.setattr(hardware, "cpu_flags", lambda: {"avx512f", "avx2"})
    assert not hardware.bf16_training(cpu, True, big)
    for flag in ("avx512_bf16", "amx_bf16"):
        monkeypatch.setattr(hardware, "cpu_flags", lambda flag=flag: {"avx512f", flag})
        assert hardware.bf16_training(cpu, True, big)
        assert not hardware.bf16_training(cpu, True, small)
        assert not hardware.bf16_training(cpu, False, big)            # amp: false is float32 anywhere


def test_the_cpu_is_named_by_its_family_and_model_numbers_where_the_vm_names_it_vaguely(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every metrics file's `hardware`: a VM's "AMD EPYC" is a Zen 4 or a Zen 5, told apart by /proc/cpuinfo's
    family and model lines (read whole: "model" is not "model name"); a CPU without them gives none."""
    from rnmt.machine import hardware

    info = tmp_path / "cpuinfo"
    monkeypatch.setattr(hardware, "CPUINFO", str(info))
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\ncpu family\t: 25\n"
                    "model\t\t: 17\nflags\t\t: fpu avx512f\n\nprocessor\t: 1\nmodel\t\t: 99\n")
    assert (hardware.cpu_model(), hardware.cpu_family_model()) == ("AMD EPYC", "family 25, model 17")
    info.write_text("processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n")
    assert hardware.cpu_family_model() is None


def test_a_run_resumed_on_another_cpu_generation_of_the_same_name_was_timed_on_two_machines(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A job retried on a node whose CPU has the same name but another family: its speed mixes two machines,
    and train.json's `machines` and the tables' notes say so."""
    import rnmt.train.progress as progress
    from rnmt.report import ran

    real, on = progress.describe, {"cpu": "AMD EPYC", "cpu_family_model": "family 26, model 2", "cpu_isa": "avx512"}
    monkeypatch.setattr(progress, "describe", lambda device: {**real(device), **on})
    cpu = torch.device("cpu")
    first = progress.ran_on([], 0, cpu, True)
    assert progress.ran_on(first, 50, cpu, True) == first, "the same machine again adds nothing"
    on["cpu_family_model"] = "family 25, model 17"
    both = progress.ran_on(first, 50, cpu, True)
    assert [(m["from_step"], m["cpu_family_model"]) for m in both] == [(0, "family 26, model 2"),
                                                                       (50, "family 25, model 17")]
    assert ran.machine(both[0]).startswith("cpu AMD EPYC (family 26, model 2; avx512), ")
    assert ran.machine(both[1]).startswith("cpu AMD EPYC (family 25, model 17; avx512), ")


# ---- schedules --------------------------------------------------------------------------------------
def test_halve_every_epoch_matches_atr() -> None:
    f = schedules.get("halve_every_epoch")
    assert [f(1000, e) for e in range(4)] == [1.0, 0.5, 0.25, 0.125]


def test_rnmt_plus_follows_dtmt_eq17() -> None:
    f = schedules.get("rnmt_plus", replicas=2, warmup_steps=50, decay_start=200, decay_end=1200)
    # hand-computed: warm-up 1 + t(n-1)/(np), plateau n, decay n(2n)^((s - n t)/(e - s))
    assert f(0, 0) == pytest.approx(1.0)
    assert f(50, 0) == pytest.approx(1.5)
    assert f(100, 0) == pytest.approx(2.0)
    assert f(150, 0) == pytest.approx(2 * 4 ** ((200 - 300) / 1000))      # 1.7411
    assert f(700, 0) == pytest.approx(2 * 4 ** ((200 - 1400) / 1000))     # 0.3789
    one = schedules.get("rnmt_plus", replicas=1, warmup_steps=50, decay_start=200, decay_end=1200)
    assert one(100, 0) == 1.0 and one(1200, 0) == pytest.approx(0.5)      # n = 1: halved at e


def test_lr_in_the_log_follows_the_schedule(corpus: dict[str, Path], tmp_path: Path) -> None:
    trainer(corpus, tmp_path, max_steps=12, schedule="halve_every_epoch").run()
    recs = [json.loads(x) for x in (tmp_path / "train.jsonl").read_text().splitlines()]
    for r in (r for r in recs if r["kind"] == "train"):
        assert r["lr"] == pytest.approx(0.003 * 0.5 ** r["epoch"])
    assert {r["epoch"] for r in recs if r["kind"] == "train"} == {0, 1}       # 9 batches an epoch


def test_a_step_budget_gives_the_same_model_on_a_busy_machine(corpus: dict[str, Path], tmp_path: Path) -> None:
    """The demo's tables must not depend on what else the machine is doing: a run budgeted in steps,
    trained once on an idle CPU and once beside a CPU-bound process, ends with bit-identical weights
    and the same validation records."""
    trainer(corpus, tmp_path / "idle", max_steps=30, valid_every=10).run()
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        trainer(corpus, tmp_path / "busy", max_steps=30, valid_every=10).run()
    finally:
        burner.kill()
        burner.wait()
    assert_same_weights(tmp_path / "idle/model.pt", tmp_path / "busy/model.pt")

    def valid(d: str) -> list[tuple[int, float]]:
        recs = [json.loads(x) for x in (tmp_path / d / "train.jsonl").read_text().splitlines()]
        return [(r["step"], r["dev_loss"]) for r in recs if r["kind"] == "valid"]

    assert valid("idle") == valid("busy") and len(valid("idle")) == 3
    assert json.loads((tmp_path / "busy/train.json").read_text())["stop_reason"] == "max_steps"


# ---- the paper's batch and model selection ------------------------------------------------------------
def test_accumulated_batches_give_the_gradient_of_one_batch_k_times_larger(corpus: dict[str, Path],
                                                                          tmp_path: Path) -> None:
    """DTMT's batch is 4,096 tokens on each of n GPUs: one process that sums k batches into an update
    computes the gradient of one batch k times larger, normalised by all its target tokens."""
    from tqdm import tqdm

    model = {**MODEL, "dropout": 0.0}
    steps = {}
    for name, k, groups in (("accumulated", 3, [[0, 1, 2], [3, 4, 5], [6, 7, 8]]), ("joint", 1, [list(range(9))])):
        # float32: bfloat16 autocast (on CPUs that multiply it in hardware) would round the two sums apart
        t = trainer(corpus, tmp_path / name, model=model, accumulate=k, clip=0.0, log_every=100, amp=False)
        t.bar = tqdm(disable=True)
        t._train_step(groups)
        steps[name] = t
    a, j = steps["accumulated"].model, steps["joint"].model
    for (name, pa), pj in zip(a.named_parameters(), j.parameters(), strict=True):
        torch.testing.assert_close(pa.grad, pj.grad, atol=1e-6, rtol=1e-5, msg=name)
    assert steps["accumulated"].p.tgt_tokens == steps["joint"].p.tgt_tokens > 0


def test_replicas_make_each_update_the_papers_batch(corpus: dict[str, Path], tmp_path: Path) -> None:
    """replicas: 4 on one process is 4 batches an update: an epoch of 9 batches is 3 updates (4, 4, 1),
    and the metrics say how many target tokens an update saw."""
    t = trainer(corpus, tmp_path, replicas=4, schedule="rnmt_plus", warmup_steps=2, decay_start=0, decay_end=10,
                max_steps=3, max_epochs=5)
    metrics = t.run()
    assert metrics["accumulate"] == 4 and metrics["steps"] == 3 and (t.p.epoch, t.p.batch_in_epoch) == (0, 9)
    sv, tv = Vocab.load(corpus["src_vocab"]), Vocab.load(corpus["tgt_vocab"])
    data = load_parallel(corpus["train_src"], corpus["train_tgt"], sv, tv, 80)
    epoch_tokens = make_batch(data, list(range(len(data)))).tgt_tokens
    assert metrics["tokens_per_update"] == pytest.approx(epoch_tokens / 3)
    recs = [json.loads(x) for x in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert sum(r["tokens_per_update"] for r in recs if r["kind"] == "train") == epoch_tokens


def test_accumulate_defaults_to_the_papers_gpu_count() -> None:
    from rnmt.train.settings import accumulation

    assert accumulation(TrainSettings(replicas=8)) == 8
    assert accumulation(TrainSettings(replicas=8, accumulate=3)) == 3
    assert accumulation(TrainSettings()) == 1


@pytest.mark.parametrize("select_by", ["loss", "bleu"])
def test_the_kept_checkpoint_is_the_best_by_the_selection_metric(corpus: dict[str, Path], tmp_path: Path,
                                                                  select_by: str) -> None:
    """DTMT keeps the checkpoint with the best dev BLEU, SR-NMT the one with the best dev perplexity;
    patience counts validations without improvement of the same metric."""
    from rnmt.models import checkpoint

    metrics = trainer(corpus, tmp_path, max_steps=40, valid_every=4, valid_bleu=True, select_by=select_by,
                      lr=0.01).run()
    valid = [json.loads(x) for x in (tmp_path / "train.jsonl").read_text().splitlines()]
    valid = [r for r in valid if r["kind"] == "valid"]
    by_loss = min(valid, key=lambda r: r["dev_loss"])["step"]
    by_bleu = max(valid, key=lambda r: (r["dev_bleu"], -r["step"]))["step"]
    assert by_loss != by_bleu                         # the two metrics disagree on this run
    want = by_bleu if select_by == "bleu" else by_loss
    assert checkpoint.load(tmp_path / "model.pt")["step"] == metrics["best_step"] == want
    assert metrics["select_by"] == select_by


def test_select_by_bleu_without_dev_bleu_is_refused() -> None:
    from rnmt.io import InputError

    with pytest.raises(InputError, match="select_by: bleu needs .* valid_bleu: true"):
        TrainSettings.from_dict({"select_by": "bleu", "valid_bleu": False})


# ---- resume -----------------------------------------------------------------------------------------
def test_resumed_run_ends_with_the_same_weights(corpus: dict[str, Path], tmp_path: Path) -> None:
    trainer(corpus, tmp_path / "whole", max_steps=23).run()
    trainer(corpus, tmp_path / "split", max_steps=13).run()      # stops mid-epoch 2 ...
    resumed = trainer(corpus, tmp_path / "split", max_steps=23)  # ... and continues with a larger budget
    resumed.run()
    assert resumed.p.step == 23
    assert_same_weights(tmp_path / "whole/last.pt", tmp_path / "split/last.pt")
    steps = [json.loads(x)["step"] for x in (tmp_path / "split/train.jsonl").read_text().splitlines()
             if json.loads(x)["kind"] == "train"]
    assert steps == list(range(1, 24))                            # one log record per step, none twice


def test_changed_settings_train_afresh(corpus: dict[str, Path], tmp_path: Path) -> None:
    trainer(corpus, tmp_path, max_steps=6).run()
    t = trainer(corpus, tmp_path, max_steps=6, lr=0.001)
    t.run()
    assert t.p.step == 6 and list(tmp_path.glob("superseded/*/last.pt")), "the other run's checkpoint is kept aside"


def _train_cmd(corpus: dict[str, Path], out: Path, steps: int) -> list[str]:
    settings = {"batch_size": 8, "lr": 0.003, "valid_every": 6, "valid_bleu": False, "threads": 1,
                "max_steps": steps, "checkpoint_every": 2, "log_every": 1}
    c = corpus
    return [sys.executable, "-m", "rnmt", "train", "--model", json.dumps(MODEL), "--settings", json.dumps(settings),
            "--train-src", str(c["train_src"]), "--train-tgt", str(c["train_tgt"]), "--dev-src", str(c["dev_src"]),
            "--dev-tgt", str(c["dev_tgt"]), "--src-vocab", str(c["src_vocab"]), "--tgt-vocab", str(c["tgt_vocab"]),
            "--out-dir", str(out)]


def _wait_for_step(log: Path, step: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    end = time.time() + timeout
    while time.time() < end and proc.poll() is None:
        if log.is_file() and any(json.loads(x)["step"] >= step for x in log.read_text().splitlines() if x.strip()):
            return
        time.sleep(0.05)
    raise AssertionError(f"training never reached step {step}")


def test_resume_restores_outputs_that_snakemake_deleted(corpus: dict[str, Path], tmp_path: Path) -> None:
    """Snakemake removes a failed job's outputs before the retry: the best model and the log come back."""
    steps = 60
    ref = subprocess.run(_train_cmd(corpus, tmp_path / "ref", steps), capture_output=True, text=True)
    assert ref.returncode == 0, ref.stderr[-2000:]
    proc = subprocess.Popen(_train_cmd(corpus, tmp_path / "run", steps), stderr=subprocess.PIPE, text=True)
    _wait_for_step(tmp_path / "run/train.jsonl", 15, proc)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 75
    for name in ("model.pt", "train.jsonl"):        # what Snakemake does to the failed job's outputs
        (tmp_path / "run" / name).unlink()
    again = subprocess.run(_train_cmd(corpus, tmp_path / "run", steps), capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-2000:]
    assert_same_weights(tmp_path / "ref/model.pt", tmp_path / "run/model.pt")
    assert (tmp_path / "ref/train.jsonl").read_text() != ""
    steps_logged = [json.loads(x)["step"] for x in (tmp_path / "run/train.jsonl").read_text().splitlines()]
    assert steps_logged == [json.loads(x)["step"] for x in (tmp_path / "ref/train.jsonl").read_text().splitlines()]


# ---- SR-NMT retraining, NaN losses -----------------------------------------------------------------
def test_plateau_restarts_from_best_at_half_rate_then_stops(corpus: dict[str, Path], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """SR-NMT: when the dev perplexity stops improving, continue from the best checkpoint at half the rate."""
    losses = iter([3.0, 2.0, 2.5, 2.6])
    monkeypatch.setattr("rnmt.train.trainer.dev_loss", lambda *a: next(losses))
    m = trainer(corpus, tmp_path, max_steps=100, plateau_retrains=1, patience=1, valid_every=3).run()
    recs = [json.loads(x) for x in (tmp_path / "train.jsonl").read_text().splitlines()]
    retrain = next(r for r in recs if r["kind"] == "retrain")
    assert retrain == {"kind": "retrain", "step": 9, "from_step": 6, "lr_factor": 0.5}
    lrs = {r["step"]: r["lr"] for r in recs if r["kind"] == "train"}
    assert lrs[9] == pytest.approx(0.003) and lrs[10] == pytest.approx(0.0015)
    assert m["stop_reason"] == "patience" and m["steps"] == 12 and m["retrains"] == 1 and m["best_step"] == 6
    assert m["retrained"] == [{"step": 9, "from_step": 6, "lr_factor": 0.5}], "train.json says when, for the tables"


def test_nan_loss_stops_with_a_message_or_is_skipped(corpus: dict[str, Path], tmp_path: Path) -> None:
    t = trainer(corpus, tmp_path / "stop", max_steps=3)
    with torch.no_grad():
        t.model.readout.linear.bias.fill_(float("nan"))
    with pytest.raises(TrainingDiverged, match="training loss is nan.*nan_policy: skip"):
        t.run()
    t = trainer(corpus, tmp_path / "skip", max_steps=3, nan_policy="skip", max_epochs=1)
    with torch.no_grad():
        t.model.readout.linear.bias.fill_(float("nan"))
    m = t.run()
    assert m["skipped_batches"] == 9 and m["steps"] == 0     # every batch of the one epoch was skipped


# ---- batching -------------------------------------------------------------------------------------------
def test_token_batches_respect_the_budget_and_cover_every_sentence() -> None:
    rng = random.Random(0)
    src = [rng.randint(1, 40) for _ in range(500)]
    tgt = [rng.randint(1, 40) for _ in range(500)]
    batches = list(token_batches(src, tgt, 256, random.Random(1)))
    assert sorted(i for b in batches for i in b) == list(range(500))
    for b in batches:
        assert len(b) * (max(max(src[i], tgt[i]) for i in b) + 1) <= 256 or len(b) == 1


# ---- data parallel ------------------------------------------------------------------------------------
def _rank_grads(rank: int, world: int, init: str, corpus: dict[str, Path], out: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    torch.manual_seed(0)
    model, batch_idx, data = _tiny_setup(corpus)
    replica = distributed.replicate(model, world, torch.device("cpu"))     # DistributedDataParallel
    loss = _loss(replica, make_batch(data, batch_idx[rank::world]), distributed.global_sum(
        make_batch(data, batch_idx[rank::world]).tgt_tokens, world, torch.device("cpu")))
    loss.backward()                                  # the gradients are summed across the ranks here
    if rank == 0:
        torch.save({k: p.grad for k, p in model.named_parameters()}, out)
    dist.destroy_process_group()


def _tiny_setup(corpus: dict[str, Path]):
    sv, tv = Vocab.load(corpus["src_vocab"]), Vocab.load(corpus["tgt_vocab"])
    data = load_parallel(corpus["train_src"], corpus["train_tgt"], sv, tv)
    model = build_model("rnnsearch", len(sv), len(tv), cell="gru", emb=8, hidden=12, dropout=0.0)
    return model, list(range(0, 24, 2)), data


def _loss(model, batch, tokens: int) -> torch.Tensor:
    logits = model(batch.src, batch.src_mask, batch.tgt_in)
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD_ID,
                                             reduction="sum") / tokens


def test_two_gloo_processes_give_the_joint_batch_gradient(corpus: dict[str, Path], tmp_path: Path) -> None:
    out = str(tmp_path / "grads.pt")
    init = f"file://{tmp_path / 'rendezvous'}"
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(_rank_grads, args=(2, init, corpus, out), nprocs=2, join=True)
    torch.manual_seed(0)
    model, idx, data = _tiny_setup(corpus)
    batch = make_batch(data, idx)
    _loss(model, batch, batch.tgt_tokens).backward()
    parallel = torch.load(out, weights_only=True)
    for name, p in model.named_parameters():
        torch.testing.assert_close(parallel[name], p.grad, atol=1e-6, rtol=1e-5)


def test_the_length_limit_counts_words_or_subwords(tmp_path: Path) -> None:
    """ATR limits training pairs to 80 words, before BPE: a 3-word sentence split into 6 subwords
    stays under a limit of 4 words and is skipped under a limit of 4 subwords."""
    src, tgt = tmp_path / "train.src", tmp_path / "train.tgt"
    src.write_text("a@@ b@@ c d@@ e f\nshort one\n")
    tgt.write_text("x y z\nkurz eins\n")
    sv = Vocab.build(src.read_text().splitlines())
    tv = Vocab.build(tgt.read_text().splitlines())
    assert len(load_parallel(src, tgt, sv, tv, 4, max_len_unit="words")) == 2
    assert len(load_parallel(src, tgt, sv, tv, 4)) == 1
    with pytest.raises(Exception, match="training setting max_len_unit must be one of subwords, words, not 'tokens'"):
        TrainSettings.from_dict({"max_len_unit": "tokens"})


def test_word_frequencies_alone_give_the_dev_loss_of_their_add_one_distribution(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from rnmt.data.batching import ParallelData
    from rnmt.train import validation
    from rnmt.train.validation import frequency_loss

    def data(tgt: list[list[int]]) -> ParallelData:
        return ParallelData([[5]] * len(tgt), tgt, [1] * len(tgt), [len(t) for t in tgt])

    # training targets 4 5 </s>, 4 </s> over 7 types, each counted once more: </s> 3, 4 3, 5 2, others 1 of 12
    got = frequency_loss(data([[4, 5], [4]]), data([[4], [6]]), 7)
    assert got == pytest.approx(-(3 * math.log(3 / 12) + math.log(1 / 12)) / 4)
    monkeypatch.setattr(validation, "FREQUENCY_SENTENCES", 1)     # a large corpus: every k-th sentence counts
    sampled = frequency_loss(data([[4, 5], [4]]), data([[4], [6]]), 7)     # 4 5 </s>: </s> 2, 4 2, 5 2 of 10
    assert sampled == pytest.approx(-(3 * math.log(2 / 10) + math.log(1 / 10)) / 4)


def test_a_model_that_never_leaves_word_frequencies_says_it_did_not_learn(corpus: dict[str, Path], tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    """A model whose dev loss stays near what word frequencies alone give has learned nothing of the source
    (a deep model can sit there for a whole run): train.json says so, with both losses, and so does the log;
    a model that learns says nothing of it."""
    stuck = trainer(corpus, tmp_path / "stuck", max_steps=1).run()
    assert stuck["learned"] is False and stuck["lowest_dev_loss"] > 0.95 * stuck["frequency_dev_loss"]
    assert stuck["warnings"][-1].startswith("the model did not learn to translate: its lowest dev loss, ")
    assert "has not yet learned to translate" in caplog.text
    on_train = {**corpus, "dev_src": corpus["train_src"], "dev_tgt": corpus["train_tgt"]}   # one it can learn
    learned = trainer(on_train, tmp_path / "learned", max_steps=150, valid_every=50, lr=0.01).run()
    assert learned["learned"] is True
    assert learned["lowest_dev_loss"] < 0.95 * learned["frequency_dev_loss"] and not learned["warnings"]


def test_metrics_record_the_version_and_commit_that_made_them(corpus: dict[str, Path], tmp_path: Path) -> None:
    import rnmt

    metrics = trainer(corpus, tmp_path, max_steps=1).run()
    head = subprocess.run(["git", "-C", str(Path(rnmt.__file__).resolve().parents[2]), "rev-parse", "HEAD"],
                          capture_output=True, text=True)
    assert metrics["rnmt_version"] == rnmt.__version__
    assert metrics["git_commit"] == (head.stdout.strip() if head.returncode == 0 else None)
    assert json.loads((tmp_path / "train.json").read_text())["git_commit"] == metrics["git_commit"]


def test_a_run_records_the_code_it_started_with_and_each_resume_on_other_code(
        corpus: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rnmt.train.progress as progress

    now = {"rnmt_version": "1.0", "git_commit": "a" * 40, "git_dirty": False}
    monkeypatch.setattr(progress, "provenance", lambda: dict(now))
    step = Trainer._train_step

    def moving_on(self: Trainer, group: list) -> None:
        now["git_commit"] = "b" * 40                # the checkout moves on while the run trains
        step(self, group)

    monkeypatch.setattr(Trainer, "_train_step", moving_on)
    first = trainer(corpus, tmp_path, max_steps=6).run()
    assert first["git_commit"] == "a" * 40                       # not the commit the checkout had at the end
    assert first["code"] == [{"from_step": 0, "rnmt_version": "1.0", "git_commit": "a" * 40, "git_dirty": False}]
    assert not [w for w in first["warnings"] if "more than one version" in w]
    resumed = trainer(corpus, tmp_path, max_steps=12).run()      # resumed on the code the checkout has now
    assert resumed["steps"] == 12 and resumed["git_commit"] == "a" * 40
    assert [(c["from_step"], c["git_commit"]) for c in resumed["code"]] == [(0, "a" * 40), (6, "b" * 40)]
    assert ("trained by more than one version of rnmt: from step 0 rnmt 1.0 (git aaaaaaaaaa); from step 6 rnmt "
            "1.0 (git bbbbbbbbbb)") in resumed["warnings"]
    assert json.loads((tmp_path / "train.json").read_text())["code"] == resumed["code"]


def test_a_run_resumed_on_another_machine_says_it_was_timed_on_both(
        corpus: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A SLURM job killed at its time limit and retried on another node, or a run copied elsewhere and
    resumed: train.json's speed sums both processes, so its hardware must not name the last one alone; a
    process resumed after the run had ended trains nothing and names no machine."""
    import rnmt.train.progress as progress
    from rnmt.report import ran

    real, on = progress.describe, {"cpu": "CPU A"}
    monkeypatch.setattr(progress, "describe", lambda device: {**real(device), **on})
    first = trainer(corpus, tmp_path, max_steps=6).run()
    assert first["hardware"]["cpu"] == "CPU A" and "machines" not in first
    assert first["hardware"]["fast_paths"] == real(torch.device("cpu"))["fast_paths"]   # as it ended
    on["cpu"] = "CPU B"
    resumed = trainer(corpus, tmp_path, max_steps=12).run()
    assert resumed["steps"] == 12
    assert [m["cpu"] for m in resumed["machines"]] == ["CPU A", "CPU B"] and resumed["hardware"]["cpu"] == "CPU B"
    on["cpu"] = "CPU C"
    again = trainer(corpus, tmp_path, max_steps=12).run()          # the run had ended: no step on CPU C
    assert [m["cpu"] for m in again["machines"]] == ["CPU A", "CPU B"] and again["hardware"]["cpu"] == "CPU B"
    alone = {"train": {**resumed, "machines": resumed["machines"][1:]}}
    why = ran.apart({"train": resumed}, alone, "train_tgt_words_per_s")
    assert why.startswith("trained on cpu CPU A") and " and cpu CPU B" in why, why


def test_the_job_log_says_where_training_stands(corpus: dict[str, Path], tmp_path: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    """Off a terminal every log_every steps give one line: step of the budget, the loss and perplexity
    over those steps, speed, training time and the time left."""
    import logging
    import re

    with caplog.at_level(logging.INFO, logger="rnmt.train.trainer"):
        trainer(corpus, tmp_path, max_steps=10, log_every=5, valid_every=10).run()
    lines = [r.getMessage() for r in caplog.records if "target tokens/s" in r.getMessage()]
    assert len(lines) == 2
    assert re.match(r"step 5/10 \(50% of the budget\), epoch 0 \| loss \d+\.\d{3}, ppl \d+\.\d{2} over the last 5 "
                    r"steps \| [\d,]+ target tokens/s \| lr 0\.003 \| [\d.]+ s training, about [\d.]+ s left$",
                    lines[0]), lines[0]
    loss = float(re.search(r"loss (\d+\.\d+)", lines[0]).group(1))
    ppl = float(re.search(r"ppl (\d+\.\d+)", lines[0]).group(1))
    assert ppl == pytest.approx(math.exp(loss), rel=2e-3)
    assert lines[1].startswith("step 10/10 (100% of the budget)") and "about 0.0 s left" in lines[1]

    # train.jsonl keeps the line's numbers: the window's loss beside the one update's at the log step
    logged = [json.loads(x) for x in (tmp_path / "train.jsonl").read_text().splitlines()]
    means = [r["mean_loss"] for r in logged if r["kind"] == "train"]
    assert [f"{m:.3f}" for m in means] == [re.search(r"loss (\d+\.\d+)", x).group(1) for x in lines]
    # ...which is the token-weighted mean of the window's updates (the same run, logged every step)
    trainer(corpus, tmp_path / "every", max_steps=10, log_every=1, valid_every=10).run()
    each = [json.loads(x) for x in (tmp_path / "every/train.jsonl").read_text().splitlines()]
    each = [r for r in each if r["kind"] == "train"]
    assert all(r["mean_loss"] == r["loss"] for r in each)
    for k, mean in enumerate(means):
        window = each[5 * k:5 * k + 5]
        tokens = sum(r["tokens_per_update"] for r in window)
        assert mean == pytest.approx(sum(r["loss"] * r["tokens_per_update"] for r in window) / tokens, rel=1e-6)
    assert means[0] != pytest.approx(each[4]["loss"], rel=1e-6)      # not the update at the log step


def test_the_time_left_counts_the_validations_still_to_come() -> None:
    """Half of a 100-step budget in 50 s, five validations so far that took 25 s: 50 s of steps and five
    more validations of 5 s each are left."""
    from rnmt.train.progress import LogWindow

    s = TrainSettings.from_dict({"max_steps": 100, "valid_every": 10, "log_every": 10})
    w = LogWindow()
    w.add(2.0, 100, 1.0)
    assert w.line(s, 50, 1, 50.0, 0.5, 0.001, valid_seconds=25.0, validations=5).endswith(
        "50.0 s training, about 1m15s left")
    assert w.line(s, 50, 1, 50.0, 0.5, 0.001).endswith("about 50.0 s left")     # none yet: steps only



def test_a_resumed_log_replays_the_records_even_of_an_older_rnmt() -> None:
    """The lines a resumed trainer writes first, from train.jsonl: a log-step record as its line said it
    (less the time left), a validation, a restart; one written before the window's means were recorded
    shows its update's numbers, and a record missing what its line needs is left out, not a traceback."""
    from rnmt.train.progress import replayed

    s = TrainSettings.from_dict({"max_steps": 100, "log_every": 10, "select_by": "bleu"})
    step = {"kind": "train", "step": 10, "epoch": 0, "loss": 5.0, "mean_loss": 6.0, "lr": 0.001,
            "tgt_tokens_per_s": 900.0, "mean_tgt_tokens_per_s": 1200.0, "train_seconds": 12.0}
    old = {k: v for k, v in step.items() if not k.startswith("mean_")} | {"step": 20}
    lines = replayed(s, [step, old, {"kind": "valid", "step": 20, "dev_ppl": 95.5, "dev_bleu": 3.456},
                         {"kind": "valid", "step": 30},
                         {"kind": "retrain", "step": 30, "from_step": 20, "lr_factor": 0.5}])
    assert lines == [
        "step 10/100 (10% of the budget), epoch 0 | loss 6.000, ppl 403.43 over the last 10 steps | 1,200 target "
        "tokens/s | lr 0.001 | 12.0 s training",
        "step 20/100 (20% of the budget), epoch 0 | loss 5.000, ppl 148.41 over the last 10 steps | 900 target "
        "tokens/s | lr 0.001 | 12.0 s training",
        "validation at step 20: dev ppl 95.500, greedy dev BLEU 3.46",
        "the dev bleu stopped improving: restarting from step 20 at 0.5 × lr"]

# ---- checkpoint averaging ---------------------------------------------------------------------------
def test_the_last_validations_are_kept_and_average_into_a_translatable_model(corpus: dict[str, Path],
                                                                             tmp_path: Path) -> None:
    """keep_checkpoints: 3 keeps the last three validations' weights; `rnmt average-checkpoints` of the
    folder is their element-wise mean, in a checkpoint that `rnmt translate` reads like model.pt."""
    from rnmt.models import checkpoint

    trainer(corpus, tmp_path, max_steps=30, keep_checkpoints=3).run()          # validations at 5, 10, ..., 30
    kept = checkpoint.validation_checkpoints(tmp_path)
    assert [p.name for p in kept] == ["step20.pt", "step25.pt", "step30.pt"]
    states = [checkpoint.load(p)["state_dict"] for p in kept]
    assert not torch.equal(states[0]["tgt_emb.weight"], states[2]["tgt_emb.weight"])
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    r = subprocess.run([sys.executable, "-m", "rnmt", "average-checkpoints", str(tmp_path), "--last", "2",
                        "--output", str(tmp_path / "avg.pt")], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    avg = checkpoint.load(tmp_path / "avg.pt")
    assert avg["averaged_steps"] == [25, 30]
    for k, v in avg["state_dict"].items():
        assert v.dtype == states[1][k].dtype
        assert torch.allclose(v, (states[1][k].double() + states[2][k].double()).div(2).to(v.dtype)), k
    out = tmp_path / "hyp.txt"
    r = subprocess.run([sys.executable, "-m", "rnmt", "translate", "--model", str(tmp_path / "avg.pt"),
                        str(corpus["dev_src"]), str(out)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert len(out.read_text().splitlines()) == len(corpus["dev_src"].read_text().splitlines())


def test_checkpoints_of_different_models_are_not_averaged(corpus: dict[str, Path], tmp_path: Path) -> None:
    from rnmt.io import InputError
    from rnmt.models import checkpoint

    trainer(corpus, tmp_path / "a", max_steps=5).run()
    trainer(corpus, tmp_path / "b", model={**MODEL, "hidden": MODEL["hidden"] + 2}, max_steps=5).run()
    with pytest.raises(InputError, match="its model_config differs"):
        checkpoint.average([tmp_path / "a/model.pt", tmp_path / "b/model.pt"], tmp_path / "x.pt")
    with pytest.raises(InputError, match="keep_checkpoints"):
        checkpoint.average(checkpoint.validation_checkpoints(tmp_path / "a"), tmp_path / "x.pt")


# ---- TensorBoard --------------------------------------------------------------------------------------
def test_tensorboard_holds_the_same_curves_as_train_jsonl(corpus: dict[str, Path], tmp_path: Path) -> None:
    """tensorboard: true writes each train.jsonl record's numbers as `<kind>/<name>` scalars at its step."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    trainer(corpus, tmp_path, max_steps=10, log_every=2, tensorboard=True).run()
    records = [json.loads(x) for x in (tmp_path / "train.jsonl").read_text().splitlines()]
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    for kind, name in (("train", "loss"), ("train", "lr"), ("valid", "dev_ppl")):
        want = [(r["step"], r[name]) for r in records if r["kind"] == kind]
        got = [(e.step, e.value) for e in events.Scalars(f"{kind}/{name}")]
        assert [s for s, _ in got] == [s for s, _ in want] and want
        assert [v for _, v in got] == pytest.approx([v for _, v in want], rel=1e-6)


def test_a_resumed_run_shows_each_step_once_in_tensorboard(corpus: dict[str, Path], tmp_path: Path) -> None:
    """The events an interrupted run wrote after its last checkpoint are hidden when it resumes, as its
    train.jsonl records are dropped; a fresh start removes old events."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def scalars(tag: str) -> list[tuple[int, float]]:
        events = EventAccumulator(str(tmp_path / "tensorboard"))
        events.Reload()
        return [(e.step, e.value) for e in events.Scalars(tag)]

    settings = {"log_every": 1, "valid_every": 5, "tensorboard": True}
    trainer(corpus, tmp_path, max_steps=10, **settings).run()
    shutil.copy(tmp_path / "last.pt", tmp_path / "step10.pt")
    trainer(corpus, tmp_path, max_steps=13, **settings).run()                # events up to step 13 ...
    shutil.copy(tmp_path / "step10.pt", tmp_path / "last.pt")               # ... but the state saved is step 10's
    trainer(corpus, tmp_path, max_steps=18, **settings).run()
    records = [json.loads(x) for x in (tmp_path / "train.jsonl").read_text().splitlines()]
    want = [(r["step"], r["loss"]) for r in records if r["kind"] == "train"]
    got = scalars("train/loss")
    assert [s for s, _ in got] == [s for s, _ in want] == list(range(1, 19))
    assert [v for _, v in got] == pytest.approx([v for _, v in want], rel=1e-6)
    trainer(corpus, tmp_path, max_steps=4, log_every=1, valid_every=2, lr=0.001, tensorboard=True).run()  # afresh
    assert [s for s, _ in scalars("train/loss")] == [1, 2, 3, 4]


def test_tensorboard_off_writes_no_event_files(corpus: dict[str, Path], tmp_path: Path) -> None:
    trainer(corpus, tmp_path, max_steps=5).run()
    assert not (tmp_path / "tensorboard").exists()


def test_translate_takes_the_workflows_decoding_settings_as_one_json(corpus: dict[str, Path], tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The translate rule passes a variant's decoding settings as one `--settings` JSON, checked as the
    plan checks them; a single flag still goes over it."""
    from rnmt.cli import main

    trainer(corpus, tmp_path, max_steps=5).run()
    model, src = str(tmp_path / "model.pt"), str(corpus["dev_src"])
    speed = {}
    for name, args in (("json", ["--settings", json.dumps({"beam": 3, "length_penalty": "none"})]),
                       ("flags", ["--beam", "3", "--length-penalty", "none"]),
                       ("over", ["--settings", json.dumps({"beam": 7, "length_penalty": "none"}), "--beam", "3"])):
        assert main(["-q", "translate", "--model", model, *args, "--speed-beams", "--metrics",
                     str(tmp_path / f"{name}.json"), src, str(tmp_path / f"{name}.txt")]) == 0
        speed[name] = json.loads((tmp_path / f"{name}.json").read_text())
        assert (speed[name]["beam"], speed[name]["length_penalty"]) == (3, "none"), name
    assert (tmp_path / "json.txt").read_text() == (tmp_path / "flags.txt").read_text() == \
        (tmp_path / "over.txt").read_text()
    zero = ["--settings", json.dumps({"length_penalty": "gnmt", "alpha": 0.6}), "--alpha", "0", "--max-len-extra", "0"]
    assert main(["-q", "translate", "--model", model, *zero, "--speed-beams", "--metrics", str(tmp_path / "z.json"),
                 src, str(tmp_path / "z.txt")]) == 0
    assert json.loads((tmp_path / "z.json").read_text())["alpha"] == 0        # a flag of 0 goes over the JSON too
    assert main(["-q", "translate", "--model", model, "--settings", '{"beem": 3}', src, str(tmp_path / "x")]) == 2
    assert "unknown decoding setting(s) beem (did you mean beam?)" in capsys.readouterr().err


# ---- a multi-reference dev set ------------------------------------------------------------------------
def test_dev_bleu_scores_against_every_reference_of_a_multi_reference_dev_set(corpus, tmp_path) -> None:
    """DTMT selects its checkpoint by BLEU on NIST MT06, which has four references: the extra references
    beside the tokenized dev reference (<file>.refN) join the dev BLEU, cut to the pairs the dev set kept,
    and are part of the model's input identity (a resume on other references is another run)."""
    from rnmt.data.bpe import undo
    from rnmt.decode.translate import translate_ids
    from rnmt.io import InputError
    from rnmt.train.validation import dev_bleu

    base = trainer(corpus, tmp_path / "one")
    dev = base.dev_data
    greedy = [undo(base.tgt_vocab.decode(h))
              for h in translate_ids(base.model, dev.src, beam=1, batch_size=8, device=base.device)]
    alone = dev_bleu(base.model, dev, base.tgt_vocab, base.device, 8)
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "dev.tgt").write_text(corpus["dev_tgt"].read_text())
    (tok / "dev.tgt.ref1").write_text("\n".join(greedy) + "\n")        # a reference equal to the output
    s = base.s
    multi = Trainer(MODEL, s, corpus["train_src"], corpus["train_tgt"], corpus["dev_src"], corpus["dev_tgt"],
                    corpus["src_vocab"], corpus["tgt_vocab"], tmp_path / "four", dev_ref=tok / "dev.tgt")
    assert multi.dev_refs == [greedy] and "dev_ref2" in multi.inputs and "dev_ref2" not in base.inputs
    assert alone < 100
    assert dev_bleu(multi.model, dev, multi.tgt_vocab, multi.device, 8, multi.dev_refs) == pytest.approx(100)
    (tok / "dev.tgt.ref1").write_text("\n".join(greedy[:-1]) + "\n")
    with pytest.raises(InputError, match=r"dev.tgt.ref1: 19 lines, but the dev set has 20"):
        Trainer(MODEL, s, corpus["train_src"], corpus["train_tgt"], corpus["dev_src"], corpus["dev_tgt"],
                corpus["src_vocab"], corpus["tgt_vocab"], tmp_path / "short", dev_ref=tok / "dev.tgt")
