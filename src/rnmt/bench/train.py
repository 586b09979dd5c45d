"""`rnmt bench train`: training words/s of whole models, the rows of ATR Table 4 (RNNSearch with GRU,
LSTM, RAN, ATR, ATR+CA) and SR-NMT Table 1 (LSTM 2L, SRU 3L, SR-NMT 1L/2L), at one small configuration,
each with its ratio to RNNSearch+GRU (ATR Table 4's comparison) and to LSTM 2L (SR-NMT Table 1's).
Each row is its table's system (architecture, cell, model options, from the systems files) at the
benchmark's sizes.

A training step is the trainer's: teacher-forced forward in train mode (dropout on; in bfloat16 autocast
where the trainer's default `amp` takes it, column `bf16_autocast`), token-level cross-entropy, backward,
gradient clipping at 1, an Adam update. The batch is random token ids with lengths spread over the upper
half of the maximum, so padding and masks are exercised. Words/s counts
target tokens (</s> included, as the trainer's tokens/s). FLOPs: the matrix products of one forward
pass, counted by torch's FlopCounterMode, times 3 for forward+backward.

Each row trains in its own process (`TraineeProcess`), as a training job does, and the parent steps them
in turn. With all nine models in one process they shared one heap: its fragmentation grew it for rounds
after the warm-up, and a step that grew it page-faulted its new memory in (SR-NMT 2L: 20,000-190,000
minor faults, up to 750 MB, in 3 of 5 timed steps, 0.86-1.08 s per step against 0.74 s in a process of
its own). `page_faults` records the median minor page faults of a row's timed steps (0 in steady state).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import random
import statistics
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from rnmt import allocator, hardware, matmul
from rnmt.bench.timing import Peak, environment, measure
from rnmt.cells.base import use_path
from rnmt.config import ConfigError, load_yaml
from rnmt.data.batching import Batch, pad
from rnmt.models import build_model
from rnmt.models.base import Seq2Seq
from rnmt.provenance import CHECKOUT
from rnmt.systems import load_systems
from rnmt.train.loss import token_loss
from rnmt.train.settings import TrainSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Row:
    table: str
    system: str
    arch: str
    settings: dict[str, Any]


SYSTEMS = (("atr-table4", "RNNSearch+GRU"), ("atr-table4", "RNNSearch+LSTM"), ("atr-table4", "RNNSearch+RAN"),
           ("atr-table4", "RNNSearch+ATR"), ("atr-table4", "RNNSearch+ATR+CA"), ("srnmt-table1", "LSTM 2L"),
           ("srnmt-table1", "SRU 3L"), ("srnmt-table1", "SR-NMT 1L"), ("srnmt-table1", "SR-NMT 2L"))
SIZES = ("emb", "hidden", "dropout", "rnn_dropout")      # the benchmark's own (Config; dropout: the model's)
QUICK_ROWS = ("RNNSearch+GRU", "RNNSearch+ATR", "RNNSearch+ATR+CA", "LSTM 2L", "SR-NMT 1L")
BASELINE = "RNNSearch+GRU"
LSTM_2L = "LSTM 2L"          # SR-NMT Table 1's reference row


def rows(root: Path | None = None) -> list[Row]:
    """Each benchmarked row as its table trains it (its system's architecture, cell and model options, from
    the systems files of the checkout at `root`: by default the working directory where it is a checkout,
    else the checkout rnmt runs from), without the system's sizes."""
    if root is None:
        root = Path(".") if (Path(".") / "workflow/experiments").is_dir() else CHECKOUT
    if not (root / "workflow/experiments").is_dir():
        raise ConfigError(f"bench train: {root.resolve()} has no workflow/experiments; run it from the checkout's "
                          "root (the rows are the tables' systems)")
    systems = load_systems(root / "workflow/systems", root / "workflow/schemas")
    out = []
    for table, name in SYSTEMS:
        path = root / "workflow/experiments" / f"{table}.yaml"
        found = [r for r in systems.resolve(load_yaml(path), path)["rows"] if r["system"] == name and "arch" in r]
        if not found:
            raise ConfigError(f"bench train: {path} has no trained row {name!r}")
        r = found[0]
        model = {k: v for k, v in (r.get("model") or {}).items() if k not in SIZES}
        out.append(Row(table, name, r["arch"], {**({"cell": r["cell"]} if "cell" in r else {}), **model}))
    return out


