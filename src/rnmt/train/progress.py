"""Where training stands (`Progress`, saved in last.pt), what a job log says about it every `log_every`
steps (the step against the budget, the loss and perplexity over those steps, speed, training time and
the time left) and the run's metrics at the end (train.json)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from rnmt.machine import hardware
from rnmt.progress import clock
from rnmt.provenance import describe, provenance
from rnmt.train.settings import TrainSettings


@dataclass
class Progress:
    """Where training stands; saved in last.pt so that a resumed run continues exactly."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0             # batches of the current epoch already trained on
    epoch_rng_state: Any = None         # the batch-order RNG at the start of the current epoch
    train_seconds: float = 0.0          # optimisation steps only (validation excluded)
    valid_seconds: float = 0.0          # the validations' (for the time left in the job log)
    src_words: int = 0
    tgt_words: int = 0
    tgt_tokens: int = 0
    stale: int = 0                      # validations since the last improvement
    lr_factor: float = 1.0              # SR-NMT retraining multiplies it by plateau_factor
    retrains_done: int = 0
    # each return to the best checkpoint (`plateau_retrains`): the step it happened at, the checkpoint's step and
    # the rate factor after it, for train.json (a table says which rows trained part of their budget slower)
    retrained: list[dict[str, Any]] = field(default_factory=list)
    skipped_batches: int = 0            # NaN/inf losses skipped (nan_policy=skip)
    # CUDA graphs captured and steps replayed over the whole run (a retrain's fresh optimizer and a resumed
    # process capture their graphs anew)
    graph_captures: int = 0
    graph_replays: int = 0
    load_sum: float = 0.0               # the machine's load average summed over the log steps…
    load_samples: int = 0               # …and how many were taken (train.json's hardware.load_avg)
    # the code each process that trained this run started with (`provenance()` and the step it began at):
    # one entry, or one more each time the run was resumed on other code
    code: list[dict[str, Any]] = field(default_factory=list)
    # the machine each process that trained this run ran on (`describe()` with bfloat16, and the step it began
    # at): one entry, or one more each time the run was resumed on another kind of machine
    machines: list[dict[str, Any]] = field(default_factory=list)
    best: dict[str, Any] = field(default_factory=dict)
    curve: list[dict[str, Any]] = field(default_factory=list)

    def sample_load(self) -> None:
        """Add the machine's load average now to the training's mean (taken at every log step)."""
        load = hardware.load_average()
        if load is not None:
            self.load_sum += load
            self.load_samples += 1

    @property
    def load_avg(self) -> float | None:
        return round(self.load_sum / self.load_samples, 2) if self.load_samples else None


def budget_done(s: TrainSettings, step: int, train_seconds: float, epoch: int, batch_in_epoch: int,
                epoch_batches: int) -> float | None:
    """The share of the training budget done: steps, else minutes, else epochs (None: unknown)."""
    if s.max_steps:
        return min(step / s.max_steps, 1.0)
    if s.max_minutes:
        return min(train_seconds / (60 * s.max_minutes), 1.0)
    if s.max_epochs and epoch_batches:
        return min((epoch + batch_in_epoch / epoch_batches) / s.max_epochs, 1.0)
    return None


