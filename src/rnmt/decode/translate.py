"""Translate many sentences: sort by length, batch, beam-search, restore the input order."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tqdm import tqdm

from rnmt.data.batching import pad_source
from rnmt.decode.beam import beam_search
from rnmt.models.base import Seq2Seq


def translate_ids(model: Seq2Seq, sources: Sequence[Sequence[int]], beam: int = 10, batch_size: int = 64,
                  max_len_ratio: float = 2.0, max_len_extra: int = 10, penalty: str = "average",
                  alpha: float = 0.6, device: torch.device | str = "cpu", progress: bool = False,
                  labels: Sequence[Sequence[int]] | None = None) -> list[list[int]]:
    """Token ids in, token ids out (without </s>); at most ratio·|source| + extra target tokens each.

    `labels`: one label id per source token (factored models), aligned with `sources`.
    """
    was_training = model.training
    model.eval()
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out: list[list[int]] = [[] for _ in sources]
    bar = tqdm(total=len(sources), desc="decode", unit="sent", disable=None if progress else True, mininterval=2.0)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        src, mask = pad_source([sources[i] for i in idx], [labels[i] for i in idx] if labels is not None else None)
        src, mask = src.to(device), mask.to(device)
        limits = (mask.sum(1).float() * max_len_ratio + max_len_extra).long()
        for i, (hyp, _) in zip(idx, beam_search(model, src, mask, beam, limits, penalty, alpha), strict=True):
            out[i] = hyp
        bar.update(len(idx))
    bar.close()
    model.train(was_training)
    return out
