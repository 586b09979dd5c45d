"""A paper's claims about one of its tables, checked on the numbers a run measured.

An experiment file's `claims:` lists what the paper concludes from the table, each as a comparison of
one row with one or more others on one of the table's metrics, or on several where the paper says it holds
at each (DTMT Figure 3: at every source length):

- `higher`: the row's value is above each other row's (ATR+CA is the best RNNSearch; more layers help);
- `lower`: below each (ATR has fewer parameters);
- `within`: within `margin` of each, either way (ATR is on par with GRU, within 0.5 BLEU).

Each comparison gets an interval of the difference (row − other) and a verdict from it: **holds** where
the whole interval is on the claim's side, **does not hold** where the whole interval is on the other
side, **not separable** where it straddles (the run cannot tell). For a BLEU, the interval is the 95%
paired bootstrap interval over the test sentences (evaluate.bootstrap: 1,000 resamples of the same
sentences for both rows; for one test set of a merged split, or for the sentences of a source length,
those sentences), taken for each pair of decodings (seed by seed where both rows decode the same
seeds, else every pair, as the significance test pairs them), and the union over the pairs: a claim
holds only where every seed pair says so. Any other metric (a speed, a size) has no sentences to
resample: its interval spans the pairs' measured differences. A BLEU over fewer than 100 sentences (a long
source length of a small test set) is not compared: its bootstrap says nothing. A claim over several rows
or metrics holds where every comparison holds, does not hold where any does not, and is not separable
otherwise.

The same rule applied to the paper's own numbers (one number a row, so the interval is the difference)
must say "holds": that checks the claim was written down as the paper states it (tests/test_claims.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from rnmt.evaluate.bootstrap import LEVEL, SAMPLES, paired_interval, sentence_stats
from rnmt.evaluate.metric_names import length_range
from rnmt.evaluate.metrics import Scored
from rnmt.evaluate.score import of_length
from rnmt.planning.experiments import check_claims
from rnmt.planning.table import Row, Table
from rnmt.report import ran
from rnmt.report.layout import FEW_SENTENCES, decimals_of, label, number, signed, tokenized
from rnmt.report.significance import WHOLE_SPLIT, pairs

HOLDS, FAILS, UNSURE, NO_NUMBERS = "holds", "does not hold", "not separable", "no numbers"
APART = "not comparable"        # speeds timed on different machines or loads unknown (report.ran.apart), a
                                # model that did not learn to translate (report.ran.unlearned), or a BLEU
                                # over fewer than FEW_SENTENCES test sentences
COLUMNS = ["table", "claim", "says", "metric", "kind", "margin", "row", "than", "paper_diff", "paper_verdict",
           "diff", "low", "high", "pairs", "verdict", "claim_verdict", "why"]


@dataclass(frozen=True)
class Claim:
    says: str                   # the paper's conclusion, in brief, with where it says it
    metrics: tuple[str, ...]    # the metric, or several where it holds at each (every source length)
    kind: str
    row: str
    than: tuple[str, ...]
    margin: float = 0.0


def parse(table: Table) -> list[Claim]:
    """The table's claims, checked first as the plan checks them (rows and metrics of the table), so that
    `rnmt table` on a hand-edited experiment file stops with the same message."""
    check_claims({"rows": [{"system": r.system} for r in table.rows], "metrics": table.metrics,
                  "claims": table.claims}, table.path)
    def names(x: str | list[str]) -> tuple[str, ...]:
        return (x,) if isinstance(x, str) else tuple(x)

    return [Claim(c["says"], names(c["metric"]), c["kind"], c["row"], names(c["than"]), float(c.get("margin", 0.0)))
            for c in table.claims]


def difference(a: float, b: float) -> float:
    """a − b without the residue of binary floating point (10.0 − 9.7 is 0.3000000000000007), which would put
    a difference of exactly a claim's margin outside it; the numbers compared carry a few decimals at most."""
    return round(a - b, 9)


def verdict(kind: str, low: float, high: float, margin: float = 0.0) -> str:
    """A comparison's verdict from the interval [low, high] of row − other."""
    if math.isnan(low) or math.isnan(high):
        return NO_NUMBERS
    if kind == "higher":
        return HOLDS if low > 0 else FAILS if high < 0 else UNSURE
    if kind == "lower":
        return HOLDS if high < 0 else FAILS if low > 0 else UNSURE
    return HOLDS if -margin <= low and high <= margin else FAILS if low > margin or high < -margin else UNSURE


def combine(verdicts: Iterable[str]) -> str:
    """A claim over several comparisons: holds where all do, does not where any does not."""
    v = list(verdicts)
    if FAILS in v:
        return FAILS
    if NO_NUMBERS in v:
        return NO_NUMBERS
    if APART in v:
        return APART
    return HOLDS if all(x == HOLDS for x in v) else UNSURE


def resampled(metric: str) -> bool:
    """Whether a metric's interval comes from resampling test sentences: a whole-split BLEU, one test
    set's, the sets' average, or the BLEU of the sentences of a source length."""
    base = tokenized(metric)[1]
    return metric in WHOLE_SPLIT or base == "bleu_avg" or base.startswith(("bleu@", "bleu_len@"))


