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

Sizes (`--size`): `default` is one small configuration for every row (emb and hidden 512, vocabulary 8,000,
batch 80); `paper` gives each row its own paper's sizes: the systems file's paper settings (emb, hidden,
batch of sentences, or of tokens for DTMT) and the paper's vocabulary (report/paper_params), with target
lengths averaging 27.5 words (ATR's WMT14 En-De sentences after BPE: the benchmark's assumption), and
adds DTMT Table 1's ShallowRNMT and DTMT#1. `--profile` adds kernels per decoder step, the training
step's kernel count and the GPU-busy fraction (rnmt.bench.profile) to each row; `--graphs` (CUDA) times
the same step again as a replayed CUDA graph (rnmt.train.graphs) after the eager steps.

Each row trains in its own process (`TraineeProcess`), as a training job does, and the parent steps them
in turn: models sharing one process share one heap, whose fragmentation grows it for rounds after the
warm-up, and a step that grows it page-faults its new memory in (measured: benchmarks/README.md, "Whole
models in one process"). `page_faults` records the median minor page faults of a row's timed steps (0 in
steady state).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import random
import re
import statistics
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from rnmt.bench.profile import StepProfile, busy_fraction, step_profile, trace
from rnmt.bench.timing import Peak, environment, matmul_peak, measure
from rnmt.cells.base import use_path
from rnmt.cells.taken import forget_taken, taken_paths
from rnmt.config import ConfigError, load_yaml
from rnmt.data.batching import Batch, pad
from rnmt.machine import allocator, hardware, matmul
from rnmt.models import build_model
from rnmt.models.base import Seq2Seq
from rnmt.planning.systems import load_systems
from rnmt.provenance import CHECKOUT
from rnmt.report import paper_params
from rnmt.train.loss import token_loss
from rnmt.train.settings import TrainSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Config:
    emb: int
    hidden: int
    vocab: int
    batch: int
    max_len: int


FULL = Config(emb=512, hidden=512, vocab=8000, batch=80, max_len=30)
QUICK = Config(emb=128, hidden=128, vocab=2000, batch=32, max_len=15)
PAPER_MAX_LEN = 37          # lengths uniform in [18, 37]: 27.5 target words on average
SIZES_CHOICES = ("default", "paper")


@dataclass(frozen=True)
class Row:
    table: str
    system: str
    arch: str
    settings: dict[str, Any]
    paper: Config             # the row's paper's sizes (`--size paper`)


SYSTEMS = (("atr-table4", "RNNSearch+GRU"), ("atr-table4", "RNNSearch+LSTM"), ("atr-table4", "RNNSearch+RAN"),
           ("atr-table4", "RNNSearch+ATR"), ("atr-table4", "RNNSearch+ATR+CA"), ("atr-table4", "DeepRNNSearch"),
           ("srnmt-table1", "LSTM 2L"),
           ("srnmt-table1", "SRU 3L"), ("srnmt-table1", "SR-NMT 1L"), ("srnmt-table1", "SR-NMT 2L"))
PAPER_SYSTEMS = (("dtmt-table1", "ShallowRNMT"), ("dtmt-table1", "DTMT#1"))      # only at `--size paper`
SIZES = ("emb", "hidden", "dropout", "rnn_dropout")      # the benchmark's own (Config; dropout: the model's)
QUICK_ROWS = ("RNNSearch+GRU", "RNNSearch+ATR", "RNNSearch+ATR+CA", "LSTM 2L", "SR-NMT 1L")
BASELINE = "RNNSearch+GRU"
LSTM_2L = "LSTM 2L"          # SR-NMT Table 1's reference row


