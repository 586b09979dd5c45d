"""Beam search's steps as CUDA graphs (decode setting `cuda_graphs`, on by default; CUDA only).

A search step of a recurrent model is dozens of small kernels for one token per hypothesis, and on a GPU
the host's time to launch them bounds the search (benchmarks/gpu/README.md: at the ATR paper's sizes, 32
sentences decoded together at beam 10 went only 18x as fast as one at a time, with 32x the hypotheses in
each step). `GraphedDecoder` records a whole search step once per layout and replays it with one launch:
the model's step (`Seq2Seq.step`), the search's own step on the device (top-k, finished hypotheses, the
stopping test: decode/select.py) and the reorder of the hypotheses' states, written back into the
buffers the next replay reads. Between replays the host only copies out what it reads (decode/beam.py reads
it a few steps behind, so the GPU never waits for it) and, when enough sentences are done, drops their rows
(`keep`).

A graph fixes every shape, so:
  - the source is padded to a multiple of `EDGE` positions (masked, so no attention weight reaches them;
    `start`), which lets batches of similar length share their graphs;
  - the sentences of a search go up to the next power of two, and above `POWERS_UP_TO` to the next quarter
    octave (`sentences_bucket`: 32 stay 32, 33 go to 40); the extra sentences are done from the start and
    find nothing, and their rows hold earlier hypotheses' values. A search drops the rows of done sentences
    once the sentences left fit a smaller bucket, so a batch meets a handful of layouts on its way down.
Every graph of one set of state shapes (one padded source length) reads and writes the same buffers, sized
for the most rows seen. The graphs of the `KEEP` most recent shapes are kept (`translate` sorts its sentences
by length, so a shape once left is rarely met again); at most `MAX_GRAPHS` exist, beyond which new layouts
step eagerly on the buffers.

A layout's first step runs eagerly (kernels compile and paths get chosen, as torch asks before a capture),
its second is captured and replayed. A model whose decoder state grows at every step (the Transformer's
cache of its target keys and values) is not replayed: every step would be a new shape (`begin` says False,
and beam search steps the model itself). Where a capture fails (an operation that waits for the host inside
a step), the layout logs why once and steps eagerly on the same buffers. A replay gives that eager step's
numbers bit for bit (tests/test_cuda.py); the hypotheses equal the unpadded search's
(tests/test_decode_graphs.py, on the CPU through the eager steps, which pad alike).
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
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
MAX_GRAPHS = 64        # layouts beyond this many step eagerly
POWERS_UP_TO = 8       # sentence buckets are powers of two up to this many sentences, quarter octaves above

Shapes = tuple[tuple[str, tuple[int, ...], torch.dtype], ...]


def sentences_bucket(n: int) -> int:
    """The sentences a search of `n` runs with: the next power of two up to `POWERS_UP_TO`, above it the next
    quarter octave (a multiple of a quarter of the power of two below `n`). Padding a large search to a power
    of two could nearly double its output layer, the step's largest product; on an H100 at beam 10, 320 rows
    padded to 512 made the graphed search slower than the eager one (benchmarks/gpu/README.md)."""
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
    """The steps' buffers for one set of state shapes, `rows` rows each: the previous tokens and the state.
    A step reads their first rows and writes the next step's there."""
    rows: int
    prev: Tensor
    state: dict[str, Tensor]

    @classmethod
    def like(cls, prev: Tensor, state: DecoderState, rows: int) -> _Inputs:
        def grown(x: Tensor) -> Tensor:       # every row a copy of one of x's (valid values throughout)
            return x.index_select(0, torch.arange(rows, device=x.device) % x.size(0)).contiguous()
        return cls(rows, grown(prev), {k: grown(v) for k, v in state.items()})

    def load(self, prev: Tensor, state: DecoderState) -> None:
        n = prev.numel()
        self.prev[:n].copy_(prev, non_blocking=True)
        for k, v in state.items():
            self.state[k][:n].copy_(v, non_blocking=True)

    def keep(self, rows: Tensor) -> None:
        """Rows `rows` (of the rows in use) become the first ones, in that order."""
        m = rows.numel()
        for x in (self.prev, *self.state.values()):
            x[:m].copy_(x.index_select(0, rows))


