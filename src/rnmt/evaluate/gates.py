"""ATR's twin gates on a test set (ATR paper section 5.1, Figure 3).

For every target position t of every test sentence, the decoder's ATR units (eq. 13) give the mean
input gate (1/d) Σ_k i_{t,k} and mean forget gate (1/d) Σ_k f_{t,k}; we report Pearson's r of the two
over all positions of the test set (the paper: −0.9819 on newstest2014) and their per-position
averages over sentences (Figure 3). The gates are recorded under teacher forcing on the references,
through the decoder's step loop: the fused decoder sequence a run may have measured faster computes the
same gates inside one function, where no per-step call can read them.

Eq. 13 has two ATR units: s̃_j = ATR(s_{j−1}, y_{j−1}) and s_j = ATR(s̃_j, c_j). Only the first is a
recurrence over target positions (its forget gate weighs the previous position's state, as in eq. 9 and
the roll-out of eq. 10 that section 5.3 reads from eq. 13); the second's "history" is the same
position's s̃_j. Tables and figures therefore report the first (`report.tables.RECURRENT_UNIT`); the
statistics file keeps both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from rnmt.cells.atr import ATR
from rnmt.cells.base import use_path
from rnmt.data.batching import pad
from rnmt.io import InputError
from rnmt.models.base import Seq2Seq


def pearson(a: Tensor, b: Tensor) -> float:
    a, b = a.double() - a.double().mean(), b.double() - b.double().mean()
    return float((a * b).sum() / (a.norm() * b.norm()).clamp_min(1e-12))


class _Recorder:
    """Wraps an ATR cell's `gates` to keep each call's (mean input gate, mean forget gate) per row."""

    def __init__(self, cell: ATR) -> None:
        self.cell, self.calls = cell, []
        self.original = cell.gates

    def __call__(self, p: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        i, f = self.original(p, state)
        self.calls.append((i.mean(-1).detach(), f.mean(-1).detach()))
        return i, f


@torch.no_grad()
def gate_statistics(model: Seq2Seq, sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]],
                    batch_size: int = 64, cells: Sequence[str] = ("dec_lower", "dec_higher")) -> dict[str, Any]:
    found = {name: getattr(model, name, None) for name in cells}
    found = {k: v for k, v in found.items() if isinstance(v, ATR)}
    if not found:
        raise InputError("gate statistics need a model whose decoder cells are ATR (e.g. rnnsearch with cell: atr)")
    model.eval()
    stats: dict[str, Any] = {}
    for name, cell in found.items():
        rec = _Recorder(cell)
        cell.gates = rec                      # instance attribute shadows the method while recording
        per_sentence: list[tuple[Tensor, Tensor]] = []
        with use_path("loop"):            # the path that calls the cell's gates step by step
            try:
                for s in range(0, len(sources), batch_size):
                    src, mask = pad(sources[s:s + batch_size], eos=True)
                    tgt_in, tgt_mask = pad(targets[s:s + batch_size], bos=True)
                    rec.calls.clear()
                    model(src, mask, tgt_in)
                    i = torch.stack([c[0] for c in rec.calls], 1)     # one call per target step
                    f = torch.stack([c[1] for c in rec.calls], 1)
                    for b in range(src.size(0)):
                        n = int(tgt_mask[b].sum())
                        per_sentence.append((i[b, :n], f[b, :n]))
            finally:
                del cell.gates
        all_i = torch.cat([x for x, _ in per_sentence])
        all_f = torch.cat([y for _, y in per_sentence])
        longest = max(len(x) for x, _ in per_sentence)
        by_pos_i, by_pos_f, counts = [], [], []
        for t in range(longest):
            vals = [(x[t], y[t]) for x, y in per_sentence if len(x) > t]
            by_pos_i.append(float(torch.stack([v[0] for v in vals]).mean()))
            by_pos_f.append(float(torch.stack([v[1] for v in vals]).mean()))
            counts.append(len(vals))
        stats[name] = {"pearson_r": pearson(all_i, all_f),
                       "pearson_r_by_position": pearson(torch.tensor(by_pos_i), torch.tensor(by_pos_f)),
                       "mean_input_gate_by_position": by_pos_i, "mean_forget_gate_by_position": by_pos_f,
                       "sentences_by_position": counts}
    return stats


def gate_statistics_of_files(model_path: str, src: str, tgt: str) -> dict[str, Any]:
    """`gate_statistics` of a checkpoint on a segmented source file and its reference."""
    from rnmt.io import read_lines
    from rnmt.models.checkpoint import load_model

    model, sv, tv = load_model(model_path)
    return gate_statistics(model, [sv.encode(x) for x in read_lines(src)], [tv.encode(x) for x in read_lines(tgt)])