@dataclass(frozen=True)
class Config:
    emb: int
    hidden: int
    vocab: int
    batch: int
    max_len: int


FULL = Config(emb=512, hidden=512, vocab=8000, batch=80, max_len=30)
QUICK = Config(emb=128, hidden=128, vocab=2000, batch=32, max_len=15)


def random_batch(cfg: Config, device: torch.device, seed: int = 0) -> Batch:
    """Random ids (above the special tokens) with lengths in [max_len/2, max_len]."""
    rng = random.Random(seed)

    def sentence() -> list[int]:
        return [rng.randrange(4, cfg.vocab) for _ in range(rng.randint(cfg.max_len // 2, cfg.max_len))]

    src_seqs = [sentence() for _ in range(cfg.batch)]
    tgt_seqs = [sentence() for _ in range(cfg.batch)]
    src, src_mask = pad(src_seqs, eos=True)
    tgt_in, _ = pad(tgt_seqs, bos=True)
    tgt_out, tgt_mask = pad(tgt_seqs, eos=True)
    return Batch(src, src_mask, tgt_in, tgt_out, int(tgt_mask.sum()), sum(map(len, src_seqs)),
                 sum(map(len, tgt_seqs))).to(device)


def loss_of(model: Seq2Seq, b: Batch) -> torch.Tensor:
    logits = model(b.src, b.src_mask, b.tgt_in)
    return token_loss(logits, b.tgt_out) / b.tgt_tokens


def forward_flops(model: Seq2Seq, b: Batch) -> int:
    """The FLOPs of one forward pass as FlopCounterMode counts them. It sees torch's own products only (not
    oneDNN's, nor those inside a fused recurrent layer), so the count runs on the BLAS and the step loops."""
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), matmul.backend("blas"), use_path("loop"), counter:
        loss_of(model, b)
    return counter.get_total_flops()


class Trainee:
    """One row's model, optimiser and batch, ready to take timed training steps."""

    def __init__(self, row: Row, cfg: Config, device: torch.device) -> None:
        torch.manual_seed(0)
        self.row, self.cfg, self.device = row, cfg, device
        self.model = build_model(row.arch, cfg.vocab, cfg.vocab, emb=cfg.emb, hidden=cfg.hidden,
                                 **row.settings).to(device)
        self.model.train()
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-4)
        self.batch = random_batch(cfg, device)
        self.params = sum(p.numel() for p in self.model.parameters())
        self.bf16 = hardware.bf16_training(device, TrainSettings().amp, self.params)
        self.seconds: list[float] = []
        self.faults: list[int] = []              # minor page faults of each timed step

    def step(self) -> None:
        with hardware.autocast(self.device, self.bf16):
            loss = loss_of(self.model, self.batch)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()

    def timed_step(self) -> None:
        before = allocator.minor_faults()
        self.seconds.append(measure(self.step, self.device, warmup=0, reps=1).seconds[0])
        self.faults.append(allocator.minor_faults() - before)

    def result(self) -> dict[str, Any]:
        row, cfg, b = self.row, self.cfg, self.batch
        t = statistics.median(self.seconds)
        flops = 3 * forward_flops(self.model, b)
        log.info("%s: %.0f target words/s", row.system, b.tgt_tokens / t)
        return {"table": row.table, "system": row.system, "arch": row.arch, "emb": cfg.emb, "hidden": cfg.hidden,
                "vocab": cfg.vocab, "batch": cfg.batch, "params": self.params,
                "step_seconds": t, "tgt_words_per_s": b.tgt_tokens / t, "src_words_per_s": b.src_words / t,
                "gflops": flops / t / 1e9, "reps": len(self.seconds),
                "page_faults": int(statistics.median(self.faults)) if self.faults else 0,
                "bf16_autocast": self.bf16}


def _serve(conn: Any, row: Row, cfg: Config, device: str, threads: int) -> None:
    """A TraineeProcess's body: build the row's Trainee, then answer (command) with ("ok", value) or
    ("error", traceback) until "stop"."""
    try:
        allocator.keep_freed_memory()                # as `rnmt train` does
        torch.set_num_threads(threads)
        trainee = Trainee(row, cfg, torch.device(device))
        actions = {"warmup": trainee.step, "step": trainee.timed_step, "result": trainee.result}
        conn.send(("ok", None))
        while (command := conn.recv()) != "stop":
            conn.send(("ok", actions[command]()))
    except Exception:                                # noqa: BLE001 - sent to the parent, which raises it
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


class TraineeProcess:
    """A row's Trainee in a process of its own (spawned: a forked child would inherit torch's thread pools),
    stepped on command; the step is timed inside it."""

    def __init__(self, row: Row, cfg: Config, device: torch.device) -> None:
        self.row = row
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, row, cfg, str(device), torch.get_num_threads()),
                                   name=f"bench {row.system}", daemon=True)
        self.process.start()
        child.close()

    def call(self, command: str) -> Any:
        """Send one command ("warmup", "step", "result") and return its answer."""
        try:
            self.conn.send(command)
        except (BrokenPipeError, ConnectionResetError, OSError) as e:
            raise self._died() from e
        return self.ready()

    def ready(self) -> Any:
        """The process's next answer (the first one says its model is built); a failure there, or the
        process dying, raises with the row's name."""
        try:
            status, value = self.conn.recv()
        except (EOFError, ConnectionResetError) as e:
            raise self._died() from e
        if status != "ok":
            raise RuntimeError(f"bench train: {self.row.system} failed in its process:\n{value}")
        return value

    def _died(self) -> RuntimeError:
        self.process.join(5)
        return RuntimeError(f"bench train: the process of {self.row.system} died (exit code "
                            f"{self.process.exitcode}; out of memory?)")

    def close(self) -> None:
        if self.process.is_alive():
            with contextlib.suppress(BrokenPipeError, OSError):
                self.conn.send("stop")
            self.process.join(10)
            if self.process.is_alive():
                self.process.kill()
        self.conn.close()