class Evidence:
    """The numbers behind the comparisons: each decoding's metric values (from the tidy table) and, for
    a BLEU, each decoding's per-sentence BLEU statistics (from the files its metrics file scored)."""

    def __init__(self, table: Table, metrics: dict[tuple[str, str], dict[str, Any]],
                 scored: dict[tuple[str, str], Scored], value: Any) -> None:
        self.table, self.metrics, self.scored, self.value = table, metrics, scored, value
        self._stats: dict[tuple[tuple[str, str], str], tuple[Any, np.ndarray, list[tuple[str, int, int]]]] = {}
        self._lengths: dict[tuple[str, str], list[int]] = {}

    def stats(self, key: tuple[str, str], metric: str) -> tuple[Any, np.ndarray, list[tuple[str, int, int]]]:
        side = tokenized(metric)[0] + ("bleu_compound" if metric.endswith("_compound") else "bleu")
        if (key, side) not in self._stats:
            s = self.scored[key]
            scorer, hyps, refs = s.bleu_side(side)
            self._stats[(key, side)] = scorer, sentence_stats(scorer, hyps, refs), list(s.parts)
        return self._stats[(key, side)]

    def lengths(self, key: tuple[str, str]) -> list[int]:
        """The source lengths of the sentences a decoding was scored on."""
        if key not in self._lengths:
            self._lengths[key] = self.scored[key].source_lengths()
        return self._lengths[key]

    @staticmethod
    def groups(metric: str, n: int, parts: list[tuple[str, int, int]], lengths: list[int] | None = None
               ) -> list[np.ndarray] | None:
        """The sentence groups whose mean BLEU is `metric`: the split, its sets (avg), one set, or the
        sentences of a source length (bleu_len@a-b: a+1..b words; a-inf: longer than a) by `lengths`."""
        base = tokenized(metric)[1]
        if base.startswith("bleu_len@"):
            idx = of_length(lengths or [], *length_range(base))
            return [np.array(idx)] if idx else None
        if base.startswith("bleu@"):
            found = [p for p in parts if p[0] == base[5:]]
            return [np.arange(found[0][1] - 1, found[0][1] - 1 + found[0][2])] if found else None
        if base == "bleu_avg" and parts:
            return [np.arange(a - 1, a - 1 + k) for _, a, k in parts]
        return [np.arange(n)]

    def interval(self, metric: str, row: Row, other: Row) -> tuple[float, float, int, str]:
        """(low, high, pairs, why) of row − other over the pairs of their decodings; `why` names each reason
        pairs were left out: for a BLEU, a decoding that says nothing of its system (report.ran.said_nothing:
        no output, or a model that did not learn), or two decodings of other test sentences, or too few of
        them; for a timed metric, timings on different machines or at an unknown load (report.ran.apart);
        and a decoding without the metric or the translations to resample. With no pair left, `why` says why
        the comparison is not comparable, and is empty where it has no numbers (a metric not recorded, a
        source length that no test sentence reaches)."""
        lows, highs = [], []
        found = 0
        apart: list[str] = []               # reasons the two rows do not compare
        gaps: list[str] = []                # numbers that are not there
        empty = False                       # a source length no test sentence reaches: no numbers, whatever else
        for mine, theirs in pairs(row, other):
            a, b = (row.variant, mine), (other.variant, theirs)
            if resampled(metric):
                stuck = [w for k in (a, b) if (w := ran.said_nothing(self.metrics.get(k) or {}))]
                if stuck:
                    apart += stuck
                    continue
                if a not in self.scored or b not in self.scored:
                    unscored = _named(k for k in (a, b) if k not in self.scored)
                    gaps.append(f"no translations named in the metrics of {unscored}")
                    continue
                scorer, sa, parts = self.stats(a, metric)
                _, sb, parts_b = self.stats(b, metric)
                lengths = self.lengths(a) if tokenized(metric)[1].startswith("bleu_len@") else None
                if lengths is not None and lengths != self.lengths(b):
                    apart.append(f"{_named((a, b))} translated other source sentences")
                    continue
                groups = self.groups(metric, len(sa), parts, lengths)
                if groups is None:
                    empty = True
                    continue
                if parts != parts_b or len(sa) != len(sb):
                    apart.append(f"{_named((a, b))} were scored on other test sentences")
                    continue
                few = sum(len(g) for g in groups)
                if few < FEW_SENTENCES:         # a bootstrap over a handful of sentences says nothing
                    apart.append(f"{few} test sentence{'s' * (few != 1)}, too few for a BLEU to mean much")
                    continue
                _, low, high = paired_interval(scorer, sa, sb, groups, SAMPLES)
            else:
                if a not in self.metrics or b not in self.metrics:
                    gaps.append(f"no metrics of {_named(k for k in (a, b) if k not in self.metrics)}")
                    continue
                va, vb = self.value(self.metrics[a], metric), self.value(self.metrics[b], metric)
                if va is None or vb is None:
                    gaps.append(f"no {label(metric)} recorded for "
                                f"{_named(k for k, v in ((a, va), (b, vb)) if v is None)}")
                    continue
                if why := ran.apart(self.metrics[a], self.metrics[b], metric):
                    apart.append(why)
                    continue
                low = high = difference(va, vb)
            lows.append(low)
            highs.append(high)
            found += 1
        if not found:
            return math.nan, math.nan, 0, "" if empty else "; ".join(dict.fromkeys(apart))
        return min(lows), max(highs), found, "; ".join(dict.fromkeys(apart + gaps))


