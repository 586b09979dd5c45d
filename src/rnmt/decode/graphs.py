"""Beam search's decoder step as CUDA graphs (decode setting `cuda_graphs`, on by default; CUDA only).

A search step of a recurrent model is dozens of small kernels for one token per hypothesis, and on a GPU
the host's time to launch them bounds the search (benchmarks/gpu/README.md: at the ATR paper's sizes, 32
sentences decoded together at beam 10 went only 18x as fast as one at a time, with 32x the hypotheses in
each step). `GraphedDecoder` records one model step (`Seq2Seq.step`) once per bucket of shapes and replays
it with one launch. The search's own step on the device (top-k, finished hypotheses, the stopping test:
decode/beam.py `select`, some 50 small kernels) is a second graph per bucket and number of sentences
(`select`), its state kept in buffers of the decoder's (`buffers`) so the graph outlives a batch; the
reorder of the states, whose rows depend on the data, stays eager.

A graph fixes every shape, so:
  - the source is padded to a multiple of `EDGE` positions (masked, so no attention weight reaches them;
    `start`), which lets batches of similar length share their graphs;
  - the hypotheses (rows) go up to the next power of two, and above `POWERS_UP_TO` rows to the next quarter
    octave (`rows_bucket`: 320 rows stay 320, 321 go to 384). A search's rows shrink as its sentences finish
    and leave; the rows above the live ones hold earlier hypotheses' values and their results are not read.
Every graph of one set of state shapes (one padded source length) reads the same input buffers, sized for
the most rows seen, and a tensor the step passes through unchanged (encoder memory, attention keys, the
mask) is copied into its buffer only when the search hands over a new one (a new batch, or after
sentences leave), not at every step. The graphs of the `KEEP` most recent shapes are kept (`translate`
sorts its sentences by length, so a shape once left is rarely met again); at most `MAX_GRAPHS` exist.

A model whose decoder state grows at every step (the Transformer's cache of its target keys and values)
is not replayed: every step would be a new shape. Where a capture fails (an operation that waits for the
host inside a step), the bucket logs why once and runs the step eagerly on the same padded inputs. A
replay gives that eager step's numbers bit for bit (tests/test_cuda.py); the hypotheses equal the unpadded
search's (tests/test_decode_graphs.py, on the CPU through the eager steps, which pad alike).
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from rnmt.cells.base import graph_safe
from rnmt.data.vocab import PAD_ID
from rnmt.machine import hardware
from rnmt.models.base import DecoderState, Seq2Seq

log = logging.getLogger(__name__)

EDGE = 8               # source lengths are padded up to a multiple of this
KEEP = 2               # state shapes (padded source lengths) whose graphs are kept
MAX_GRAPHS = 64        # buckets beyond this many run eagerly
POWERS_UP_TO = 64      # row buckets are powers of two up to this many rows, quarter octaves above
SELECTS_PER_BUCKET = 8 # the search's graphs on one bucket's outputs (numbers of sentences); beyond, eager

Shapes = tuple[tuple[str, tuple[int, ...], torch.dtype], ...]


def rows_bucket(n: int) -> int:
    """The rows a step of `n` hypotheses runs with: the next power of two up to `POWERS_UP_TO`, above it the
    next quarter octave (a multiple of a quarter of the power of two below `n`). Padding a large step to a
    power of two could nearly double its output layer, the step's largest product; on an H100 at beam 10,
    320 rows padded to 512 made the graphed search slower than the eager one (benchmarks/gpu/README.md)."""
    if n <= POWERS_UP_TO:
        return 1 << max(n - 1, 0).bit_length()
    quarter = 1 << ((n - 1).bit_length() - 3)
    return -(-n // quarter) * quarter


def pad_source(src: Tensor, mask: Tensor, edge: int = EDGE) -> tuple[Tensor, Tensor]:
    """`src` [B, S, ...] and `mask` [B, S] padded with masked positions to a multiple of `edge`."""
    extra = -src.size(1) % edge
    if not extra:
        return src, mask
    pad = src.new_full((src.size(0), extra, *src.shape[2:]), PAD_ID)
    return torch.cat([src, pad], 1), torch.cat([mask, mask.new_zeros(mask.size(0), extra)], 1)


@dataclass
class _Inputs:
    """The step's input buffers for one set of state shapes, `rows` rows each."""
    rows: int
    prev: Tensor
    state: dict[str, Tensor]
    # the caller's tensor each buffer holds now, weakly: the search's encoder tensors are freed with it
    copied: dict[str, weakref.ref[Tensor]] = field(default_factory=dict)

    @classmethod
    def like(cls, prev: Tensor, state: DecoderState, rows: int) -> _Inputs:
        def grown(x: Tensor) -> Tensor:       # every row a copy of one of x's (valid values throughout)
            return x.index_select(0, torch.arange(rows, device=x.device) % x.size(0)).contiguous()
        return cls(rows, grown(prev), {k: grown(v) for k, v in state.items()})

    def load(self, prev: Tensor, state: DecoderState, constant: frozenset[str]) -> None:
        n = prev.numel()
        self.prev[:n].copy_(prev, non_blocking=True)
        for k, v in state.items():
            held = self.copied.get(k)
            if k in constant and held is not None and held() is v:
                continue                      # the same tensor as last time: its buffer holds it
            self.state[k][:n].copy_(v, non_blocking=True)
            if k in constant:
                self.copied[k] = weakref.ref(v)