def bench(device: torch.device, quick: bool = False, systems: tuple[str, ...] | None = None,
          cfg: Config | None = None, root: Path | None = None) -> list[dict[str, Any]]:
    """Every row's training step, each row in its own process, the rows interleaved: each repetition times
    one step of every row in turn, so a machine that speeds up or slows down during the run (frequency,
    other processes) moves all rows alike instead of the ratios (two back-to-back runs of rows measured one
    after the other had RNNSearch+GRU at 2,213 and 1,905 words/s). The row processes are spawned, so a
    script that calls this needs the `if __name__ == "__main__":` guard (`rnmt bench train` has it)."""
    cfg = cfg or (QUICK if quick else FULL)
    warmup, reps = (3, 2) if quick else (3, 5)      # a fresh process takes about 3 steps to stop growing its heap
    every = rows(root)
    wanted = systems or (QUICK_ROWS if quick else tuple(r.system for r in every))
    if BASELINE not in wanted:
        wanted = (BASELINE, *wanted)
    peak = Peak(device, quick)
    trainees = [TraineeProcess(r, cfg, device) for r in every if r.system in wanted]
    try:
        for t in trainees:
            t.ready()
        for t in trainees:
            for _ in range(warmup):
                t.call("warmup")
        for i in range(reps):
            for t in trainees:
                t.call("step")
            peak.sample(quick=True)
            log.info("round %d of %d done", i + 1, reps)
        results = [t.call("result") for t in trainees]
    finally:
        for t in trainees:
            t.close()
    peak.sample()
    env = environment(device, peak)
    speed = {r["system"]: r["tgt_words_per_s"] for r in results}
    return [{**r, "ratio_to_rnnsearch_gru": r["tgt_words_per_s"] / speed[BASELINE],
             "ratio_to_lstm_2l": r["tgt_words_per_s"] / speed[LSTM_2L] if LSTM_2L in speed else "",
             "fraction_of_peak": r["gflops"] / peak.best, **env} for r in results]


COLUMNS = ("table", "system", "params", "tgt_words_per_s", "ratio_to_rnnsearch_gru", "ratio_to_lstm_2l",
           "step_seconds", "gflops", "fraction_of_peak", "page_faults")
