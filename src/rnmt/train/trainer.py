"""The training loop: batches, optimiser, schedule, validation, checkpoints, logs and metrics.

Writes into `out_dir`:
  model.pt      the checkpoint with the best dev loss (the file later stages read)
  last.pt       the latest checkpoint
  train.jsonl   one record per logged step (loss, lr, tokens/s) and per validation (dev loss, BLEU)
  train.json    the run's metrics (parameters, steps, time, words/s, best dev scores, hardware)
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import sacrebleu
import torch
import torch.nn.functional as F
from tqdm import tqdm

from rnmt import hardware
from rnmt.data.batching import ParallelData, bucketed_batches, load_parallel, make_batch
from rnmt.data.bpe import undo
from rnmt.data.vocab import PAD_ID, Vocab
from rnmt.decode.translate import translate_ids
from rnmt.io import InputError, write_json
from rnmt.models import Seq2Seq, build_model
from rnmt.train import checkpoint, schedules

log = logging.getLogger(__name__)


@dataclass
class TrainSettings:
    seed: int = 1
    batch_size: int = 80
    max_len: int = 80                  # subwords per side; longer training pairs are skipped
    optimizer: str = "adam"
    lr: float = 5e-4
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    clip: float = 5.0
    schedule: str = "constant"
    label_smoothing: float = 0.0
    init_scale: float = 0.08           # uniform ±init_scale for every parameter (ATR paper); 0 keeps defaults
    max_epochs: int = 10
    max_steps: int = 0                 # 0: no limit
    max_minutes: float = 0.0           # 0: no limit; training time only (validation excluded)
    valid_every: int = 500             # steps
    valid_bleu: bool = True            # greedy dev BLEU at each validation
    patience: int = 0                  # validations without dev-loss improvement before stopping; 0: off
    log_every: int = 50
    threads: int = 0                   # CPU threads for torch; 0: torch's default
    device: str = "auto"
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainSettings:
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise InputError(f"unknown training setting(s) {', '.join(unknown)}; valid: {', '.join(sorted(names))}")
        d = dict(d)
        if "betas" in d:
            d["betas"] = tuple(d["betas"])
        return cls(**d)


def seed_everything(seed: int) -> random.Random:
    random.seed(seed)
    torch.manual_seed(seed)
    return random.Random(seed)


def initialise(model: Seq2Seq, scale: float) -> None:
    if scale > 0:
        for p in model.parameters():
            torch.nn.init.uniform_(p, -scale, scale)


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def dev_loss(model: Seq2Seq, data: ParallelData, batch_size: int, device: torch.device) -> float:
    """Mean per-token cross-entropy on `data` (no label smoothing, no dropout)."""
    was = model.training
    model.eval()
    total, tokens = 0.0, 0
    order = sorted(range(len(data)), key=lambda i: len(data.src[i]))
    for s in range(0, len(order), batch_size):
        b = make_batch(data, order[s:s + batch_size]).to(device)
        logits = model(b.src, b.src_mask, b.tgt_in)
        total += float(F.cross_entropy(logits.flatten(0, 1).float(), b.tgt_out.flatten(),
                                       ignore_index=PAD_ID, reduction="sum"))
        tokens += b.tgt_tokens
    model.train(was)
    return total / max(tokens, 1)


def dev_bleu(model: Seq2Seq, data: ParallelData, tgt_vocab: Vocab, device: torch.device,
             batch_size: int) -> float:
    """Greedy tokenized BLEU on the dev set, subwords joined (a cheap progress signal)."""
    hyps = translate_ids(model, data.src, beam=1, batch_size=batch_size, device=device)
    sys_lines = [undo(tgt_vocab.decode(h)) for h in hyps]
    refs = [undo(tgt_vocab.decode(t)) for t in data.tgt]
    return sacrebleu.corpus_bleu(sys_lines, [refs], tokenize="none", force=True).score


@dataclass
class Progress:
    """Where training stands: counters, the best validation so far, the validation curve."""

    step: int = 0
    epoch: int = 0
    train_seconds: float = 0.0          # optimisation steps only (validation excluded)
    src_words: int = 0
    tgt_words: int = 0
    tgt_tokens: int = 0
    stale: int = 0                      # validations since the last improvement
    best: dict[str, Any] = field(default_factory=dict)
    curve: list[dict[str, Any]] = field(default_factory=list)


class Trainer:
    def __init__(self, model_config: dict[str, Any], settings: TrainSettings, train_src: Path,
                 train_tgt: Path, dev_src: Path, dev_tgt: Path, src_vocab: Path, tgt_vocab: Path,
                 out_dir: Path) -> None:
        self.s = settings
        self.out_dir = Path(out_dir)
        self.model_config = dict(model_config)
        if settings.threads > 0:
            torch.set_num_threads(settings.threads)
        self.device = hardware.pick_device(settings.device)
        self.rng = seed_everything(settings.seed)
        self.src_vocab, self.tgt_vocab = Vocab.load(src_vocab), Vocab.load(tgt_vocab)
        self.train_data = load_parallel(train_src, train_tgt, self.src_vocab, self.tgt_vocab, settings.max_len)
        self.dev_data = load_parallel(dev_src, dev_tgt, self.src_vocab, self.tgt_vocab)
        cfg = dict(self.model_config)
        self.model = build_model(cfg.pop("arch"), len(self.src_vocab), len(self.tgt_vocab), **cfg)
        initialise(self.model, settings.init_scale)
        self.model.to(self.device)
        if settings.optimizer != "adam":
            raise InputError(f"unknown optimizer {settings.optimizer!r}; valid optimizers: adam")
        self.opt = torch.optim.Adam(self.model.parameters(), lr=settings.lr, betas=settings.betas,
                                    eps=settings.eps)
        self.schedule = schedules.get(settings.schedule)

    def _save(self, name: str, extra: dict[str, Any]) -> None:
        checkpoint.save(self.out_dir / name, self.model, self.model_config, self.src_vocab, self.tgt_vocab,
                        extra)

    # ---- the loop --------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        s = self.s
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.model.train()
        self.p = Progress()
        self.bar = tqdm(total=s.max_steps or None, desc="train", unit="step", mininterval=5.0,
                        disable=None)   # a bar on a terminal; log lines in a log file
        with open(self.out_dir / "train.jsonl", "w", encoding="utf-8") as self.logf:
            stop: str | None = None
            while stop is None:
                lengths = [len(t) for t in self.train_data.tgt]
                for idx in bucketed_batches(lengths, s.batch_size, self.rng):
                    self._train_step(idx)
                    stop = self._limit_reached()
                    if (stop or self.p.step % s.valid_every == 0) and self._validate() and not stop:
                        stop = "patience"
                    if stop:
                        break
                else:
                    self.p.epoch += 1
                    if self.p.epoch >= s.max_epochs:
                        stop = "max_epochs"
            if not self.p.curve or self.p.curve[-1]["step"] != self.p.step:
                self._validate()
        self.bar.close()
        metrics = self._metrics(stop)
        write_json(self.out_dir / "train.json", metrics)
        return metrics

    def _record(self, rec: dict[str, Any]) -> None:
        self.logf.write(json.dumps(rec) + "\n")
        self.logf.flush()

    def _train_step(self, idx: list[int]) -> None:
        s, p, model = self.s, self.p, self.model
        t0 = time.perf_counter()
        lr = s.lr * self.schedule(p.step, p.epoch)
        for g in self.opt.param_groups:
            g["lr"] = lr
        b = make_batch(self.train_data, idx).to(self.device)
        logits = model(b.src, b.src_mask, b.tgt_in)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), b.tgt_out.flatten(), ignore_index=PAD_ID,
                               label_smoothing=s.label_smoothing, reduction="sum") / b.tgt_tokens
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if s.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), s.clip)
        self.opt.step()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        dt = time.perf_counter() - t0
        p.step += 1
        p.train_seconds += dt
        p.src_words += b.src_words
        p.tgt_words += b.tgt_words
        p.tgt_tokens += b.tgt_tokens
        self.bar.update(1)
        if p.step % s.log_every == 0:
            value = loss.item()
            self.bar.set_postfix(loss=f"{value:.3f}", epoch=p.epoch)
            if self.bar.disable:
                log.info("step %d epoch %d loss %.3f lr %.2g %.0f target tokens/s", p.step, p.epoch, value, lr,
                         b.tgt_tokens / dt)
            self._record({"kind": "train", "step": p.step, "epoch": p.epoch, "loss": value, "lr": lr,
                          "train_seconds": round(p.train_seconds, 3), "tgt_tokens_per_s": b.tgt_tokens / dt})

    def _limit_reached(self) -> str | None:
        s, p = self.s, self.p
        if s.max_steps and p.step >= s.max_steps:
            return "max_steps"
        if s.max_minutes and p.train_seconds >= 60 * s.max_minutes:
            return "max_minutes"
        return None

    def _validate(self) -> bool:
        """Score the dev set, keep the best checkpoint; True when patience has run out."""
        s, p = self.s, self.p
        rec: dict[str, Any] = {"kind": "valid", "step": p.step, "epoch": p.epoch,
                               "train_seconds": round(p.train_seconds, 3)}
        rec["dev_loss"] = dev_loss(self.model, self.dev_data, s.batch_size, self.device)
        rec["dev_ppl"] = math.exp(min(rec["dev_loss"], 50.0))
        if s.valid_bleu:
            rec["dev_bleu"] = dev_bleu(self.model, self.dev_data, self.tgt_vocab, self.device, s.batch_size)
        self._record(rec)
        p.curve.append(rec)
        log.info("validation at step %d: dev ppl %.3f%s", p.step, rec["dev_ppl"],
                 f", greedy dev BLEU {rec['dev_bleu']:.2f}" if "dev_bleu" in rec else "")
        if rec["dev_loss"] < p.best.get("dev_loss", math.inf):
            p.best = rec
            p.stale = 0
            self._save("model.pt", {"step": p.step, "dev_loss": rec["dev_loss"]})
        else:
            p.stale += 1
        self._save("last.pt", {"step": p.step})
        return s.patience > 0 and p.stale >= s.patience

    def _metrics(self, stop_reason: str | None) -> dict[str, Any]:
        p, secs = self.p, self.p.train_seconds
        return {
            "params": count_parameters(self.model),
            "steps": p.step,
            "epochs_completed": p.epoch,
            "stop_reason": stop_reason,
            "train_seconds": round(secs, 3),
            "train_src_words_per_s": p.src_words / secs if secs else 0.0,
            "train_tgt_words_per_s": p.tgt_words / secs if secs else 0.0,
            "train_tgt_tokens_per_s": p.tgt_tokens / secs if secs else 0.0,
            "train_pairs": len(self.train_data),
            "best_step": p.best.get("step"),
            "best_dev_loss": p.best.get("dev_loss"),
            "best_dev_ppl": p.best.get("dev_ppl"),
            "best_dev_bleu_greedy": p.best.get("dev_bleu"),
            "model_config": self.model_config,
            "train_settings": asdict(self.s),
            "hardware": hardware.describe(self.device),
        }
