"""Batched beam search over any Seq2Seq.

All sentences of a batch and all their hypotheses advance together as one [batch·beam] tensor.
A hypothesis that emits </s> among the top `beam` candidates of its sentence is finished; a sentence
is done at its length limit, or once it has `beam` finished hypotheses and the best of them scores at
least as high as the best live hypothesis does now (exact for "none", where scores only fall; for the
length-normalised scores it keeps searching while a live hypothesis is ahead, which stops short
finished hypotheses from winning by default). Finished hypotheses are ranked by their length-normalised
score:
  - "average": log p / length (the ATR paper's "log-likelihood normalised by sentence length")
  - "gnmt":    log p / ((5 + length) / 6)^α (Wu et al. 2016; DTMT uses α = 0.6)
  - "none":    log p
Beam 1 is greedy search. Plain beam search is the default, as every paper decodes. A finite beam can
prune the path that greedy search follows and end below it (how often: benchmarks/README.md, "Beam
search below greedy search"); `greedy_floor=True` (an option no paper setting turns on) lets a beam-1 search compete
at the end, so a beam never returns a lower score than greedy search. That search runs in the same
batch as the beam, one more row per sentence in every model step, instead of a second pass over the
batch (a second pass would cost a batch of 32 sentences 50 more steps).

What keeps a batch fast (`rnmt bench decode`):
  - Tensors that `step` passes through unchanged (the encoder memory, attention keys, masks) are the
    same for every hypothesis of a sentence, and a beam reorder keeps each row within its sentence, so
    they are not reordered; only the recurrent states are. Once a step returns a new tensor under a
    name, that name is reordered from then on.
  - Sentences that are done leave the batch (once at least an eighth of a search's sentences are done;
    graphed, once those left fit a smaller bucket of sentences), so the batch's last, longest sentences
    no longer carry the finished ones through every step.
  - The per-sentence stopping test is one tensor expression per step, not a Python loop.
  - What only the host reads (finished hypotheses, token histories, which sentences are done) comes over
    in one copy a step, and on a GPU the host reads it `READ_BEHIND_ON_CUDA` steps later: the device
    never waits for the host, which launches the next steps meanwhile.
  - On CUDA a whole step (the model's, the search's own `select` and the reorder of the states) is
    replayed as one CUDA graph (`cuda_graphs`, rnmt.decode.graphs).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from rnmt.data.vocab import BOS_ID
from rnmt.decode import graphs
from rnmt.decode.select import SENTENCE_KEYS, SearchState, host_size, new_state, select, tick
from rnmt.decode.settings import DEFAULT
from rnmt.models.base import DecoderState, Seq2Seq

Finished = tuple[float, float, list[int]]          # (normalised score, log p, tokens without </s>)


def denominator(length: int, penalty: str, alpha: float) -> float:
    """What `normalise` divides a score of `length` tokens by."""
    if penalty == "average":
        return float(length)
    if penalty == "gnmt":
        return ((5 + length) / 6) ** alpha
    if penalty == "none":
        return 1.0
    raise ValueError(f"unknown length penalty {penalty!r}; valid: average, gnmt, none")


def normalise(score: float | Tensor, length: int, penalty: str, alpha: float) -> float | Tensor:
    return score / denominator(length, penalty, alpha)


def reorder(state: DecoderState, index: Tensor, constant: set[str]) -> DecoderState:
    """`state.select(index)` for a reorder within sentences: tensors named in `constant` stay as they are."""
    return DecoderState({k: v if k in constant else v.index_select(0, index) for k, v in state.items()})


class _Search:
    """One beam width's bookkeeping: `width` rows for each of its A sentences, the first `n` of them the
    batch's sentences still searching (`ids`: their indices in the batch), any others padding that is done
    from the start (a graphed search's sentences go up to `graphs.sentences_bucket`).

    The tensors the next step needs (`SearchState`) stay on the model's device; what only the host reads
    (finished hypotheses, the token histories, which sentences are done) comes over in one copy a step
    (`read`). With a GraphedDecoder the state lives in its buffers (kept across batches, under `key`)."""

    def __init__(self, width: int, limit: Tensor, lengths: int, penalty: str, alpha: float,
                 decoder: graphs.GraphedDecoder | None = None) -> None:
        B = limit.numel()
        self.width, self.penalty, self.alpha, self.decoder = width, penalty, alpha, decoder
        self.lengths, self.n = lengths, B
        A = self.A = graphs.sentences_bucket(B) if decoder is not None else B
        self.ids = np.full(A, -1)
        self.ids[:B] = np.arange(B)
        st = self.st = self._state(A, limit.device)
        st["length"].zero_()
        st["denoms"].copy_(torch.tensor([denominator(max(n, 1), penalty, alpha) for n in range(lengths)],
                                        dtype=torch.float64))
        st["limit"][:B].copy_(limit)
        st["scores"][:B].fill_(float("-inf"))
        st["scores"][:B, 0] = 0.0                         # one live hypothesis per sentence at first
        self._pad(B)
        st["n_finished"][:B].zero_()
        st["best_finished"][:B].fill_(float("-inf"))
        st["done"][:B].zero_()
        self.done_host = np.arange(A) >= B
        self.history = np.zeros((A * width, 0), dtype=np.int64)
        self.finished: list[list[Finished]] = [[] for _ in range(B)]

    @property
    def key(self) -> tuple[str, int, int, int]:
        return ("search", self.A, self.width, self.lengths)

    def _state(self, A: int, device: torch.device) -> SearchState:
        make = lambda: new_state(A, self.width, self.lengths, device)   # noqa: E731
        return make() if self.decoder is None else self.decoder.buffers(("search", A, self.width, self.lengths), make)

    def _pad(self, n: int) -> None:
        """Sentences n.. of the state: padding, done from the start (no candidate, no limit to reach)."""
        st = self.st
        st["scores"][n:].fill_(float("-inf"))
        st["limit"][n:].zero_()
        st["n_finished"][n:].zero_()
        st["best_finished"][n:].fill_(float("-inf"))
        st["done"][n:].fill_(True)

    @property
    def rows(self) -> int:
        return self.A * self.width

    @property
    def all_done(self) -> bool:
        return bool(self.done_host.all())

    def read(self, host: np.ndarray, t: int) -> None:
        """Take in step t's host part (`select`'s, as numpy)."""
        A, W = self.A, self.width
        parts = np.split(host, np.cumsum([A * W, A * W, A * W, A, A, A, A * W]))
        ends_h, raw_h, origin_h = (x.reshape(A, W) for x in parts[:3])
        no_end_h, best_live_h, self.done_host = parts[3].astype(bool), parts[4], parts[5].astype(bool)
        flat_h, token_h = parts[6].astype(np.int64), parts[7].astype(np.int64)
        for a, c in zip(*np.nonzero(ends_h), strict=True):
            raw = float(raw_h[a, c])
            self.finished[int(self.ids[a])].append((normalise(raw, t + 1, self.penalty, self.alpha), raw,
                                                    self.history[a * W + int(origin_h[a, c])].tolist()))
        self.history = np.concatenate([self.history[flat_h], token_h[:, None]], 1)
        for a in np.nonzero(no_end_h)[0]:
            raw = float(best_live_h[a])
            self.finished[int(self.ids[a])].append((normalise(raw, t + 1, self.penalty, self.alpha), raw,
                                                    self.history[a * W].tolist()))

    def leaving(self) -> np.ndarray | None:
        """The sentences (positions) that stay, where dropping the done ones is worth it: once they are at
        least an eighth of those left, or, graphed, once those left fit a smaller bucket; else None."""
        live = np.nonzero(~self.done_host[:self.n])[0]
        if self.decoder is not None:
            return live if graphs.sentences_bucket(live.size) < self.A else None
        return live if live.size < self.n and (self.n - live.size) * 8 >= self.n else None

    def settle(self, live: np.ndarray) -> np.ndarray:
        """Keep only sentences `live` (from `leaving`); → the rows kept, in this search's rows before: the
        live sentences' rows, then any row for the new padding."""
        W, n = self.width, live.size
        A = graphs.sentences_bucket(n) if self.decoder is not None else n
        rows_h = np.concatenate([(live[:, None] * W + np.arange(W)).reshape(-1), np.zeros((A - n) * W, np.int64)])
        self.history = self.history[rows_h]
        ids = np.full(A, -1)
        ids[:n] = self.ids[live]
        self.ids, self.n, self.A = ids, n, A
        self.done_host = np.arange(A) >= n
        old = self.st
        self.st = self._state(A, old["scores"].device)
        if n:
            index = torch.as_tensor(live, device=old["scores"].device)
            for k in SENTENCE_KEYS:
                self.st[k][:n].copy_(old[k].index_select(0, index))
        for k in ("length", "denom", "denoms"):
            self.st[k].copy_(old[k])
        self._pad(n)
        return rows_h

    def best(self, b: int) -> tuple[list[int], float]:
        score, _, tokens = max(self.finished[b], key=lambda f: f[0])
        return tokens, score

    def ranked(self, b: int) -> list[Finished]:
        """Sentence b's finished hypotheses, best first, each token sequence once."""
        out: dict[tuple[int, ...], Finished] = {}
        for f in sorted(self.finished[b], key=lambda f: -f[0]):
            out.setdefault(tuple(f[2]), f)
        return list(out.values())


