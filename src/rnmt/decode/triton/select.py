"""Beam search's bookkeeping of one step as one Triton kernel (rnmt.decode.select holds the equations and the
torch operations it replaces): after the top 2·width candidates of each sentence are found (torch's top-k),
one program a sentence finds the hypotheses that end, the best finished score and their count, the best
`width` live candidates, whether the sentence is done, and writes the search state, the new rows' origins
and tokens and the host's part, where torch's operations took some forty kernels, each a node of the search
step's CUDA graph.

The live candidates: the top 2·width candidates come sorted, best first, and at most `width` of them end
(one </s> a hypothesis), so the best `width` that do not end are the first `width` that do not end, found by
a running count instead of a second top-k. Scores are compared as torch's path compares them (the
normalised scores in float64, the candidate scores in float32); a tie between equal candidates may keep
another of them than torch's top-k keeps.
"""

from __future__ import annotations

import triton
import triton.language as tl
from torch import Tensor

from rnmt.cells.triton.common import on_device


@triton.jit
def search_select(top_ptr, idx_ptr, best_ptr, n_fin_ptr, done_ptr, limit_ptr, length_ptr, denom_ptr, scores_ptr,
                  flat_ptr, token_ptr, host_ptr, A, W, V, EOS, BLOCK: tl.constexpr):
    """Program a: sentence a's 2W candidates (scores top [A, 2W], flat indices idx into its W·V) → its state
    (scores [A, W], best finished, finished count, done), its rows' origins and tokens, and its part of the
    host's tensor (select.py's layout)."""
    a = tl.program_id(0).to(tl.int64)
    c = tl.arange(0, BLOCK)
    valid = c < 2 * W
    top = tl.load(top_ptr + a * 2 * W + c, mask=valid, other=float("-inf"))
    idx = tl.load(idx_ptr + a * 2 * W + c, mask=valid, other=0)
    origin, token = idx // V, idx % V
    is_eos = token == EOS
    first = c < W
    ends = is_eos & first & (top == top) & (tl.abs(top) < float("inf"))
    denom = tl.load(denom_ptr)
    end_norm = tl.where(ends, top.to(tl.float64) / denom, float("-inf"))
    best = tl.maximum(tl.load(best_ptr + a), tl.max(end_norm, 0))
    n_fin = tl.load(n_fin_ptr + a) + tl.sum(ends.to(tl.int64), 0)
    live = (~is_eos) & valid
    rank = tl.cumsum(live.to(tl.int32), 0) - 1                # a live candidate's place among the live ones
    keep = live & (rank < W)
    best_live = tl.max(tl.where(live & (rank == 0), top, float("-inf")), 0)
    done = tl.load(done_ptr + a) != 0
    at_limit = (tl.load(limit_ptr + a) <= tl.load(length_ptr)) & ~done
    no_end = at_limit & (n_fin == 0)
    ahead = best >= best_live.to(tl.float64) / denom
    done = done | at_limit | ((n_fin >= W) & ahead)
    row = a * W + rank
    flat = a * W + origin
    tl.store(scores_ptr + row, tl.where(done, float("-inf"), top), mask=keep)
    tl.store(flat_ptr + row, flat, mask=keep)
    tl.store(token_ptr + row, token, mask=keep)
    tl.store(best_ptr + a, best)
    tl.store(n_fin_ptr + a, n_fin)
    tl.store(done_ptr + a, done)
    # the host's part: [ends, scores, origins of the first W candidates (A·W each) | no end, best live, done (A
    # each) | the rows' origins, their tokens (A·W each)], as float32
    AW = A * W
    tl.store(host_ptr + a * W + c, ends.to(tl.float32), mask=first)
    tl.store(host_ptr + AW + a * W + c, top, mask=first)
    tl.store(host_ptr + 2 * AW + a * W + c, origin.to(tl.float32), mask=first)
    tl.store(host_ptr + 3 * AW + a, no_end.to(tl.float32))
    tl.store(host_ptr + 3 * AW + A + a, best_live)
    tl.store(host_ptr + 3 * AW + 2 * A + a, done.to(tl.float32))
    tl.store(host_ptr + 3 * AW + 3 * A + row, flat.to(tl.float32), mask=keep)
    tl.store(host_ptr + 4 * AW + 3 * A + row, token.to(tl.float32), mask=keep)


def select(top: Tensor, idx: Tensor, st: dict[str, Tensor], width: int, vocab: int, eos: int,
           host: Tensor, flat: Tensor, token: Tensor) -> None:
    """The kernel over top, idx [A, 2·width] (contiguous), updating `st` (rnmt.decode.select's SearchState) and
    writing flat, token [A·width] and host [5·A·width + 3·A]."""
    A = top.size(0)
    with on_device(top):
        search_select[(A,)](top, idx, st["best_finished"], st["n_finished"], st["done"], st["limit"], st["length"],
                            st["denom"], st["scores"], flat, token, host, A, width, vocab, eos,
                            BLOCK=triton.next_power_of_2(2 * width))
