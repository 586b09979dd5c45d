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
"""

from __future__ import annotations

import torch
from torch import Tensor

from rnmt.data.vocab import BOS_ID, EOS_ID
from rnmt.models.base import Seq2Seq


def normalise(score: float, length: int, penalty: str, alpha: float) -> float:
    if penalty == "average":
        return score / length
    if penalty == "gnmt":
        return score / (((5 + length) / 6) ** alpha)
    if penalty == "none":
        return score
    raise ValueError(f"unknown length penalty {penalty!r}; valid: average, gnmt, none")


@torch.no_grad()
def beam_search(model: Seq2Seq, src: Tensor, src_mask: Tensor, beam: int = 10, max_len: int | Tensor = 100,
                penalty: str = "average", alpha: float = 0.6,
                greedy_floor: bool = True) -> list[tuple[list[int], float]]:
    """Translate a padded batch; returns per sentence (token ids without </s>, normalised score)."""
    B, device = src.size(0), src.device
    greedy = beam_search(model, src, src_mask, 1, max_len, penalty, alpha) if beam > 1 and greedy_floor else None
    if isinstance(max_len, int):
        max_len = torch.full((B,), max_len, device=device)
    limits = max_len.tolist()
    state = model.start(src, src_mask).select(torch.arange(B, device=device).repeat_interleave(beam))
    scores = torch.full((B, beam), float("-inf"), device=device)
    scores[:, 0] = 0.0                                   # one live hypothesis per sentence at first
    prev = torch.full((B * beam,), BOS_ID, dtype=torch.long, device=device)
    history = torch.zeros(B * beam, 0, dtype=torch.long, device=device)
    finished: list[list[tuple[float, float, list[int]]]] = [[] for _ in range(B)]
    done = [False] * B
    for t in range(max(limits)):
        logp, state = model.step(prev, state)
        V = logp.size(-1)
        cand = (scores.unsqueeze(-1) + logp.view(B, beam, V)).view(B, -1)
        top_scores, top_idx = cand.topk(2 * beam, dim=-1)
        origin, token = top_idx // V, top_idx % V
        is_eos = token == EOS_ID
        # finished: </s> among the first `beam` candidates of a sentence that is still searching
        eos_rows, eos_cols = torch.nonzero(is_eos[:, :beam] & torch.isfinite(top_scores[:, :beam]),
                                           as_tuple=True)
        for b, k in zip(eos_rows.tolist(), eos_cols.tolist(), strict=True):
            if done[b]:
                continue
            hyp = history[b * beam + origin[b, k]].tolist()
            raw = float(top_scores[b, k])
            finished[b].append((normalise(raw, len(hyp) + 1, penalty, alpha), raw, hyp))
        # live: the best `beam` candidates that are not </s>
        rank = torch.where(is_eos, torch.full_like(top_scores, float("-inf")), top_scores)
        keep_scores, keep = rank.topk(beam, dim=-1)
        sel_origin = origin.gather(1, keep)
        sel_token = token.gather(1, keep)
        flat = (torch.arange(B, device=device).unsqueeze(1) * beam + sel_origin).view(-1)
        history = torch.cat([history.index_select(0, flat), sel_token.view(-1, 1)], 1)
        for b in range(B):
            if done[b]:
                continue
            if t + 1 >= limits[b] and not finished[b]:   # length limit before any </s>: best live one
                hyp = history[b * beam].tolist()
                raw = float(keep_scores[b, 0])
                finished[b].append((normalise(raw, len(hyp), penalty, alpha), raw, hyp))
            if t + 1 >= limits[b] or (len(finished[b]) >= beam and max(f[0] for f in finished[b]) >= normalise(
                    float(keep_scores[b, 0]), t + 1, penalty, alpha)):
                done[b] = True
        if all(done):
            break
        state = state.select(flat)
        scores = keep_scores.masked_fill(torch.tensor(done, device=device).unsqueeze(1), float("-inf"))
        prev = sel_token.view(-1)
    results = []
    for b in range(B):
        best = max(finished[b], key=lambda f: f[0])
        results.append((best[2], best[0]))
        if greedy is not None and greedy[b][1] > best[0]:
            results[b] = greedy[b]
    return results