def select_all(logp: Tensor, searches: list[_Search]) -> tuple[Tensor, Tensor, Tensor]:
    """`select` of every search on its rows of `logp` (one after the other): → (the row each new hypothesis
    continues [rows], its token [rows], the searches' host parts one after the other)."""
    flats, tokens, hosts, offset = [], [], [], 0
    for s in searches:
        n = s.rows
        if n:
            tick(s.st)
            flat, token, host = select(logp[offset:offset + n], s.st, s.width)
            flats.append(flat + offset if offset else flat)
            tokens.append(token)
            hosts.append(host)
        offset += n
    if len(flats) == 1:
        return flats[0], tokens[0], hosts[0]
    return torch.cat(flats), torch.cat(tokens), torch.cat(hosts)


class _HostCopy:
    """A search step's host part on its way to the host: from a GPU, an asynchronous copy into pinned memory
    that `numpy` waits for; the tensor itself elsewhere."""

    def __init__(self, x: Tensor) -> None:
        self.event: torch.cuda.Event | None = None
        self.source = x                      # alive until read: its memory is not reused before the copy
        if x.device.type == "cuda":
            self.x = torch.empty(x.shape, dtype=x.dtype, pin_memory=True)
            self.x.copy_(x, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record(torch.cuda.current_stream(x.device))
        else:
            self.x = x

    def numpy(self) -> np.ndarray:
        if self.event is not None:
            self.event.synchronize()
        return self.x.numpy()


class _Steps:
    """The model's steps as they are (the reference; what a model whose state changes shape gets on a GPU
    too): its states reordered into new tensors each step. Tensors a step passes through unchanged are
    not reordered (a reorder keeps each row within its sentence); once a step returns a new tensor under a
    name, that name is reordered from then on."""

    def __init__(self, model: Seq2Seq, prev: Tensor, state: DecoderState) -> None:
        self.model, self.prev, self.state = model, prev, state
        self.constant = set(state)

    def step(self, searches: list[_Search]) -> Tensor:
        logp, new = self.model.step(self.prev, self.state)
        self.constant = {k for k in self.constant if new.get(k) is self.state[k]}
        flat, self.prev, host = select_all(logp, searches)
        self.state = reorder(new, flat, self.constant)
        return host

    def keep(self, rows: Tensor) -> None:
        self.state, self.prev = self.state.select(rows), self.prev.index_select(0, rows)


class _Replayed:
    """The steps of a GraphedDecoder: the model's step, the searches' and the reorder as one graph replay."""

    def __init__(self, decoder: graphs.GraphedDecoder) -> None:
        self.decoder = decoder

    def step(self, searches: list[_Search]) -> Tensor:
        return self.decoder.search_step(tuple(s.key for s in searches), lambda logp: select_all(logp, searches))

    def keep(self, rows: Tensor) -> None:
        self.decoder.keep(rows)


READ_BEHIND_ON_CUDA = 3
"""How many steps the host reads behind the GPU: it launches step t + 3 before it waits for step t's host
part, so the GPU does not idle while the host takes in a step or launches the next (a step's host part
decides nothing the next steps launch; done sentences only leave later, and a search that is done runs
at most this many steps more, which find nothing)."""


def read_behind(device: torch.device) -> int:
    return READ_BEHIND_ON_CUDA if device.type == "cuda" else 0


def _run(steps: _Steps | _Replayed, searches: list[_Search], T: int, behind: int) -> None:
    """Step the searches until every one is done (at the latest after T steps), reading each step's host part
    `behind` steps later; done sentences leave (`keep`) once the host has read every step so far."""
    pending: list[tuple[int, _HostCopy]] = []

    def read(upto: int) -> bool:             # read all but the last `upto` steps; → all done
        while len(pending) > upto:
            t, copy = pending.pop(0)
            host, offset = copy.numpy(), 0
            for s in searches:
                if s.rows:
                    size = host_size(s.A, s.width)
                    s.read(host[offset:offset + size], t)
                    offset += size
            if all(s.all_done for s in searches):
                return True
        return False

    for t in range(T):
        pending.append((t, _HostCopy(steps.step(searches))))
        if read(behind if t < T - 1 else 0):
            return
        if all(s.leaving() is None for s in searches):
            continue
        if read(0):                          # every step read: the host's rows are the device's
            return
        rows, offset = [], 0
        for s in searches:
            before, live = s.rows, s.leaving()
            rows.append((np.arange(before) if live is None else s.settle(live)) + offset)
            offset += before
        device = searches[0].st["scores"].device
        steps.keep(torch.as_tensor(np.concatenate(rows), device=device))


@torch.no_grad()
def beam_search(model: Seq2Seq, src: Tensor, src_mask: Tensor, beam: int = DEFAULT.beam,
                max_len: int | Tensor = 100, penalty: str = DEFAULT.length_penalty, alpha: float = DEFAULT.alpha,
                greedy_floor: bool = DEFAULT.greedy_floor,
                cuda_graphs: bool | graphs.GraphedDecoder = DEFAULT.cuda_graphs) -> list[tuple[list[int], float]]:
    """Translate a padded batch; returns per sentence (token ids without </s>, normalised score).

    `cuda_graphs`: on CUDA, replay the model's steps as CUDA graphs (rnmt.decode.graphs); or the
    `GraphedDecoder` of `model` to step with."""
    searches = _search(model, src, src_mask, beam, max_len, penalty, alpha, greedy_floor, cuda_graphs)
    results = [searches[0].best(b) for b in range(src.size(0))]
    if len(searches) > 1:
        for b in range(src.size(0)):
            greedy = searches[1].best(b)
            if greedy[1] > results[b][1]:
                results[b] = greedy
    return results


@torch.no_grad()
def nbest_search(model: Seq2Seq, src: Tensor, src_mask: Tensor, nbest: int, beam: int = DEFAULT.beam,
                 max_len: int | Tensor = 100, penalty: str = DEFAULT.length_penalty, alpha: float = DEFAULT.alpha,
                 greedy_floor: bool = DEFAULT.greedy_floor,
                 cuda_graphs: bool | graphs.GraphedDecoder = DEFAULT.cuda_graphs) -> list[list[Finished]]:
    """The same search as `beam_search`, keeping per sentence its `nbest` best different finished
    hypotheses (normalised score, log p, tokens), best first: the first is `beam_search`'s answer. At most
    `beam` of them (a beam finishes at most `beam` hypotheses a step; a sentence may end with fewer)."""
    if not 1 <= nbest <= beam:
        raise ValueError(f"nbest {nbest}: give 1 to the beam size ({beam}); a wider list needs a wider beam")
    searches = _search(model, src, src_mask, beam, max_len, penalty, alpha, greedy_floor, cuda_graphs)
    out = []
    for b in range(src.size(0)):
        found: dict[tuple[int, ...], Finished] = {}
        for s in searches:                               # the beam's first: it wins ties, as in beam_search
            for f in s.ranked(b):
                found.setdefault(tuple(f[2]), f)
        out.append(sorted(found.values(), key=lambda f: -f[0])[:nbest])
    return out


def _first_rows(searches: list[_Search], B: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """(the sentence of each row at the start, its previous token, <s>), the searches' rows one after the
    other: searches[0]'s sentences × beam (its padding's rows copies of the first sentence's), then
    searches[1]'s × 1."""
    start = torch.cat([torch.cat([torch.arange(B, device=device), torch.zeros(s.A - B, dtype=torch.long,
                                                                              device=device)]).repeat_interleave(s.width)
                       for s in searches])
    return start, torch.full((start.numel(),), BOS_ID, dtype=torch.long, device=device)


def _search(model: Seq2Seq, src: Tensor, src_mask: Tensor, beam: int, max_len: int | Tensor, penalty: str,
            alpha: float, greedy_floor: bool, cuda_graphs: bool | graphs.GraphedDecoder) -> list[_Search]:
    """Run the search of `beam` (and of the greedy floor beside it); → the searches, finished."""
    normalise(0.0, 1, penalty, alpha)                    # an unknown penalty fails before any work
    B, device = src.size(0), src.device
    if isinstance(max_len, int):
        max_len = torch.full((B,), max_len, device=device)
    limit = max_len.to(device=device, dtype=torch.long)
    T = int(limit.max())
    lengths = max(64, 1 << (T + 1).bit_length())         # every length 0..T, in few sizes (a graph's buffers)
    widths = (beam, 1) if beam > 1 and greedy_floor else (beam,)
    graphed = (cuda_graphs if isinstance(cuda_graphs, graphs.GraphedDecoder) else
               graphs.decoder(model, device) if cuda_graphs else None)
    if graphed is not None and not graphed.unsupported:
        searches = [_Search(w, limit, lengths, penalty, alpha, graphed) for w in widths]
        start, prev = _first_rows(searches, B, device)
        if graphed.begin(prev, graphed.start(src, src_mask).select(start)):
            _run(_Replayed(graphed), searches, T, read_behind(device))
            return searches
    searches = [_Search(w, limit, lengths, penalty, alpha) for w in widths]
    start, prev = _first_rows(searches, B, device)
    _run(_Steps(model, prev, model.start(src, src_mask).select(start)), searches, T, read_behind(device))
    return searches