def _named(keys: Iterable[tuple[str, str]]) -> str:
    """'gru (seed 1) and atr (seed 2)': decodings named as the tables' notes name them."""
    return " and ".join(ran.member_name(variant, member) for variant, member in keys)


def check(table: Table, claims: Sequence[Claim], df: pd.DataFrame, evidence: Evidence | None) -> pd.DataFrame:
    """One record per (claim, other row): the paper's difference and verdict, ours (the table's means)
    with the interval and verdict, and the claim's verdict over its comparisons."""
    rows = {r.system: r for r in table.rows}
    value = df.set_index(["system", "metric"])
    records = []
    for k, claim in enumerate(claims, 1):
        mine = []
        for metric, other in ((m, o) for m in claim.metrics for o in claim.than):
            paper = difference(value.loc[(claim.row, metric), "paper"], value.loc[(other, metric), "paper"])
            ours = difference(value.loc[(claim.row, metric), "ours"], value.loc[(other, metric), "ours"])
            low = high = math.nan
            n, why = 0, ""
            if evidence is not None and rows[claim.row].trained and rows[other].trained:
                low, high, n, why = evidence.interval(metric, rows[claim.row], rows[other])
            mine_verdict = APART if why and not n else verdict(claim.kind, low, high, claim.margin)
            mine.append({"table": table.name, "claim": k, "says": claim.says, "metric": metric,
                         "kind": claim.kind, "margin": claim.margin if claim.kind == "within" else math.nan,
                         "row": claim.row, "than": other, "paper_diff": paper,
                         "paper_verdict": verdict(claim.kind, paper, paper, claim.margin), "diff": ours,
                         "low": low, "high": high, "pairs": n, "verdict": mine_verdict, "why": why})
        overall = combine(r["verdict"] for r in mine)
        records += [{**r, "claim_verdict": overall} for r in mine]
    return pd.DataFrame.from_records(records, columns=COLUMNS)


def note(claims: pd.DataFrame) -> str:
    """What the verdicts mean, below the claims."""
    return ("Verdicts: holds where the whole interval of the difference (row − other) is on the claim's side, "
            "does not hold where it is wholly on the other side, not separable where it straddles. A BLEU's "
            f"interval is the {LEVEL:.0%} paired bootstrap interval over the test sentences (those of its test set "
            f"or source length where it is one's; {SAMPLES:,} resamples), the union over the two rows' seed pairs; "
            "any other metric's spans the seed pairs' measured differences; two rows' speeds timed on different "
            "machines, or by one run that recorded its load and one that did not, are not comparable, nor is a row "
            "whose model did not learn to translate (its dev loss stayed near what word frequencies alone give), "
            f"nor a BLEU over fewer than {FEW_SENTENCES} test sentences. "
            "A claim over several rows or metrics holds where every comparison does. "
            "Paper: the same rule on the paper's numbers.")


def lines(claims: pd.DataFrame) -> list[tuple[str, str, str, str, str, str]]:
    """Per comparison: claim (on its first comparison, with the claim's verdict), comparison, metric, paper
    difference with its verdict, ours with its interval, and the comparison's verdict."""
    out = []
    seen = set()
    for r in claims.itertuples():
        first = r.claim not in seen
        seen.add(r.claim)
        what = {"higher": ">", "lower": "<", "within": f"within ±{number(r.margin)} of"}[r.kind]
        claim = f"{r.claim}. {r.says} ({r.claim_verdict})" if first else ""
        places = 2 if resampled(r.metric) else None      # every BLEU's differences as BLEU is shown
        paper = "–" if math.isnan(r.paper_diff) else f"{signed(r.paper_diff, places)} ({r.paper_verdict})"
        spread = not math.isnan(r.low) and r.low != r.high
        ours = signed(r.diff, places)
        if spread:                                  # the interval at the difference's precision
            places = decimals_of(ours)
            ours += f" [{signed(r.low, places)}, {signed(r.high, places)}]"
        mark = f"{r.verdict}: {r.why}" if r.verdict == APART else r.verdict
        if r.why and r.verdict != APART:        # judged on the seed pairs left once the others were set aside
            mark += f", from {r.pairs} seed pair{'s' * (r.pairs != 1)} ({r.why})"
        out.append((claim, f"{r.row} {what} {r.than}", label(r.metric), paper, ours, mark))
    return out


HEADER = ("Claim", "Comparison", "Metric", "Paper Δ", "Ours Δ [interval]", "Verdict")
