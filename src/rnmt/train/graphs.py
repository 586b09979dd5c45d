"""Whole training steps as CUDA graphs, one per bucket of batch shapes (train setting `cuda_graphs`, on by
default).

A recurrent model's training step on a GPU is many small kernels (an RNNSearch decoder step launches
dozens forward and backward, once per target word), and the host's time to launch them, not the GPU's
to run them, bounds its speed (benchmarks/gpu/README.md). A CUDA graph records the kernels of one whole
step once and replays them with one launch.

A graph fixes every shape, so a batch is padded to its bucket (`bucket`): source and target lengths up to
the next multiple of `EDGE`, sentences up to the batch size (token batches: the next multiple of `EDGE`).
Padded source positions are masked, padded target positions are padding (no loss), and a padded sentence is
a lone </s> with an empty target: none of them changes the loss or the gradient of the real sentences
(`pad_to`, tested against the unpadded batch).

What a graph holds: the forward under the run's autocast, the loss over the update's tokens (its scale a
device scalar set before each replay), the backward, gradient clipping, and Adam, fused and capturable,
with its learning rate a device tensor; a non-finite loss skips the update inside the graph (the fused
Adam's `found_inf`, as torch's GradScaler uses it) and the trainer then applies its nan_policy. Gradients
and the optimizer's state are allocated before the first capture, outside the graphs' shared memory pool,
so every graph updates the same tensors.

Where a capture fails (an operation that waits for the host inside the model, a path that cannot be
captured), `GraphedSteps` logs why once and that bucket trains eagerly. The eager step is the reference:
a replay gives the eager step's numbers on the same padded batch bit for bit (tests/test_cuda.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from rnmt.cells.base import graph_safe
from rnmt.data.batching import Batch
from rnmt.data.vocab import BOS_ID, EOS_ID, PAD_ID
from rnmt.machine import hardware
from rnmt.train.loss import token_loss
from rnmt.train.progress import Progress

log = logging.getLogger(__name__)

EDGE = 8               # lengths and token-batch sizes are padded up to a multiple of this
MAX_GRAPHS = 256       # buckets beyond this many train eagerly (Multi30k's batches fill 13; the graphs share
                       # one memory pool, and each capture costs about three eager steps)


def _up(n: int, edge: int = EDGE) -> int:
    return -(-n // edge) * edge


def bucket(batch: Batch, rows: int) -> tuple[int, int, int]:
    """(sentences, source length, target length) of the padded batch; `rows`: the batch size of sentence
    batches (0: token batches, whose sentence count is padded like a length)."""
    n = batch.src.size(0)
    return (max(rows, n) if rows else _up(n), _up(batch.src.size(1)), _up(batch.tgt_in.size(1)))


def pad_to(batch: Batch, shape: tuple[int, int, int]) -> Batch:
    """`batch` padded to (sentences, source length, target length); extra sentences are a lone </s>
    (every factor of a factored source) with an empty target."""
    B, S, T = shape
    n, s, t = batch.src.size(0), batch.src.size(1), batch.tgt_in.size(1)
    src = batch.src.new_full((B, S, *batch.src.shape[2:]), PAD_ID)
    src[:n, :s] = batch.src
    src[n:, 0] = EOS_ID
    mask = torch.zeros(B, S, dtype=torch.bool)
    mask[:n, :s] = batch.src_mask
    mask[n:, 0] = True
    tgt_in = batch.tgt_in.new_full((B, T), PAD_ID)
    tgt_in[:n, :t] = batch.tgt_in
    tgt_in[n:, 0] = BOS_ID
    tgt_out = batch.tgt_out.new_full((B, T), PAD_ID)
    tgt_out[:n, :t] = batch.tgt_out
    return Batch(src, mask, tgt_in, tgt_out, batch.tgt_tokens, batch.src_words, batch.tgt_words)


def graph_optimizer(params: list[nn.Parameter], lr: float, betas: tuple[float, float], eps: float,
                    device: torch.device) -> torch.optim.Adam:
    """Adam as the graphs need it: fused and capturable, its learning rate a device tensor."""
    return torch.optim.Adam(params, lr=torch.tensor(lr, device=device), betas=betas, eps=eps, fused=True,
                            capturable=True)


def unsupported(optimizer: str, accumulate: int, world: int, device: torch.device) -> str | None:
    """Why this run cannot train with CUDA graphs, or None."""
    if device.type != "cuda":
        return f"the device is {device.type}, not CUDA"
    if optimizer != "adam":
        return f"the optimizer is {optimizer} (graphs capture Adam only)"
    if accumulate > 1:
        return f"an update sums {accumulate} batches (graphs capture one batch an update)"
    if world > 1:
        return f"{world} processes train together (graphs capture one process's step)"
    return None


@dataclass
class _Graph:
    batch: Batch               # the static inputs, on the device
    scale: Tensor              # 1 / the update's target tokens
    graph: torch.cuda.CUDAGraph
    loss: Tensor               # the static output: the scaled loss


class GraphedSteps:
    """Training steps by graph replay, captured on first use of each bucket; `step` returns None where the
    bucket trains eagerly (a failed capture, or more buckets than MAX_GRAPHS)."""

    def __init__(self, model: nn.Module, opt: torch.optim.Optimizer, clip: float, label_smoothing: float,
                 bf16: bool, device: torch.device, rows: int) -> None:
        self.model, self.opt, self.clip, self.smoothing = model, opt, clip, label_smoothing
        self.bf16, self.device, self.rows = bf16, device, rows
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.graphs: dict[tuple[int, int, int], _Graph] = {}
        self.failed: dict[tuple[int, int, int], str] = {}
        self.pool: Any = None
        self.found_inf = torch.zeros((), device=device)
        opt.found_inf = self.found_inf      # read by the fused Adam at every step, eager ones too
        self.replays = 0

    def _loss(self, b: Batch, scale: Tensor) -> Tensor:
        with graph_safe(), hardware.autocast(self.device, self.bf16):
            logits = self.model(b.src, b.src_mask, b.tgt_in)
        return token_loss(logits, b.tgt_out, self.smoothing) * scale

    def _prepare(self) -> None:
        """Gradients and optimizer state, allocated once outside every graph (a skipped update initialises
        Adam's state without changing a weight or its step count)."""
        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        self.found_inf.fill_(1.0)
        self.opt.step()
        self.found_inf.zero_()
        self.pool = torch.cuda.graph_pool_handle()

    def _capture(self, key: tuple[int, int, int], batch: Batch, scale: float) -> _Graph:
        if self.pool is None:
            self._prepare()
        b = pad_to(batch, key).to(self.device)
        static = _Graph(b, torch.full((), scale, device=self.device), torch.cuda.CUDAGraph(), torch.zeros(()))
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        # warm-up: kernels compile, paths get chosen; no update, and the random streams stay as they were, so
        # a run that resumes (and captures anew) draws the dropout masks of an uninterrupted one
        with torch.random.fork_rng(devices=[self.device]), torch.cuda.stream(side):
            for _ in range(2):
                self.opt.zero_grad(set_to_none=False)
                self._loss(static.batch, static.scale).backward()
        torch.cuda.current_stream(self.device).wait_stream(side)
        self.opt.zero_grad(set_to_none=False)
        with hardware.capture(static.graph, self.device, self.pool):
            self.opt.zero_grad(set_to_none=False)
            loss = self._loss(static.batch, static.scale)
            loss.backward()
            if self.clip > 0:
                torch.nn.utils.clip_grad_norm_(self.params, self.clip)
            self.found_inf.copy_(torch.logical_not(torch.isfinite(loss)))
            self.opt.step()
        static.loss = loss.detach()      # the replay writes it; its autograd graph is let go
        return static

    def step(self, batch: Batch, tokens: int, tally: Progress | None = None) -> Tensor | None:
        """One update on `batch` (of `tokens` target tokens) by graph replay: the scaled loss (a device scalar
        whose gradient was applied unless it is not finite), or None: train this batch eagerly. `tally`: the
        run's progress, whose counts of captures and replays span its restarts and resumes (this object's
        own span only itself)."""
        key = bucket(batch, self.rows)
        if key in self.failed:
            return None
        static = self.graphs.get(key)
        if static is None:
            if len(self.graphs) >= MAX_GRAPHS:
                return None
            try:
                static = self._capture(key, batch, 1.0 / tokens)
            except Exception as e:       # noqa: BLE001 - any failure to capture: this bucket trains eagerly
                self.failed[key] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
                log.warning("CUDA graph of bucket %s (sentences, source, target) not captured, so it trains "
                            "eagerly: %s", key, self.failed[key])
                if self.pool is not None:     # the failed capture's pool stays marked as recording
                    self.pool = torch.cuda.graph_pool_handle()
                self.opt.zero_grad(set_to_none=False)
                self.found_inf.zero_()
                return None
            self.graphs[key] = static
            if tally is not None:
                tally.graph_captures += 1
            log.info("CUDA graph %d captured for bucket %s (sentences, source, target)", len(self.graphs), key)
        padded = pad_to(batch, key)
        for name in ("src", "src_mask", "tgt_in", "tgt_out"):
            getattr(static.batch, name).copy_(getattr(padded, name), non_blocking=True)
        static.scale.fill_(1.0 / tokens)
        static.graph.replay()
        self.replays += 1
        if tally is not None:
            tally.graph_replays += 1
        return static.loss

    def before_eager_step(self) -> None:
        """An eager update with the graphs' optimizer applies its gradient (no skip flag left set)."""
        self.found_inf.zero_()

    def summary(self) -> dict[str, Any]:
        return {"graphs": len(self.graphs), "replays": self.replays,
                "failed": {"x".join(map(str, k)): why for k, why in self.failed.items()}}
