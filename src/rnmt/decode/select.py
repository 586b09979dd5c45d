"""The search's own step on the device (beam search, decode/beam.py): from a model step's log-probabilities,
the candidates kept, the hypotheses finished, which sentences are done, and what the host reads, as one
float32 tensor. Every shape is fixed by the sentences, the width and the vocabulary, and nothing waits for
the host, so on CUDA it is replayed inside the search step's graph (rnmt.decode.graphs). On CUDA what follows
the top-k (some forty small operations) is one Triton kernel (decode/triton/select.py), with the same results
but where candidates tie."""

from __future__ import annotations

import torch
from torch import Tensor

from rnmt.cells import triton as cell_kernels
from rnmt.data.vocab import EOS_ID

SearchState = dict[str, Tensor]
"""A search's tensors on the model's device, A sentences of `width` rows: scores [A, width] (float32, -inf
for no hypothesis), best_finished [A] (float64, the best normalised score finished), n_finished [A],
done [A] (bool), limit [A] (the length limit); the step's length (t + 1) and denom (float64, `denominator`
of length), and denoms, `denominator` of every length the search can reach, from which `tick` reads denom."""

SENTENCE_KEYS = ("scores", "limit", "n_finished", "best_finished", "done")


def select(logp: Tensor, st: SearchState, width: int) -> tuple[Tensor, Tensor, Tensor]:
    """One step of the search on the device, from the step's log-probabilities [A·width, V]: updates `st` in
    place and returns (the row each new hypothesis continues [A·width], its token [A·width], what the host
    reads, as one float32 tensor). Every shape is fixed by A, width and V, and nothing waits for the host,
    so on CUDA it is replayed inside the search step's graph (rnmt.decode.graphs)."""
    scores, done, denom = st["scores"], st["done"], st["denom"]
    A, W, V = scores.size(0), width, logp.size(-1)
    cand = (scores.unsqueeze(-1) + logp.view(A, W, V)).view(A, -1)
    top_scores, top_idx = cand.topk(2 * W, dim=-1)
    kernels = cell_kernels.kernels_for(logp, "rnmt.decode.triton.select")
    if kernels is not None:                 # on CUDA: what follows, as one kernel (decode/triton/select.py)
        flat, token = top_idx.new_empty(A * W), top_idx.new_empty(A * W)
        host = top_scores.new_empty(host_size(A, W), dtype=torch.float32)
        kernels.select(top_scores, top_idx, st, W, V, EOS_ID, host, flat, token)
        return flat, token, host
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


def tick(st: SearchState) -> None:
    """The next step's length and its denominator, on the device (a replayed step reads no host value)."""
    st["length"].add_(1)
    st["denom"].copy_(st["denoms"].index_select(0, st["length"].view(1)).view(()))


def new_state(A: int, width: int, lengths: int, device: torch.device) -> SearchState:
    return {"scores": torch.empty(A, width, device=device), "limit": torch.empty(A, dtype=torch.long, device=device),
            "n_finished": torch.empty(A, dtype=torch.long, device=device),
            "best_finished": torch.empty(A, dtype=torch.float64, device=device),
            "done": torch.empty(A, dtype=torch.bool, device=device),
            "length": torch.zeros((), dtype=torch.long, device=device),
            "denom": torch.ones((), dtype=torch.float64, device=device),
            "denoms": torch.ones(lengths, dtype=torch.float64, device=device)}


def host_size(A: int, width: int) -> int:
    """The length of `select`'s host part for A sentences of `width` rows."""
    return 5 * A * width + 3 * A
