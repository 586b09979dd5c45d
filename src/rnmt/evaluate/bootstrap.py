"""A paired bootstrap interval of the difference between two systems' BLEU on the same test sentences.

sacrebleu's paired test (`rnmt compare`, the tables' p-values) answers "do the two differ?"; a paper's
claim may ask more ("within 0.5 BLEU of", "better than"), which needs the interval of the difference
itself. Each resample draws the test sentences with replacement (the same draw for both systems, as in
Koehn 2004), scores both from the drawn sentences' BLEU statistics (sacrebleu's own n-gram counts and
`compute_bleu`, so the full sample gives exactly the scorer's corpus BLEU) and keeps their difference;
the interval is the 2.5th to 97.5th percentile of the resampled differences (a percentile bootstrap).
A score averaged over the test sets of a merged split (bleu_avg) resamples within each set and averages
the sets' BLEU, as the metric does; one set's BLEU (bleu@set) resamples that set's sentences.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sacrebleu.metrics import BLEU

SAMPLES = 1000      # sacrebleu's default number of bootstrap resamples
SEED = 12345        # sacrebleu's default SACREBLEU_SEED, so that a rerun draws the same resamples
LEVEL = 0.95


def sentence_stats(scorer: BLEU, hyps: Sequence[str], refs: Sequence[Sequence[str]]) -> np.ndarray:
    """Per sentence: matching n-grams (orders 1..N), n-grams (1..N), hypothesis length and the closest
    reference length, as `scorer` counts them (its tokenizer and casing)."""
    order = scorer.max_ngram_order
    out = np.zeros((len(hyps), 2 * order + 2), dtype=np.int64)
    for i, h in enumerate(hyps):
        s = scorer.corpus_score([h], [[r[i]] for r in refs])
        out[i] = [*s.counts, *s.totals, s.sys_len, s.ref_len]
    return out


def bleu_of(scorer: BLEU, stats: np.ndarray) -> float:
    """Corpus BLEU from the summed statistics of some sentences (sacrebleu's formula and smoothing)."""
    order = scorer.max_ngram_order
    total = stats.sum(axis=0).tolist()
    return scorer.compute_bleu(total[:order], total[order:2 * order], total[-2], total[-1],
                               scorer.smooth_method, scorer.smooth_value, scorer.effective_order,
                               order).score


def groups_mean(scorer: BLEU, stats: np.ndarray, groups: Sequence[np.ndarray]) -> float:
    """The mean over `groups` (index arrays into `stats`) of each group's corpus BLEU."""
    return float(np.mean([bleu_of(scorer, stats[g]) for g in groups]))


def paired_interval(scorer: BLEU, a: np.ndarray, b: np.ndarray, groups: Sequence[np.ndarray],
                    samples: int = SAMPLES, seed: int = SEED) -> tuple[float, float, float]:
    """(observed difference a − b, interval low, interval high) of the mean over `groups` of BLEU, from
    `samples` paired resamples of each group's sentences (the same draws for both systems)."""
    if a.shape != b.shape:
        raise ValueError(f"paired statistics of different test sets: {a.shape} and {b.shape}")
    observed = groups_mean(scorer, a, groups) - groups_mean(scorer, b, groups)
    rng = np.random.default_rng(seed)
    diffs = np.empty(samples)
    for k in range(samples):
        draw = [g[rng.integers(0, len(g), len(g))] for g in groups]
        diffs[k] = groups_mean(scorer, a, draw) - groups_mean(scorer, b, draw)
    tail = (1 - LEVEL) / 2 * 100
    low, high = np.percentile(diffs, [tail, 100 - tail])
    return observed, float(low), float(high)
