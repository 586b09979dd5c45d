"""The training loop: batches, optimiser, schedule, validation, checkpoints, logs and metrics.

Writes into `out_dir`:
  model.pt      the checkpoint with the best dev loss, or dev BLEU with `select_by: bleu` (the file later
                stages read)
  last.pt       the latest full training state (model, optimiser, progress, RNG streams, data position),
                from which an interrupted run resumes and ends with the same weights as an uninterrupted one
  train.jsonl   one record per logged step (loss, lr, tokens per update, tokens/s, memory) and per
                validation (dev loss, BLEU)
  train.json    the run's metrics (parameters, steps, time, words/s, best dev scores, hardware)

An update sums the gradients of `accumulate` batches (by default `replicas`, the paper's GPUs: DTMT's
8 GPUs of 4,096 tokens are 8 batches of 4,096 an update, on one process or shared by several).

SIGTERM or SIGUSR1 (a cluster's warning before its time limit) saves last.pt at the next step boundary
and stops with TrainingInterrupted; rerunning the same command resumes, and a run that had already
reached its budget (steps, epochs, minutes or patience) trains no further step. Snakemake deletes a
failed job's outputs (model.pt, train.jsonl) before the retry: both have a checked copy from which a
resumed run restores them, and one trainer at a time holds the folder (`rnmt.train.outputs`).
"""

from __future__ import annotations

import logging
import math
import os
import random
import signal
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from rnmt.cells.taken import taken_paths
from rnmt.data.batching import Batch, epoch_batches, load_parallel, make_batch
from rnmt.data.vocab import Vocab
from rnmt.io import InputError, write_json
from rnmt.machine import fastpath, hardware
from rnmt.models import build_model, checkpoint, factors
from rnmt.models.init import initialise
from rnmt.models.pretrained import load_source_vectors
from rnmt.train import distributed, graphs, outputs, progress, resume, schedules
from rnmt.train.loss import token_loss
from rnmt.train.optim import load_optimizer_state, make_optimizer, set_lr
from rnmt.train.progress import LogWindow, Progress, budget_done, code_warnings, ran_on, run_metrics, started_with
from rnmt.train.records import TrainLog
from rnmt.train.settings import TrainSettings, accumulation
from rnmt.train.validation import UNLEARNED, dev_bleu, dev_loss, extra_references, frequency_loss, learning, stalled

log = logging.getLogger(__name__)


class TrainingInterrupted(Exception):
    """A signal asked training to stop; last.pt holds the state to resume from."""


class TrainingDiverged(Exception):
    """The loss became NaN or infinite (with nan_policy=stop)."""


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