@dataclass
class _Bucket:
    inputs: _Inputs
    rows: int
    graph: torch.cuda.CUDAGraph | None     # None: the step runs eagerly on the inputs
    constant: frozenset[str]               # state names the step passes through unchanged
    logp: Tensor | None = None             # a graph's outputs, rewritten by each replay
    out: dict[str, Tensor] = field(default_factory=dict)
    # the search's graphs that read this bucket's log-probabilities (GraphedDecoder.select), by the slice
    # read and the search's buffers; None: that capture failed and the search steps eagerly there
    selects: dict[tuple[Any, ...], tuple[torch.cuda.CUDAGraph, Any] | None] = field(default_factory=dict)

    def run(self, model: Seq2Seq) -> tuple[Tensor, dict[str, Tensor]]:
        if self.graph is None:
            state = DecoderState({k: v[:self.rows] for k, v in self.inputs.state.items()})
            logp, new = model.step(self.inputs.prev[:self.rows], state)
            return logp, {k: v for k, v in new.items() if k not in self.constant}
        self.graph.replay()
        assert self.logp is not None
        return self.logp, self.out


class GraphedDecoder:
    """`start` and `step` of `model` (a Seq2Seq, in eval mode, on `device`) with the steps replayed as CUDA
    graphs; `capture=False` runs every bucket eagerly on the padded inputs (what a failed capture does)."""

    def __init__(self, model: Seq2Seq, device: torch.device, capture: bool = True) -> None:
        self._model = weakref.ref(model)
        self.device, self.capture = device, capture
        self.inputs: dict[Shapes, _Inputs] = {}
        self.buckets: dict[tuple[Shapes, int], _Bucket] = {}
        self.failed: dict[str, str] = {}
        self.pool: Any = None
        self.unsupported = ""                 # why this model's steps cannot be replayed, once found
        self.captured = self.replays = self.eager = 0
        self.search_captured = self.search_replays = 0
        self.last: _Bucket | None = None      # the bucket of the last step, whose outputs a search reads
        self.kept: dict[Any, dict[str, Tensor]] = {}

    @property
    def model(self) -> Seq2Seq:
        model = self._model()
        if model is None:
            raise RuntimeError("the model of these graphs was freed")
        return model

    def _on_device(self) -> contextlib.AbstractContextManager[Any]:
        """The model's GPU as the current device: a graph captures the current device's stream only, so a
        model on cuda:1 captured from cuda:0 would record nothing (`rnmt translate` makes its device current,
        hardware.pick_device; a caller of translate_ids need not)."""
        return torch.cuda.device(self.device) if self.capture else contextlib.nullcontext()

    @contextlib.contextmanager
    def _warm_up(self) -> Iterator[None]:
        """Where a run before a capture goes: a side stream that waits for the current one and is waited for
        after it, as torch asks before a capture (kernels load, workspaces are made); the current stream
        where nothing is captured."""
        if not self.capture:
            yield
            return
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            yield
        torch.cuda.current_stream(self.device).wait_stream(side)

    def start(self, src: Tensor, src_mask: Tensor) -> DecoderState:
        return self.model.start(*pad_source(src, src_mask))

    def step(self, prev: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
        """`model.step(prev, state)`'s log-probabilities and new state: views of the bucket's outputs, valid
        until the next step (beam search reorders the states into new tensors before it); the tensors the
        step passes through are `state`'s own."""
        n = prev.numel()
        shapes: Shapes = tuple((k, tuple(v.shape[1:]), v.dtype) for k, v in state.items())
        rows = rows_bucket(n)
        bucket = self.buckets.get((shapes, rows))
        if bucket is None and not self.unsupported and (len(self.buckets) < MAX_GRAPHS or not self.capture):
            with self._on_device():
                bucket = self._bucket(shapes, rows, prev, state)
        self.last = bucket
        if bucket is None:
            return self.model.step(prev, state)
        bucket.inputs.load(prev, state, bucket.constant)
        with self._on_device():
            logp, out = bucket.run(self.model)
        if bucket.graph is None:
            self.eager += 1
        else:
            self.replays += 1
        new = DecoderState({k: state[k] for k in bucket.constant})
        new.update({k: v[:n] for k, v in out.items()})
        return logp[:n], new

    def buffers(self, key: Any, make: Callable[[], dict[str, Tensor]]) -> dict[str, Tensor]:
        """Tensors kept under `key` for as long as this decoder (made by `make` the first time): a search's
        state lives in them, so the graphs that read and write it stay valid from one batch to the next."""
        if key not in self.kept:
            self.kept[key] = make()
        return self.kept[key]

    def select(self, fn: Callable[..., tuple[Tensor, ...]], logp: Tensor, st: dict[str, Tensor],
               *args: Any) -> tuple[Tensor, ...]:
        """`fn(logp, st, *args)`: the search's own step on the last step's log-probabilities `logp` (a
        slice of them) and its buffers `st` (from `buffers`), replayed as a CUDA graph where that step was
        one. `fn` must work in place on `st` and return a tuple of tensors. A replay's outputs are copied
        out: the graphs share one memory pool, so a graph captured later may keep its temporaries where an
        earlier one keeps its outputs (the greedy floor's search replays between the beam's and the use of
        the beam's tokens)."""
        bucket = self.last
        if bucket is None or bucket.graph is None or not self.capture:
            return fn(logp, st, *args)
        key = (logp.data_ptr(), tuple(logp.shape), id(st), *args)
        if key not in bucket.selects and len(bucket.selects) >= SELECTS_PER_BUCKET:
            return fn(logp, st, *args)
        if key not in bucket.selects:
            graph = torch.cuda.CUDAGraph()
            try:
                # one eager run first, on a copy of the state (the step changes its state in place)
                with self._on_device(), self._warm_up():
                    fn(logp, {k: v.clone() for k, v in st.items()}, *args)
                with self._on_device(), torch.cuda.graph(graph, pool=self.pool):
                    out = fn(logp, st, *args)
                bucket.selects[key] = (graph, out)
                self.search_captured += 1
            except Exception as e:   # noqa: BLE001 - any failure to capture: this search steps eagerly
                what = f"search step, {logp.size(0)} rows"
                self.failed[what] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
                log.warning("%s not captured, so it runs eagerly: %s", what, self.failed[what])
                bucket.selects[key] = None
                hardware.after_failed_capture(self.device)
        found = bucket.selects[key]
        if found is None:
            return fn(logp, st, *args)
        graph, out = found
        with self._on_device():
            graph.replay()
            copied = tuple(t.clone() for t in out)
        self.search_replays += 1
        return copied

    def _bucket(self, shapes: Shapes, rows: int, prev: Tensor, state: DecoderState) -> _Bucket | None:
        """A new bucket for these shapes, or None where the model's steps cannot be replayed (`unsupported`)."""
        inputs = self.inputs.get(shapes)
        if inputs is None or inputs.rows < rows:
            self._forget_old(shapes)
            inputs = self.inputs[shapes] = _Inputs.like(prev, state, rows)
        inputs.load(prev, state, frozenset())
        bucket = _Bucket(inputs, rows, None, frozenset())
        views = DecoderState({k: v[:rows] for k, v in inputs.state.items()})
        # one eager step on the padded inputs: kernels compile, paths get chosen, and the names the step
        # passes through show
        with self._warm_up(), torch.no_grad(), graph_safe():
            _, new = self.model.step(inputs.prev[:rows], views)
        bucket.constant = frozenset(k for k in state if new.get(k) is views[k])
        grown = [f"{k} {list(views[k].shape[1:])} → {list(v.shape[1:])}" for k, v in new.items()
                 if k not in views or v.shape != views[k].shape]
        if grown:
            self.unsupported = (f"the decoder state changes shape at every step ({', '.join(grown)}), and a graph "
                                "fixes the shapes it replays")
            log.info("decoder steps run eagerly: %s", self.unsupported)
            self.inputs.clear()
            self.buckets.clear()
            return None
        if self.capture:
            key = f"{rows} rows, " + ", ".join(f"{k} {list(s)}" for k, s, _ in shapes)
            try:
                self._capture(bucket, views)
                self.captured += 1
                log.debug("decoder step graph %d captured: %s", self.captured, key)
            except Exception as e:   # noqa: BLE001 - any failure to capture: this bucket steps eagerly
                self.failed[key] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
                log.warning("decoder step graph for %s not captured, so it steps eagerly: %s", key, self.failed[key])
                bucket.graph = None
                hardware.after_failed_capture(self.device)
        self.buckets[(shapes, rows)] = bucket
        return bucket

    def _capture(self, bucket: _Bucket, views: DecoderState) -> None:
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), graph_safe(), torch.cuda.graph(graph, pool=self.pool):
            logp, new = self.model.step(bucket.inputs.prev[:bucket.rows], views)
        bucket.graph, bucket.logp = graph, logp
        bucket.out = {k: v for k, v in new.items() if k not in bucket.constant}

    def _forget_old(self, shapes: Shapes) -> None:
        """Make room for `shapes`' buffers: drop its smaller ones and every shape but the KEEP - 1 newest."""
        keep = [s for s in self.inputs if s != shapes][-(KEEP - 1):] if KEEP > 1 else []
        for s in list(self.inputs):
            if s not in keep:
                del self.inputs[s]
        self.buckets = {k: b for k, b in self.buckets.items() if k[0] in keep}

    def summary(self) -> dict[str, Any]:
        return {"graphs": self.captured, "replays": self.replays, "eager_steps": self.eager,
                "search_graphs": self.search_captured, "search_replays": self.search_replays,
                "failed": dict(self.failed), **({"off": self.unsupported} if self.unsupported else {})}


_DECODERS: weakref.WeakKeyDictionary[Seq2Seq, GraphedDecoder] = weakref.WeakKeyDictionary()


def release(model: Seq2Seq) -> None:
    """Let go of `model`'s graphs and their buffers (what a decoding that is done calls: a model that
    trains on between its validations would otherwise keep them on the GPU)."""
    _DECODERS.pop(model, None)


def decoder(model: Seq2Seq, device: torch.device | str) -> GraphedDecoder | None:
    """The graphed decoder of `model` on `device` (kept with the model until `release`, so later searches
    replay the same graphs), or None where `device` is not CUDA."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    if device.index is None:            # "cuda" and a tensor's "cuda:0" are one device: one set of graphs
        device = torch.device("cuda", torch.cuda.current_device())
    found = _DECODERS.get(model)
    if found is None or found.device != device:
        found = _DECODERS[model] = GraphedDecoder(model, device)
    return found