@dataclass
class LogWindow:
    """The updates since the last log line: their token-weighted loss, target tokens and seconds."""

    loss: float = 0.0
    tokens: int = 0
    seconds: float = 0.0

    def add(self, mean_loss: float, tokens: int, seconds: float) -> None:
        self.loss += mean_loss * tokens
        self.tokens += tokens
        self.seconds += seconds

    @property
    def mean_loss(self) -> float:
        return self.loss / max(self.tokens, 1)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / max(self.seconds, 1e-9)

    def record(self, p: Progress, loss: float, tokens: int, seconds: float, lr: float,
               memory_mb: float) -> dict[str, Any]:
        """train.jsonl's record at a log step: `loss` the update's at the step, mean_loss the window's (the
        log line's, what the plots draw); the same for target tokens per second."""
        return {"kind": "train", "step": p.step, "epoch": p.epoch, "loss": loss, "mean_loss": self.mean_loss,
                "lr": lr, "tokens_per_update": tokens, "train_seconds": round(p.train_seconds, 3),
                "tgt_tokens_per_s": tokens / seconds, "mean_tgt_tokens_per_s": self.tokens_per_s,
                "memory_mb": round(memory_mb, 1)}

    def line(self, s: TrainSettings, step: int, epoch: int, train_seconds: float, done: float | None,
             lr: float, valid_seconds: float = 0.0, validations: int = 0) -> str:
        """One line for a job log. Training time excludes validation; the time left includes the validations
        still to come in a step budget, at the mean time of those so far."""
        eta = (train_seconds * (1 - done) / done) if done else None
        if eta is not None and s.max_steps and validations:
            eta += (s.max_steps // s.valid_every - step // s.valid_every) * valid_seconds / validations
        return progress_line(s, step, epoch, self.mean_loss, self.tokens_per_s, lr, train_seconds, done, eta)


def progress_line(s: TrainSettings, step: int, epoch: int, mean_loss: float, tokens_per_s: float, lr: float,
                  train_seconds: float, done: float | None, eta: float | None) -> str:
    """A job log's line every `log_every` steps: the step against the budget, the loss and perplexity over
    those steps, speed, training time and (where known) the time left."""
    where = f"step {step}" + (f"/{s.max_steps}" if s.max_steps else "")
    if done is not None:
        where += f" ({100 * done:.0f}% of the budget)"
    return (f"{where}, epoch {epoch} | loss {mean_loss:.3f}, ppl {math.exp(min(mean_loss, 50.0)):.2f} over the last "
            f"{s.log_every} steps | {tokens_per_s:,.0f} target tokens/s | lr {lr:.2g} | "
            f"{clock(train_seconds)} training" + (f", about {clock(eta)} left" if eta is not None else ""))


def validation_line(rec: dict[str, Any]) -> str:
    """A job log's line for a validation record."""
    return (f"validation at step {rec['step']}: dev ppl {rec['dev_ppl']:.3f}"
            + (f", greedy dev BLEU {rec['dev_bleu']:.2f}" if "dev_bleu" in rec else ""))


def retrain_line(select_by: str, rec: dict[str, Any]) -> str:
    """A job log's line for a restart from the best checkpoint (a retrain record)."""
    return (f"the dev {select_by} stopped improving: restarting from step {rec['from_step']} at "
            f"{rec['lr_factor']:.3g} × lr")


def replayed(s: TrainSettings, records: list[dict[str, Any]]) -> list[str]:
    """The job log's lines of a run's records (train.jsonl), as the lines said them then, less the time left:
    what a resumed job writes first, since its scheduler started its log afresh. A record without the
    fields its line needs (written by an older rnmt) is left out rather than stopping the resume; a log-step
    record without the window's means shows the one update's."""
    lines = []
    for rec in records:
        try:
            if rec["kind"] == "train":
                done = budget_done(s, rec["step"], rec["train_seconds"], rec["epoch"], 0, 0)
                lines.append(progress_line(s, rec["step"], rec["epoch"], rec.get("mean_loss", rec["loss"]),
                                           rec.get("mean_tgt_tokens_per_s", rec["tgt_tokens_per_s"]), rec["lr"],
                                           rec["train_seconds"], done, None))
            elif rec["kind"] == "valid":
                lines.append(validation_line(rec))
            elif rec["kind"] == "retrain":
                lines.append(retrain_line(s.select_by, rec))
        except KeyError:
            continue
    return lines


def started_with(code: list[dict[str, Any]], step: int) -> list[dict[str, Any]]:
    """`code` (Progress.code) with the code this process starts with, read now rather than when train.json
    is written hours later from a checkout that may have moved on, added where it differs from the last."""
    here = provenance()
    if code and all(code[-1].get(k) == v for k, v in here.items()):
        return code
    return [*code, {"from_step": step, **here}]


# what makes two processes' machines one kind for a speed (the device's index aside: two GPUs of one kind are
# one machine); rnmt.report.ran.machine names a machine by the same keys
MACHINE_KEYS = ("cpu", "cpu_family_model", "cpu_isa", "torch_threads", "gpu", "bf16_autocast")


def _kind(m: dict[str, Any]) -> tuple[Any, ...]:
    return (str(m.get("device", "")).split(":")[0], *(m.get(k) for k in MACHINE_KEYS))


def ran_on(machines: list[dict[str, Any]], step: int, device: torch.device, bf16: bool) -> list[dict[str, Any]]:
    """`machines` (Progress.machines) with the machine this process trains on, added where it is another kind
    than the last's (a job resumed on another node, or on a copy of the run elsewhere)."""
    # as JSON has it: last.pt is read back with torch's weights-only loader, which takes plain types only
    here = json.loads(json.dumps({k: v for k, v in describe(device).items() if k != "load_avg"}, default=str))
    here["bf16_autocast"] = bf16
    if machines and _kind(machines[-1]) == _kind(here):
        return machines
    return [*machines, {"from_step": step, **here}]


def trained_on(machines: list[dict[str, Any]], step: int) -> list[dict[str, Any]]:
    """Of `machines`, those whose process trained at least one step of a run now at `step` (a process resumed
    after the run had ended trains none, and times nothing); the first where none did."""
    if not machines:
        return []
    ends = [m["from_step"] for m in machines[1:]] + [step]
    return [m for m, end in zip(machines, ends, strict=True) if end > m["from_step"]] or machines[:1]


def code_warnings(code: list[dict[str, Any]]) -> list[str]:
    """A warning where the run was resumed on other code than it started with (another version, commit, or
    state of uncommitted changes): its numbers are not one version's."""
    if len(code) < 2:
        return []
    return ["trained by more than one version of rnmt: " + "; ".join(
        f"from step {c['from_step']} rnmt {c.get('rnmt_version')} (git {(c.get('git_commit') or '?')[:10]}"
        f"{', uncommitted changes' if c.get('git_dirty') else ''})" for c in code)]


def run_metrics(p: Progress, s: TrainSettings, stop_reason: str | None, *, params: int, train_pairs: int,
                accumulate: int, world: int, device: torch.device, model_config: dict[str, Any],
                bf16: bool) -> dict[str, Any]:
    """train.json: the run's size, budget use, speed (optimisation time only), best validation and where
    it ran."""
    secs = p.train_seconds
    now = {**describe(device), "bf16_autocast": bf16}
    ran = trained_on(p.machines, p.step)
    if not ran or ran[-1] is p.machines[-1] and _kind(ran[-1]) == _kind(now):
        ran = [*ran[:-1], now]                  # this process's machine as it ends (the paths it measured)
    load = p.load_avg if p.load_avg is not None else now.get("load_avg")
    machines = [{k: v for k, v in m.items() if k not in ("from_step", "load_avg")}
                | ({"load_avg": load} if load is not None else {}) for m in ran]
    return {
        "params": params,
        "steps": p.step,
        "epochs_completed": p.epoch,
        "stop_reason": stop_reason,
        "train_seconds": round(secs, 3),
        "train_src_words_per_s": p.src_words / secs if secs else 0.0,
        "train_tgt_words_per_s": p.tgt_words / secs if secs else 0.0,
        "train_tgt_tokens_per_s": p.tgt_tokens / secs if secs else 0.0,
        "train_pairs": train_pairs,
        "skipped_batches": p.skipped_batches,
        "retrains": p.retrains_done,
        "retrained": p.retrained,
        "best_step": p.best.get("step"),
        "best_dev_loss": p.best.get("dev_loss"),
        "best_dev_ppl": p.best.get("dev_ppl"),
        "best_dev_bleu_greedy": p.best.get("dev_bleu"),
        "select_by": s.select_by,
        "accumulate": accumulate,
        "tokens_per_update": p.tgt_tokens / p.step if p.step else 0.0,
        "world_size": world,
        "peak_memory_mb": round(hardware.peak_memory_mb(device), 1),
        "model_config": model_config,
        "train_settings": asdict(s),
        # the machine that trained it (the last one that did where it was resumed on another, each then in
        # `machines`), with the load average over the log steps (the one now where the run logged none)
        "hardware": machines[-1],
        **({"machines": machines} if len(machines) > 1 else {}),
        # the code that started the run (`code` has every process's where it was resumed on other code)
        **{k: v for k, v in (p.code[0] if p.code else provenance()).items() if k != "from_step"},
        "code": p.code,
    }