class Trainer:
    def __init__(self, model_config: dict[str, Any], settings: TrainSettings, train_src: Path,
                 train_tgt: Path, dev_src: Path, dev_tgt: Path, src_vocab: Path, tgt_vocab: Path,
                 out_dir: Path, train_src_labels: Path | None = None, dev_src_labels: Path | None = None,
                 src_label_vocab: Path | None = None, dev_ref: Path | None = None) -> None:
        self.s = settings
        self.out_dir = Path(out_dir)
        labelled = [x is not None for x in (train_src_labels, dev_src_labels, src_label_vocab)]
        if any(labelled) and not all(labelled):
            raise InputError("source labels need all three of --train-src-labels, --dev-src-labels and "
                             "--src-label-vocab")
        self.label_vocab = Vocab.load(src_label_vocab) if src_label_vocab is not None else None
        self.model_config = factors.resolve(model_config, [len(self.label_vocab)] if self.label_vocab else [])
        if settings.threads > 0:
            torch.set_num_threads(settings.threads)
        self.rank, self.world = distributed.rank_and_world()
        self.accumulate = accumulation(settings)
        self.device = hardware.pick_device(settings.device, self.rank)
        random.seed(settings.seed)
        torch.manual_seed(settings.seed)
        self.rng = random.Random(settings.seed)
        inputs = {
            "train_src": train_src, "train_tgt": train_tgt, "dev_src": dev_src, "dev_tgt": dev_tgt,
            "src_vocab": src_vocab, "tgt_vocab": tgt_vocab, "train_src_labels": train_src_labels,
            "dev_src_labels": dev_src_labels, "src_label_vocab": src_label_vocab,
            "pretrained_src": settings.pretrained_src or None}
        self.src_vocab, self.tgt_vocab = Vocab.load(src_vocab), Vocab.load(tgt_vocab)
        self.train_data = load_parallel(train_src, train_tgt, self.src_vocab, self.tgt_vocab, settings.max_len,
                                        train_src_labels, self.label_vocab, settings.max_len_unit)
        self.dev_data = load_parallel(dev_src, dev_tgt, self.src_vocab, self.tgt_vocab, None, dev_src_labels,
                                      self.label_vocab)
        self.frequency_loss = frequency_loss(self.train_data, self.dev_data, len(self.tgt_vocab))
        # a multi-reference dev set (NIST MT06) selects models by BLEU against all its references
        extra = extra_references(dev_ref, self.dev_data) if dev_ref else {}
        self.dev_refs = list(extra.values())
        inputs.update({f"dev_ref{k}": p for k, p in enumerate(extra, 2)})
        self.inputs, self.input_files = resume.input_identity(inputs, self.out_dir)
        cfg = dict(self.model_config)
        self.model = build_model(cfg.pop("arch"), len(self.src_vocab), len(self.tgt_vocab), **cfg)
        initialise(self.model, settings.init, settings.init_scale)
        # what the user should know of this run: train.json, the tables
        self.warnings = (load_source_vectors(self.model, settings.pretrained_src, self.src_vocab)
                         if settings.pretrained_src else [])
        self.model.to(self.device)
        self.bf16 = hardware.bf16_training(self.device, settings.amp, count_parameters(self.model))
        self.replica = distributed.replicate(self.model, self.world, self.device)   # what a training step calls
        self.graphs_off = graphs.unsupported(settings.optimizer, self.accumulate, self.world, self.device) \
            if settings.cuda_graphs else "the setting cuda_graphs is off"
        if settings.cuda_graphs and self.graphs_off and self.device.type == "cuda":
            log.info("cuda_graphs: training eagerly, since %s", self.graphs_off)
        self.graphed: graphs.GraphedSteps | None = None
        self.opt = self._optimizer()
        self.schedule = schedules.get(settings.schedule, warmup_steps=settings.warmup_steps,
                                      decay_start=settings.decay_start, decay_end=settings.decay_end,
                                      replicas=settings.replicas)
        self.p = Progress()
        self._signal: int | None = None
        self._window = LogWindow()
        self._epoch_batches = 0
        self.records: TrainLog | None = None          # rank 0's, while training runs

    def _optimizer(self) -> torch.optim.Optimizer:
        """The run's optimizer; with CUDA graphs, Adam as they need it, and the graphs that use it (captured
        anew for a new optimizer)."""
        s = self.s
        if self.graphs_off:
            return make_optimizer(s.optimizer, self.model.parameters(), s.lr, s.betas, s.eps, s.rho)
        opt = graphs.graph_optimizer(list(self.model.parameters()), s.lr, s.betas, s.eps, self.device)
        self.graphed = graphs.GraphedSteps(self.model, opt, s.clip, s.label_smoothing, self.bf16, self.device,
                                           0 if s.batch_tokens else s.batch_size)
        return opt

    # ---- checkpoints ------------------------------------------------------------------------------
    def _save(self, name: str, extra: dict[str, Any]) -> None:
        if self.rank == 0:
            checkpoint.save(self.out_dir / name, self.model, self.model_config, self.src_vocab, self.tgt_vocab,
                            {**extra, "inputs": self.inputs}, self.label_vocab)

    def _last_good(self) -> str:
        last = self.out_dir / "last.pt"
        return (f"the last good state is in {last} (rerunning resumes from it) and the best weights in model.pt"
                if last.is_file() else "no checkpoint had been saved yet")

    def _save_state(self) -> None:
        if self.s.nan_policy == "stop" and not all(bool(torch.isfinite(p).all()) for p in self.model.parameters()):
            raise TrainingDiverged(f"step {self.p.step}: the weights are no longer finite, so they were not saved; "
                                   f"{self._last_good()}. Lower lr or clip")
        if self.records is not None:
            # from the open log, which Snakemake may have deleted under a trainer it no longer runs
            outputs.keep(self.records.path, self.records.content())
        self._save("last.pt", {"step": self.p.step, "progress": asdict(self.p), "optimizer": self.opt.state_dict(),
                               "rng": resume.rng_state(self.rng, self.device), "settings": asdict(self.s),
                               "fast_paths": fastpath.chosen()})

    def _keep(self, name: str) -> None:
        if self.rank == 0:
            outputs.keep(self.out_dir / name)

    def _maybe_resume(self) -> None:
        path = self.out_dir / "last.pt"
        if not (self.s.resume and path.is_file()):
            return
        ckpt = checkpoint.load(path, self.device)
        why = resume.reasons(ckpt, self.model_config, self.src_vocab, self.tgt_vocab, self.label_vocab, self.s,
                             self.inputs)
        if why:
            if self.rank == 0:
                outputs.supersede(self.out_dir, why)
            return
        self.model.load_state_dict(ckpt["state_dict"])
        load_optimizer_state(self.opt, ckpt["optimizer"])
        self.p = Progress(**ckpt["progress"])
        fastpath.adopt(ckpt.get("fast_paths") or {})       # the paths of the first start, as its numbers are
        if self.rank == 0:
            outputs.restore_finished(self.out_dir, self.p.best.get("step") if self.p.best else None)
        resume.restore_rng(ckpt["rng"], self.rng, self.device)
        log.info("resumed from %s at step %d (epoch %d, batch %d)", path, self.p.step, self.p.epoch,
                 self.p.batch_in_epoch)

    # ---- the loop -----------------------------------------------------------------------------------
    def _on_signal(self, signum: int, frame: Any) -> None:
        self._signal = signum

    def run(self) -> dict[str, Any]:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        lock = outputs.lock_folder(self.out_dir) if self.rank == 0 else None
        try:
            return self._run()
        finally:
            if lock is not None:
                os.close(lock)

    def _run(self) -> dict[str, Any]:
        s = self.s
        self._maybe_resume()
        self.p.code = started_with(self.p.code, self.p.step)
        self.p.machines = ran_on(self.p.machines, self.p.step, self.device, self.bf16)
        self.model.train()
        if self.rank == 0 and self.accumulate > 1:
            log.info("each update sums %d batches (replicas %d), shared by %d process(es)", self.accumulate,
                     s.replicas, self.world)
        old_handlers = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGUSR1)}
        self.bar = tqdm(total=s.max_steps or None, initial=self.p.step, desc="train", unit="step",
                        mininterval=5.0, disable=None if self.rank == 0 else True)
        try:
            if self.rank == 0:
                self.records = TrainLog(self.out_dir, self.p.step, s.tensorboard)
                if self.p.step:     # Snakemake starts a rerun's log afresh: what it said before, from the records
                    log.info("this run's log up to step %d, from %s:", self.p.step, self.records.path)
                    for line in progress.replayed(s, self.records.read()):
                        log.info("  %s", line)
            self._keep("train.jsonl")
            stop = self._loop()
            if not self.p.curve or self.p.curve[-1]["step"] != self.p.step:
                self._validate()        # also saves last.pt; a validation at the last step already did
        finally:
            self.bar.close()
            if self.records is not None:
                self.records.close()
                self.records = None
            for sig, handler in old_handlers.items():
                signal.signal(sig, handler)
        metrics = run_metrics(self.p, self.s, stop, params=count_parameters(self.model),
                              train_pairs=len(self.train_data), accumulate=self.accumulate, world=self.world,
                              device=self.device, model_config=self.model_config, bf16=self.bf16)
        learned, warned = learning(self.p.curve, self.frequency_loss)
        metrics.update(learned, inputs=self.inputs, input_files=self.input_files,
                       warnings=self.warnings + warned + code_warnings(self.p.code))
        metrics["data_parallel"] = distributed.describe(self.world)
        metrics["paths"] = taken_paths()             # the kind of path each recurrence trained on
        metrics["cuda_graphs"] = {"off": self.graphs_off} if self.graphed is None else \
            {**self.graphed.summary(), "graphs": self.p.graph_captures, "replays": self.p.graph_replays}
        if self.rank == 0:
            write_json(self.out_dir / "train.json", metrics)
        return metrics

    def _loop(self) -> str:
        s, p = self.s, self.p
        done = ("max_epochs" if p.epoch >= s.max_epochs else None) or self._limit_reached() \
            or self._patience_exhausted()
        if done:                                      # resumed after the end: not one step more
            log.info("the run had already ended at step %d (%s)", p.step, done)
            return done
        while True:
            if p.batch_in_epoch == 0:
                p.epoch_rng_state = self.rng.getstate()
            else:                                     # resumed mid-epoch: the same batch order again
                self.rng.setstate(p.epoch_rng_state)
            batches = epoch_batches(self.train_data.src, self.train_data.tgt, s.batch_size, s.batch_tokens, self.rng)
            self._epoch_batches = len(batches)
            batches = batches[p.batch_in_epoch:]
            for first in range(0, len(batches), self.accumulate):
                group = batches[first:first + self.accumulate]
                self._train_step(group)
                p.batch_in_epoch += len(group)
                stop = self._limit_reached()
                if (stop or p.step % s.valid_every == 0) and self._validate() and not stop:
                    stop = "patience"
                elif s.checkpoint_every and p.step % s.checkpoint_every == 0:
                    self._save_state()
                if distributed.any_rank(self._signal is not None, self.world, self.device):
                    self._save_state()
                    raise TrainingInterrupted(f"signal {self._signal or 'on another rank'} at step {p.step}; "
                                              f"{self.out_dir / 'last.pt'} saved: rerun the same command to resume")
                if stop:
                    return stop
            p.epoch += 1
            p.batch_in_epoch = 0
            if p.epoch >= s.max_epochs:
                return "max_epochs"

    def _record(self, rec: dict[str, Any]) -> None:
        if self.records is not None:
            self.records.write(rec)

    def _train_step(self, group: list[list[int]]) -> None:
        """One update from a group of batches (`accumulate` of them): the gradient of their summed loss over
        all their target tokens, which is the gradient of one batch as large as the group."""
        s, p, model = self.s, self.p, self.model
        t0, measuring0 = time.perf_counter(), fastpath.measuring_seconds()
        lr = s.lr * p.lr_factor * self.schedule(p.step, p.epoch)
        set_lr(self.opt, lr)
        parts = [make_batch(self.train_data, idx[self.rank::self.world]) for idx in group]
        tokens = distributed.global_sum(sum(b.tgt_tokens for b in parts), self.world, self.device)
        replayed = self.graphed.step(parts[0], tokens, tally=p) if self.graphed is not None else None
        if replayed is None:
            summed = self._eager_gradients(parts, tokens)
        total = distributed.global_loss(summed if replayed is None else replayed, self.world).item()   # one sync
        if not math.isfinite(total):                 # a non-finite loss leaves non-finite gradients: none applied
            if s.nan_policy == "skip":
                self.opt.zero_grad(set_to_none=replayed is None)
                p.skipped_batches += 1
                log.warning("step %d: loss is %s, batch skipped (%d so far)", p.step, total, p.skipped_batches)
                return
            raise TrainingDiverged(f"step {p.step}: the training loss is {total}; {self._last_good()}. Lower lr or "
                                   "clip, or set nan_policy: skip")
        if replayed is None:                         # a replayed graph has clipped and updated already
            if s.clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), s.clip)
            if self.graphed is not None:
                self.graphed.before_eager_step()
            self.opt.step()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        dt = time.perf_counter() - t0 - (fastpath.measuring_seconds() - measuring0)    # the step's own time
        p.step += 1
        p.train_seconds += dt
        p.src_words += sum(b.src_words for b in parts) * self.world
        p.tgt_words += sum(b.tgt_words for b in parts) * self.world
        p.tgt_tokens += tokens
        self.bar.update(1)
        self._window.add(total, tokens, dt)
        if p.step % s.log_every == 0:
            p.sample_load()
            w = self._window
            self.bar.set_postfix(loss=f"{w.mean_loss:.3f}", ppl=f"{math.exp(min(w.mean_loss, 50.0)):.1f}",
                                 epoch=p.epoch)
            if self.bar.disable and self.rank == 0:
                done = budget_done(s, p.step, p.train_seconds, p.epoch, p.batch_in_epoch, self._epoch_batches)
                log.info("%s", w.line(s, p.step, p.epoch, p.train_seconds, done, lr, p.valid_seconds, len(p.curve)))
            self._window = LogWindow()
            self._record(w.record(p, total, tokens, dt, lr, hardware.peak_memory_mb(self.device)))

    def _eager_gradients(self, parts: list[Batch], tokens: int) -> torch.Tensor:
        """The gradient of the update's loss over `tokens` target tokens, batch by batch; → the loss."""
        self.opt.zero_grad(set_to_none=self.graphed is None)     # the graphs' gradients stay where they are
        summed = torch.zeros((), device=self.device)
        for i, b in enumerate(parts):
            b = b.to(self.device)
            with distributed.local_gradients(self.replica, last=i == len(parts) - 1):
                with hardware.autocast(self.device, self.bf16):
                    logits = self.replica(b.src, b.src_mask, b.tgt_in)
                loss = token_loss(logits, b.tgt_out, self.s.label_smoothing) / tokens
                loss.backward()
            summed += loss.detach()
        return summed

    def _limit_reached(self) -> str | None:
        s, p = self.s, self.p
        reason = None
        if s.max_steps and p.step >= s.max_steps:
            reason = "max_steps"
        elif s.max_minutes and p.train_seconds >= 60 * s.max_minutes:
            reason = "max_minutes"
        return distributed.agree(reason, self.world, self.device)

    def _patience_exhausted(self) -> str | None:
        return "patience" if self.s.patience and self.p.stale >= self.s.patience else None

    def _validate(self) -> bool:
        """Score the dev set, keep the best checkpoint; True when training should stop (patience)."""
        s, p = self.s, self.p
        t0 = time.perf_counter()
        rec: dict[str, Any] = {"kind": "valid", "step": p.step, "epoch": p.epoch,
                               "train_seconds": round(p.train_seconds, 3)}
        rec["dev_loss"] = dev_loss(self.model, self.dev_data, s.batch_size, self.device)
        rec["dev_ppl"] = math.exp(min(rec["dev_loss"], 50.0))
        if s.valid_bleu:
            rec["dev_bleu"] = dev_bleu(self.model, self.dev_data, self.tgt_vocab, self.device, s.batch_size,
                                       self.dev_refs)
        rec["valid_seconds"] = round(time.perf_counter() - t0, 3)
        p.valid_seconds += rec["valid_seconds"]
        self._record(rec)
        p.curve.append(rec)
        log.info("%s", progress.validation_line(rec))
        if stalled(rec["dev_loss"], self.frequency_loss):
            log.warning("step %d: dev loss %.3f is not %.0f%% below %.3f, what word frequencies alone give: the "
                        "model has not yet learned to translate", p.step, rec["dev_loss"], 100 * (1 - UNLEARNED),
                        self.frequency_loss)
        if self._improves(rec):
            p.best, p.stale = rec, 0
            self._save("model.pt", {"step": p.step, "dev_loss": rec["dev_loss"], "dev_bleu": rec.get("dev_bleu"),
                                    "select_by": s.select_by})
            self._keep("model.pt")
        else:
            p.stale += 1
        if s.keep_checkpoints:
            self._keep_validation_checkpoint(rec)
        if s.patience and p.stale >= s.patience and p.retrains_done < s.plateau_retrains:
            self._retrain_from_best()
        self._save_state()
        return self._patience_exhausted() is not None

    def _keep_validation_checkpoint(self, rec: dict[str, Any]) -> None:
        """This validation's weights as checkpoints/step<N>.pt; only the last `keep_checkpoints` stay."""
        if self.rank != 0:
            return
        self._save(f"checkpoints/step{rec['step']}.pt", {"step": rec["step"], "dev_loss": rec["dev_loss"],
                                                         "dev_bleu": rec.get("dev_bleu")})
        for old in checkpoint.validation_checkpoints(self.out_dir)[:-self.s.keep_checkpoints]:
            old.unlink(missing_ok=True)

    def _improves(self, rec: dict[str, Any]) -> bool:
        """Whether a validation beats the kept checkpoint: lower dev loss, or with `select_by: bleu` higher
        greedy dev BLEU (DTMT selects and stops by dev BLEU); ties keep the earlier checkpoint."""
        best = self.p.best
        if self.s.select_by == "bleu":
            return not best or rec["dev_bleu"] > best["dev_bleu"]
        return rec["dev_loss"] < best.get("dev_loss", math.inf)

    def _retrain_from_best(self) -> None:
        """SR-NMT section 4: at convergence, continue from the best checkpoint (by dev perplexity, its
        `select_by: loss`) at a lower rate (3e-4 → 1.5e-4), with a fresh optimiser."""
        p = self.p
        best = checkpoint.load(self.out_dir / "model.pt", self.device)
        self.model.load_state_dict(best["state_dict"])
        self.opt = self._optimizer()
        p.lr_factor *= self.s.plateau_factor
        p.retrains_done += 1
        p.stale = 0
        event = {"step": p.step, "from_step": best.get("step"), "lr_factor": p.lr_factor}
        p.retrained.append(event)
        self._record({"kind": "retrain", **event})
        log.info("%s", progress.retrain_line(self.s.select_by, event))
