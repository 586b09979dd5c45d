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
Beam 1 is greedy search. A finite beam can prune the path that greedy search follows and end below
it (seen in about 4% of sentences of a small trained model); with `greedy_floor` (the default) the
greedy hypothesis also competes at the end, so a beam never returns a lower score than greedy search,
at the cost of one extra beam-1 pass.

What keeps a batch fast (`rnmt bench decode`):
  - Tensors that `step` passes through unchanged (the encoder memory, attention keys, masks) are the
    same for every hypothesis of a sentence, and a beam reorder keeps each row within its sentence, so
    they are not reordered; only the recurrent states are. Once a step returns a new tensor under a
    name, that name is reordered from then on.
  - Sentences that are done leave the batch (once at least an eighth of it is done), so the batch's
    last, longest sentences no longer carry the finished ones through every step.
  - The per-sentence stopping test is one tensor expression per step, not a Python loop.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rnmt.data.vocab import BOS_ID, EOS_ID
from rnmt.models.base import DecoderState, Seq2Seq

Finished = tuple[float, float, list[int]]          # (normalised score, log p, tokens without </s>)


def normalise(score: float | Tensor, length: int, penalty: str, alpha: float) -> float | Tensor:
    if penalty == "average":
        return score / length
    if penalty == "gnmt":
        return score / (((5 + length) / 6) ** alpha)
    if penalty == "none":
        return score
    raise ValueError(f"unknown length penalty {penalty!r}; valid: average, gnmt, none")


def reorder(state: DecoderState, index: Tensor, constant: set[str]) -> DecoderState:
    """`state.select(index)` for a reorder within sentences: tensors named in `constant` stay as they are."""
    return DecoderState({k: v if k in constant else v.index_select(0, index) for k, v in state.items()})


@torch.no_grad()
def beam_search(model: Seq2Seq, src: Tensor, src_mask: Tensor, beam: int = 10, max_len: int | Tensor = 100,
                penalty: str = "average", alpha: float = 0.6,
                greedy_floor: bool = True) -> list[tuple[list[int], float]]:
    """Translate a padded batch; returns per sentence (token ids without </s>, normalised score)."""
    normalise(0.0, 1, penalty, alpha)                    # an unknown penalty fails before any work
    B, device = src.size(0), src.device
    greedy = beam_search(model, src, src_mask, 1, max_len, penalty, alpha) if beam > 1 and greedy_floor else None
    if isinstance(max_len, int):
        max_len = torch.full((B,), max_len, device=device)
    limit = max_len.to(device=device, dtype=torch.long)
    state = model.start(src, src_mask).select(torch.arange(B, device=device).repeat_interleave(beam))
    constant = set(state)                                # names no step has changed yet
    # per sentence still in the batch (A of them): its index in `src`, finished count and best score
    ids = torch.arange(B, device=device)
    n_finished = torch.zeros(B, dtype=torch.long, device=device)
    best_finished = torch.full((B,), float("-inf"), dtype=torch.float64, device=device)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    scores = torch.full((B, beam), float("-inf"), device=device)
    scores[:, 0] = 0.0                                   # one live hypothesis per sentence at first
    prev = torch.full((B * beam,), BOS_ID, dtype=torch.long, device=device)
    history = torch.zeros(B * beam, 0, dtype=torch.long, device=device)
    finished: list[list[Finished]] = [[] for _ in range(B)]
    for t in range(int(limit.max())):
        A = ids.numel()
        logp, new_state = model.step(prev, state)
        constant = {k for k in constant if new_state.get(k) is state[k]}
        V = logp.size(-1)
        cand = (scores.unsqueeze(-1) + logp.view(A, beam, V)).view(A, -1)
        top_scores, top_idx = cand.topk(2 * beam, dim=-1)
        origin, token = top_idx // V, top_idx % V
        is_eos = token == EOS_ID
        # finished: </s> among the first `beam` candidates of a sentence that is still searching (done
        # sentences have only -inf candidates); each has length t + 1 with its </s>
        ends = is_eos[:, :beam] & torch.isfinite(top_scores[:, :beam])
        end_rows, end_cols = torch.nonzero(ends, as_tuple=True)
        if end_rows.numel():
            end_raw = top_scores[end_rows, end_cols]
            end_norm = normalise(top_scores[:, :beam].double(), t + 1, penalty, alpha)
            best_finished = torch.maximum(best_finished, end_norm.masked_fill(~ends, float("-inf")).amax(1))
            n_finished = n_finished + ends.sum(1)
            hyps = history.index_select(0, end_rows * beam + origin[end_rows, end_cols]).tolist()
            for a, raw, hyp in zip(ids[end_rows].tolist(), end_raw.tolist(), hyps, strict=True):
                finished[a].append((normalise(raw, t + 1, penalty, alpha), raw, hyp))
        # live: the best `beam` candidates that are not </s>
        rank = torch.where(is_eos, torch.full_like(top_scores, float("-inf")), top_scores)
        keep_scores, keep = rank.topk(beam, dim=-1)
        sel_origin = origin.gather(1, keep)
        sel_token = token.gather(1, keep)
        flat = (torch.arange(A, device=device).unsqueeze(1) * beam + sel_origin).view(-1)
        history = torch.cat([history.index_select(0, flat), sel_token.view(-1, 1)], 1)
        at_limit = (t + 1 >= limit) & ~done
        for a in torch.nonzero(at_limit & (n_finished == 0)).view(-1).tolist():  # no </s> yet: best live one
            raw = float(keep_scores[a, 0])
            finished[int(ids[a])].append((normalise(raw, t + 1, penalty, alpha), raw, history[a * beam].tolist()))
        ahead = best_finished >= normalise(keep_scores[:, 0].double(), t + 1, penalty, alpha)
        done = done | at_limit | ((n_finished >= beam) & ahead)
        n_done = int(done.sum())
        if n_done == A:
            break
        state = reorder(new_state, flat, constant)
        scores = keep_scores.masked_fill(done.unsqueeze(1), float("-inf"))
        prev = sel_token.view(-1)
        if n_done * 8 >= A:                              # drop the done sentences from the batch
            live = torch.nonzero(~done).view(-1)
            rows = (live.unsqueeze(1) * beam + torch.arange(beam, device=device)).view(-1)
            state, history, prev = state.select(rows), history.index_select(0, rows), prev.index_select(0, rows)
            scores, limit, ids = scores.index_select(0, live), limit.index_select(0, live), ids.index_select(0, live)
            n_finished, best_finished = n_finished.index_select(0, live), best_finished.index_select(0, live)
            done = done.index_select(0, live)
    results = []
    for b in range(B):
        best = max(finished[b], key=lambda f: f[0])
        results.append((best[2], best[0]))
        if greedy is not None and greedy[b][1] > best[0]:
            results[b] = greedy[b]
    return results
