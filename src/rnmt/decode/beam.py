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
  - Sentences that are done leave the batch (once at least an eighth of a search's sentences are done),
    so the batch's last, longest sentences no longer carry the finished ones through every step.
  - The per-sentence stopping test is one tensor expression per step, not a Python loop.
  - What only the host reads (finished hypotheses, token histories, which sentences are done) comes over
    in one copy a step: on a GPU a step waits for the device once, not at every test.
  - On CUDA the model's step is replayed as a CUDA graph (`cuda_graphs`, rnmt.decode.graphs), and so is the
    search's own step on the device (`select`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from rnmt.data.vocab import BOS_ID, EOS_ID
from rnmt.decode import graphs
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


SearchState = dict[str, Tensor]
"""A search's tensors on the model's device, A sentences of `width` rows: scores [A, width] (float32, -inf
for no hypothesis), best_finished [A] (float64, the best normalised score finished), n_finished [A],
done [A] (bool), limit [A] (the length limit), and two scalars for the step: length (t + 1) and denom
(float64, `denominator` of length)."""


def select(logp: Tensor, st: SearchState, width: int) -> tuple[Tensor, Tensor, Tensor]:
    """One step of the search on the device, from the step's log-probabilities [A·width, V]: updates `st` in
    place and returns (the row each new hypothesis continues [A·width], its token [A·width], what the host
    reads, as one float32 tensor). Every shape is fixed by A, width and V, and nothing waits for the host,
    so on CUDA it is replayed as a graph (GraphedDecoder.select)."""
    scores, done, denom = st["scores"], st["done"], st["denom"]
    A, W, V = scores.size(0), width, logp.size(-1)
    cand = (scores.unsqueeze(-1) + logp.view(A, W, V)).view(A, -1)
    top_scores, top_idx = cand.topk(2 * W, dim=-1)
    origin, token = top_idx // V, top_idx % V
    is_eos = token == EOS_ID
    # finished: </s> among the first `width` candidates of a sentence that is still searching (done
    # sentences have only -inf candidates); each has length t + 1 with its </s>
    ends = is_eos[:, :W] & torch.isfinite(top_scores[:, :W])
    end_norm = top_scores[:, :W].double() / denom
    best = torch.maximum(st["best_finished"], end_norm.masked_fill(~ends, float("-inf")).amax(1))
    n_finished = st["n_finished"] + ends.sum(1)
    # live: the best `width` candidates that are not </s>
    rank = torch.where(is_eos, torch.full_like(top_scores, float("-inf")), top_scores)
    keep_scores, keep = rank.topk(W, dim=-1)
    sel_token = token.gather(1, keep).view(-1)
    flat = (torch.arange(A, device=logp.device).unsqueeze(1) * W + origin.gather(1, keep)).view(-1)
    at_limit = (st["limit"] <= st["length"]) & ~done
    no_end = at_limit & (n_finished == 0)               # at the limit without </s>: its best live one
    ahead = best >= keep_scores[:, 0].double() / denom
    done = done | at_limit | ((n_finished >= W) & ahead)
    # the host's part, in one copy: torch.cat makes it float32, which holds the scores exactly, and the
    # token ids and row numbers too (below 2^24)
    host = torch.cat([ends.view(-1), top_scores[:, :W].reshape(-1), origin[:, :W].reshape(-1), no_end,
                      keep_scores[:, 0], done, flat, sel_token])
    st["scores"].copy_(keep_scores.masked_fill(done.unsqueeze(1), float("-inf")))
    st["best_finished"].copy_(best)
    st["n_finished"].copy_(n_finished)
    st["done"].copy_(done)
    return flat, sel_token, host


def new_state(A: int, width: int, device: torch.device) -> SearchState:
    return {"scores": torch.empty(A, width, device=device), "limit": torch.empty(A, dtype=torch.long, device=device),
            "n_finished": torch.empty(A, dtype=torch.long, device=device),
            "best_finished": torch.empty(A, dtype=torch.float64, device=device),
            "done": torch.empty(A, dtype=torch.bool, device=device),
            "length": torch.zeros((), dtype=torch.long, device=device),
            "denom": torch.ones((), dtype=torch.float64, device=device)}


class _Search:
    """One beam width's bookkeeping over the sentences still in it: `width` rows per sentence, in the
    order of `ids` (each sentence's index in the batch).

    The tensors the next step needs (`SearchState`) stay on the model's device; what only the host reads
    (finished hypotheses, the token histories, which sentences are done) comes over in one copy a step, so
    a step on a GPU waits for it once. With a GraphedDecoder the state lives in its buffers for A sentences
    (kept across batches) and the device's part of a step is one graph replay."""

    def __init__(self, width: int, limit: Tensor, penalty: str, alpha: float,
                 decoder: graphs.GraphedDecoder | None = None) -> None:
        B = limit.numel()
        self.width, self.penalty, self.alpha, self.decoder = width, penalty, alpha, decoder
        self.ids = np.arange(B)
        st = self.st = self._state(B, limit.device)
        st["limit"].copy_(limit)
        st["n_finished"].zero_()
        st["best_finished"].fill_(float("-inf"))
        st["done"].zero_()
        st["scores"].fill_(float("-inf"))
        st["scores"][:, 0] = 0.0                         # one live hypothesis per sentence at first
        self.done_host = np.zeros(B, dtype=bool)
        self.history = np.zeros((B * width, 0), dtype=np.int64)
        self.finished: list[list[Finished]] = [[] for _ in range(B)]

    def _state(self, A: int, device: torch.device) -> SearchState:
        if self.decoder is None:
            return new_state(A, self.width, device)
        return self.decoder.buffers(("search", A, self.width), lambda: new_state(A, self.width, device))

    @property
    def rows(self) -> int:
        return self.ids.size * self.width

    @property
    def all_done(self) -> bool:
        return bool(self.done_host.all())

    def advance(self, logp: Tensor, t: int) -> tuple[Tensor, Tensor]:
        """Take step t's log-probabilities [rows, V] → (the row each new hypothesis continues, in this
        search's rows, [rows]; its token [rows])."""
        A, W = self.ids.size, self.width
        if A == 0:                                       # every sentence of this search has left
            return (torch.zeros(0, dtype=torch.long, device=logp.device),) * 2
        self.st["length"].fill_(t + 1)
        self.st["denom"].fill_(denominator(t + 1, self.penalty, self.alpha))
        if self.decoder is None:
            flat, sel_token, host_d = select(logp, self.st, W)
        else:
            flat, sel_token, host_d = self.decoder.select(select, logp, self.st, W)
        host = host_d.cpu().numpy()
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
        return flat, sel_token

    def settle(self) -> Tensor | None:
        """Drop the done sentences once they are at least an eighth of those left (all of them at the end);
        returns the rows kept (in this search's rows before the drop), or None when nothing is dropped."""
        n_done = int(self.done_host.sum())
        if n_done * 8 < self.ids.size or n_done == 0:
            return None
        live_h = np.nonzero(~self.done_host)[0]
        rows_h = (live_h[:, None] * self.width + np.arange(self.width)).reshape(-1)
        self.history, self.ids, self.done_host = self.history[rows_h], self.ids[live_h], self.done_host[live_h]
        device = self.st["scores"].device
        live = torch.as_tensor(live_h, device=device)
        kept = self._state(live_h.size, device)
        for k in ("scores", "limit", "n_finished", "best_finished", "done"):
            kept[k].copy_(self.st[k].index_select(0, live))
        self.st = kept
        return torch.as_tensor(rows_h, device=device)

    def best(self, b: int) -> tuple[list[int], float]:
        score, _, tokens = max(self.finished[b], key=lambda f: f[0])
        return tokens, score

    def ranked(self, b: int) -> list[Finished]:
        """Sentence b's finished hypotheses, best first, each token sequence once."""
        out: dict[tuple[int, ...], Finished] = {}
        for f in sorted(self.finished[b], key=lambda f: -f[0]):
            out.setdefault(tuple(f[2]), f)
        return list(out.values())


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


def _search(model: Seq2Seq, src: Tensor, src_mask: Tensor, beam: int, max_len: int | Tensor, penalty: str,
            alpha: float, greedy_floor: bool, cuda_graphs: bool | graphs.GraphedDecoder) -> list[_Search]:
    """Run the search of `beam` (and of the greedy floor beside it); → the searches, finished."""
    normalise(0.0, 1, penalty, alpha)                    # an unknown penalty fails before any work
    B, device = src.size(0), src.device
    if isinstance(max_len, int):
        max_len = torch.full((B,), max_len, device=device)
    limit = max_len.to(device=device, dtype=torch.long)
    widths = (beam, 1) if beam > 1 and greedy_floor else (beam,)
    graphed = (cuda_graphs if isinstance(cuda_graphs, graphs.GraphedDecoder) else
               graphs.decoder(model, device) if cuda_graphs else None)
    decoder = graphed or model
    searches = [_Search(w, limit, penalty, alpha, graphed) for w in widths]
    # the rows of every search, one after the other: searches[0]'s sentences × beam, then searches[1]'s × 1
    start = torch.cat([torch.arange(B, device=device).repeat_interleave(w) for w in widths])
    state = decoder.start(src, src_mask).select(start)
    constant = set(state)                                # names no step has changed yet
    prev = torch.full((start.numel(),), BOS_ID, dtype=torch.long, device=device)
    for t in range(int(limit.max())):
        logp, new_state = decoder.step(prev, state)
        constant = {k for k in constant if new_state.get(k) is state[k]}
        flats, tokens, offset = [], [], 0
        for s in searches:
            n = s.rows
            flat, tok = s.advance(logp[offset:offset + n], t)
            flats.append(flat + offset)
            tokens.append(tok)
            offset += n
        if all(s.all_done for s in searches):
            break
        state = reorder(new_state, torch.cat(flats), constant)
        prev = torch.cat(tokens)
        kept, offset, dropped = [], 0, False
        for s in searches:
            n = s.rows
            rows = s.settle()
            dropped = dropped or rows is not None
            kept.append((torch.arange(n, device=device) if rows is None else rows) + offset)
            offset += n
        if dropped:
            rows = torch.cat(kept)
            state, prev = state.select(rows), prev.index_select(0, rows)
    return searches