def paper_config(table: str, settings: dict[str, Any]) -> Config:
    """A table's paper sizes: its systems file's paper settings and its paper's vocabulary."""
    model, train = settings.get("model") or {}, settings.get("train") or {}
    vocab = paper_params.vocabulary(table.split("-")[0])
    mean_len = (PAPER_MAX_LEN + PAPER_MAX_LEN // 2) / 2
    batch = train.get("batch_size") if not train.get("batch_tokens") else int(train["batch_tokens"] // mean_len)
    return Config(emb=model["emb"], hidden=model["hidden"], vocab=vocab, batch=batch, max_len=PAPER_MAX_LEN)


def rows(root: Path | None = None, paper: bool = False) -> list[Row]:
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
    for table, name in SYSTEMS + (PAPER_SYSTEMS if paper else ()):
        path = root / "workflow/experiments" / f"{table}.yaml"
        exp = systems.resolve(load_yaml(path), path)
        found = [r for r in exp["rows"] if r["system"] == name and "arch" in r]
        if not found:
            raise ConfigError(f"bench train: {path} has no trained row {name!r}")
        r = found[0]
        model = {k: v for k, v in (r.get("model") or {}).items() if k not in SIZES}
        out.append(Row(table, name, r["arch"], {**({"cell": r["cell"]} if "cell" in r else {}), **model},
                       paper_config(table, exp["settings"].get("paper") or {})))
    return out


def random_batch(cfg: Config, device: torch.device, seed: int = 0, tgt_len: int | None = None) -> Batch:
    """Random ids (above the special tokens) with lengths in [max_len/2, max_len]; every target `tgt_len`
    long where given (the profile's two lengths)."""
    rng = random.Random(seed)

    def sentence(length: int | None = None) -> list[int]:
        n = length if length is not None else rng.randint(cfg.max_len // 2, cfg.max_len)
        return [rng.randrange(4, cfg.vocab) for _ in range(n)]

    src_seqs = [sentence() for _ in range(cfg.batch)]
    tgt_seqs = [sentence(tgt_len) for _ in range(cfg.batch)]
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
        self.profiled: StepProfile | None = None
        self.graphed: dict[str, Any] = {}
        self.paths = ""                          # the eager step's paths, kept before the graph phase

    def forward(self, b: Batch | None = None) -> torch.Tensor:
        with hardware.autocast(self.device, self.bf16):
            return loss_of(self.model, b or self.batch)

    def step(self, b: Batch | None = None) -> None:
        loss = self.forward(b)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()

    def timed_step(self) -> None:
        before = allocator.minor_faults()
        self.seconds.append(measure(self.step, self.device, warmup=0, reps=1).seconds[0])
        self.faults.append(allocator.minor_faults() - before)

    def profile(self) -> None:
        """Kernels per decoder step and the GPU-busy fraction (rnmt.bench.profile), at target lengths 16 and
        24 (the source batch stays the row's)."""
        batches = {T: random_batch(self.cfg, self.device, seed=1, tgt_len=T) for T in PROFILE_LENGTHS}
        self.profiled = step_profile(lambda T: self.forward(batches[T]), lambda T: self.step(batches[T]),
                                     PROFILE_LENGTHS, self.device)

    def graph(self) -> None:
        """Time the same step as a replayed CUDA graph (rnmt.train.graphs: the batch padded to its bucket,
        fused capturable Adam), or record why it could not be captured."""
        from rnmt.train.graphs import GraphedSteps, graph_optimizer  # here: the benchmark also times older engines

        rows = self.cfg.batch
        self.paths = described_paths()
        forget_taken()                           # the graph's warm-up records the paths it chose
        self.opt = graph_optimizer(list(self.model.parameters()), 1e-4, (0.9, 0.999), 1e-8, self.device)
        steps = GraphedSteps(self.model, self.opt, 1.0, 0.0, self.bf16, self.device, rows)
        tokens = self.batch.tgt_tokens
        if steps.step(self.batch, tokens) is None:
            self.graphed = {"graph_failed": next(iter(steps.failed.values()))}
            return
        self.graphed["graph_paths"] = described_paths()
        times = measure(lambda: steps.step(self.batch, tokens), self.device, warmup=2, reps=5)
        traced = trace(lambda: steps.step(self.batch, tokens), self.device)
        t = times.median
        self.graphed |= {"graph_step_seconds": t, "graph_tgt_words_per_s": tokens / t,
                         "graph_speedup": statistics.median(self.seconds) / t,
                         "graph_gpu_busy_fraction": busy_fraction(traced.busy_seconds, t),
                         "graph_time_by_kind": traced.top(), "graph_heaviest_kernels": traced.heaviest()}
        log.info("%s, a replayed step: %s", self.row.system, self.graphed["graph_heaviest_kernels"])

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
                "bf16_autocast": self.bf16, "paths": self.paths or described_paths(),
                **(self.profiled.row(t) if self.profiled else {}), **self.graphed}


def described_paths() -> str:
    """The kinds of path this process's recurrences took since paths were last forgotten (cells/base.py
    `taken_paths`), one "computation: path" a recurrence, the computations named by their class."""
    def name(what: str) -> str:                  # a path key without its options: "ATR", "RNNSearch decoder (GRU)"
        while "[" in what:
            what = re.sub(r"\[[^\[\]]*\]", "", what)
        return what

    return "; ".join(sorted({f"{name(what)}: {label}" for what, label in taken_paths().items()}))


PROFILE_LENGTHS = (16, 24)


def _serve(conn: Any, row: Row, cfg: Config, device: str, threads: int) -> None:
    """A TraineeProcess's body: build the row's Trainee, then answer (command) with ("ok", value) or
    ("error", traceback) until "stop"."""
    try:
        allocator.keep_freed_memory()                # as `rnmt train` does
        torch.set_num_threads(threads)
        trainee = Trainee(row, cfg, torch.device(device))
        actions = {"warmup": trainee.step, "step": trainee.timed_step, "profile": trainee.profile,
                   "graph": trainee.graph, "result": trainee.result}
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
        """Send one command ("warmup", "step", "profile", "graph", "result") and return its answer."""
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
          cfg: Config | None = None, root: Path | None = None, size: str = "default",
          profile: bool = False, graphs: bool = False) -> list[dict[str, Any]]:
    """Every row's training step, each row in its own process, the rows interleaved: each repetition times
    one step of every row in turn, so a machine that speeds up or slows down during the run (frequency,
    other processes) moves all rows alike instead of the ratios (benchmarks/README.md, "Whole models in
    one process", has two runs that differed). The row processes are spawned, so a
    script that calls this needs the `if __name__ == "__main__":` guard (`rnmt bench train` has it)."""
    if size not in SIZES_CHOICES:
        raise ConfigError(f"bench train: unknown size {size!r}; valid: {', '.join(SIZES_CHOICES)}")
    warmup, reps = (3, 2) if quick else (3, 5)      # a fresh process takes about 3 steps to stop growing its heap
    every = rows(root, paper=size == "paper")
    wanted = systems or (QUICK_ROWS if quick else tuple(r.system for r in every))
    if BASELINE not in wanted:
        wanted = (BASELINE, *wanted)
    peak = Peak(device, quick)

    def sized(r: Row) -> Config:
        return cfg or (r.paper if size == "paper" else QUICK if quick else FULL)

    trainees = [TraineeProcess(r, sized(r), device) for r in every if r.system in wanted]
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
        phases = [phase for phase, wanted in (("profile", profile), ("graph", graphs and device.type == "cuda"))
                  if wanted]
        for phase in phases:
            for t in trainees:
                start = time.perf_counter()
                t.call(phase)
                log.info("%s of %s: %.1f s", phase, t.row.system, time.perf_counter() - start)
        results = [t.call("result") for t in trainees]
    finally:
        for t in trainees:
            t.close()
    peak.sample()
    env = environment(device, peak)
    # training runs in bfloat16 on a GPU: its products are measured against the card's bfloat16 peak too
    bf16_peak = matmul_peak(device, dtype=torch.bfloat16) if device.type == "cuda" else 0.0
    speed = {r["system"]: r["tgt_words_per_s"] for r in results}
    return [{**r, "size": size, "ratio_to_rnnsearch_gru": r["tgt_words_per_s"] / speed[BASELINE],
             "ratio_to_lstm_2l": r["tgt_words_per_s"] / speed[LSTM_2L] if LSTM_2L in speed else "",
             "fraction_of_peak": r["gflops"] / peak.best,
             **({"peak_bf16_gflops": round(bf16_peak, 1), "fraction_of_bf16_peak": r["gflops"] / bf16_peak}
                if bf16_peak else {}), **env} for r in results]


COLUMNS = ("table", "system", "params", "tgt_words_per_s", "ratio_to_rnnsearch_gru", "ratio_to_lstm_2l",
           "step_seconds", "gflops", "fraction_of_peak", "page_faults")
PROFILE_COLUMNS = ("kernels_per_decoder_step", "kernels_per_step_forward", "kernels_per_step_backward",
                   "gpu_busy_fraction", "time_by_kind", "kernels_per_decoder_step_by_op")
GRAPH_COLUMNS = ("graph_tgt_words_per_s", "graph_speedup", "graph_gpu_busy_fraction", "graph_failed")
GRAPH_PROFILE_COLUMNS = ("graph_time_by_kind",)   # the CSV also has graph_heaviest_kernels (too wide to print)