Step = Callable[[Tensor], tuple[Tensor, Tensor, Tensor]]
"""The search's step on a model step's log-probabilities [rows, V]: → (the row each new hypothesis continues
[rows], its token [rows], what the host reads)."""


class GraphedDecoder:
    """Beam search's steps of `model` (a Seq2Seq, in eval mode, on `device`) replayed as CUDA graphs;
    `capture=False` runs every step eagerly on the same buffers (what a failed capture does)."""

    def __init__(self, model: Seq2Seq, device: torch.device, capture: bool = True) -> None:
        self._model = weakref.ref(model)
        self.device, self.capture = device, capture
        self.inputs: dict[Shapes, _Inputs] = {}
        self.constant: dict[Shapes, frozenset[str]] = {}   # state names the step passes through unchanged
        # by (shapes, layout): the graph and its output, or None where its capture failed
        self.graphs: dict[tuple[Shapes, Any], tuple[torch.cuda.CUDAGraph, Tensor] | None] = {}
        self.warmed: set[tuple[Shapes, Any]] = set()        # layouts stepped once eagerly
        self.failed: dict[str, str] = {}
        self.pool: Any = None
        self.unsupported = ""                 # why this model's steps cannot be replayed, once found
        self.captured = self.replays = self.eager = 0
        self.shapes: Shapes = ()              # the running search's state shapes, and its rows in use
        self.rows = 0
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

    def begin(self, prev: Tensor, state: DecoderState) -> bool:
        """Load a search's first hypotheses (`prev` [rows], `state`) into the buffers of their shapes; False
        where this model's steps cannot be replayed (`unsupported`; nothing is kept then)."""
        if self.unsupported:
            return False
        shapes: Shapes = tuple((k, tuple(v.shape[1:]), v.dtype) for k, v in state.items())
        rows = prev.numel()
        inputs = self.inputs.get(shapes)
        with self._on_device():
            if inputs is None or inputs.rows < rows:
                self._forget_old(shapes)
                inputs = self.inputs[shapes] = _Inputs.like(prev, state, rows)
            inputs.load(prev, state)
            if shapes not in self.constant and not self._learn(shapes, inputs, rows):
                return False
        self.shapes, self.rows = shapes, rows
        return True

    def _learn(self, shapes: Shapes, inputs: _Inputs, rows: int) -> bool:
        """One eager step on the buffers shows which state names the step passes through (`constant`) and
        whether the state keeps its shapes (False, and `unsupported` says why, where it does not)."""
        views = DecoderState({k: v[:rows] for k, v in inputs.state.items()})
        with self._warm_up(), torch.no_grad(), graph_safe():
            _, new = self.model.step(inputs.prev[:rows], views)
        changed = [f"{k} {list(views[k].shape[1:])} → {list(v.shape[1:])}" for k, v in new.items()
                   if k not in views or v.shape != views[k].shape]
        changed += [f"{k} {list(views[k].shape[1:])} → none" for k in views if k not in new]
        if changed:
            self.unsupported = (f"the decoder state changes shape at every step ({', '.join(changed)}), and a "
                                "graph fixes the shapes it replays")
            log.info("decoder steps run eagerly: %s", self.unsupported)
            self.inputs.clear()
            self.graphs.clear()
            self.pool = None
            return False
        self.constant[shapes] = frozenset(k for k in views if new[k] is views[k])
        return True

    def search_step(self, layout: Any, select: Step) -> Tensor:
        """One step of the running search: the model's step on the buffers' rows in use, `select` on its
        log-probabilities, and the chosen hypotheses' states and tokens written back into the buffers;
        replayed as a CUDA graph from the second step of a `layout` on (a key for the search's own buffers
        and widths, which must fix every shape `select` sees). → `select`'s host part, valid until the next
        step."""
        shapes, rows = self.shapes, self.rows
        inputs, constant = self.inputs[shapes], self.constant[shapes]

        def body() -> Tensor:
            views = DecoderState({k: v[:rows] for k, v in inputs.state.items()})
            logp, new = self.model.step(inputs.prev[:rows], views)
            flat, token, host = select(logp)
            for k, v in new.items():
                if k not in constant:
                    inputs.state[k][:rows].copy_(v.index_select(0, flat))
            inputs.prev[:rows].copy_(token)
            return host

        # a graph holds its products' precision as captured: TF32 or not (decode setting tf32) is part of the key
        key = (shapes, (layout, torch.backends.cuda.matmul.allow_tf32))
        with self._on_device(), torch.no_grad(), graph_safe():
            found = self.graphs.get(key)
            if found is not None:
                graph, out = found
                graph.replay()
                self.replays += 1
                return out
            if self.capture and key not in self.graphs:
                if key not in self.warmed:
                    self.warmed.add(key)
                    with self._warm_up():
                        out = body()
                    out.record_stream(torch.cuda.current_stream(self.device))   # read there, made on the side
                    self.eager += 1
                    return out
                if len(self.graphs) < MAX_GRAPHS and self._capture(key, body, rows):
                    graph, out = self.graphs[key]            # type: ignore[misc]
                    graph.replay()
                    self.replays += 1
                    return out
            self.eager += 1
            return body()

    def _capture(self, key: tuple[Shapes, Any], body: Callable[[], Tensor], rows: int) -> bool:
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        try:
            with hardware.capture(graph, self.device, self.pool):
                out = body()
        except Exception as e:   # noqa: BLE001 - any failure to capture: this layout steps eagerly
            what = f"{rows} rows, " + ", ".join(f"{k} {list(s)}" for k, s, _ in key[0])
            self.failed[what] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            log.warning("search step graph for %s not captured, so it steps eagerly: %s", what, self.failed[what])
            self.graphs[key] = None
            self.pool = None                # the failed capture's pool stays marked as recording
            return False
        self.graphs[key] = (graph, out)
        self.captured += 1
        log.debug("search step graph %d captured: %s", self.captured, key)
        return True

    def keep(self, rows: Tensor) -> None:
        """Rows `rows` of the running search's rows in use become its rows, in that order (its done
        sentences leave)."""
        with self._on_device():
            self.inputs[self.shapes].keep(rows)
        self.rows = rows.numel()

    def buffers(self, key: Any, make: Callable[[], dict[str, Tensor]]) -> dict[str, Tensor]:
        """Tensors kept under `key` for as long as this decoder (made by `make` the first time): a search's
        state lives in them, so the graphs that read and write it stay valid from one batch to the next."""
        if key not in self.kept:
            self.kept[key] = make()
        return self.kept[key]

    def _forget_old(self, shapes: Shapes) -> None:
        """Make room for `shapes`' buffers: drop its smaller ones and every shape but the KEEP - 1 newest."""
        keep = [s for s in self.inputs if s != shapes][-(KEEP - 1):] if KEEP > 1 else []
        for s in list(self.inputs):
            if s not in keep:
                del self.inputs[s]
        self.graphs = {k: g for k, g in self.graphs.items() if k[0] in keep}
        self.warmed = {k for k in self.warmed if k[0] in keep}
        if not any(self.graphs.values()):
            # torch refuses to capture into a pool whose graphs are all gone while memory of it is still
            # held (cuBLAS keeps a workspace made during a capture): the next capture takes a new pool
            self.pool = None

    def summary(self) -> dict[str, Any]:
        return {"graphs": self.captured, "replays": self.replays, "eager_steps": self.eager,
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
