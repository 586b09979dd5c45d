"""Whether a table row's BLEU differs from its reference row's beyond chance: sacrebleu's paired bootstrap
test (`rnmt compare`'s, on the files the metrics files scored) of the row's translations against the
reference row's (the table's `baseline:`: the paper's baseline system).

The score tested is the table's BLEU (`tested`): its first whole-split BLEU column (`bleu`, `tok_bleu`,
`tok_bleu_compound`), each with the scorer that computed it; a table that reports BLEU per test set,
their average or per source length only (DTMT's NIST tables) is tested on the same side's BLEU of the
whole test split, and says so. A row with several seeds and a reference row with the same seeds are
paired seed by seed; an ensemble, or a row whose seeds differ from the reference row's, is paired with
each of the reference row's decodings. A row's p-value is the largest over its pairs where every pair
differs in the same direction, else 1: it counts as different (p < 0.05) only where every pair does, one
way, so neither one lucky seed nor seeds that differ both ways (each beyond chance) make a difference. This
is an intersection-union test: each pair's p-value is sacrebleu's, of the absolute difference. Equal
scores give p = 1, as in compare. A pair with a decoding that says nothing of its system (its model gave no
output or did not learn to translate: report.ran.said_nothing) is left out, as the row's BLEU mean and the
claims leave it out, and the table says so.
"""

from __future__ import annotations

import math
from typing import Any

from rnmt.evaluate.compare import ALPHA, paired_test
from rnmt.evaluate.metric_names import bleu_family
from rnmt.evaluate.metrics import Scored
from rnmt.io import InputError
from rnmt.planning.table import Row, Table
from rnmt.report import ran
from rnmt.report.layout import label, tokenized

SAMPLES = 1000          # sacrebleu's default number of bootstrap resamples
MARK = "*"              # a BLEU that differs from the reference row's, in the rendered tables


WHOLE_SPLIT = ("bleu", "tok_bleu", "tok_bleu_compound")     # BLEU of the whole test split, by scorer


def tested(table: Table) -> tuple[str, str] | None:
    """(the score a table's rows are tested on, the column that carries its p-value and mark), or None
    for a table without BLEU: its first whole-split BLEU column; else the same side's whole-split BLEU,
    marked on the side's average column if the table has one, else on its first BLEU column."""
    for m in table.metrics:
        if m in WHOLE_SPLIT:
            return m, m
    for m in table.metrics:
        tok, base = tokenized(m)
        if bleu_family(base):
            return f"{tok}bleu", f"{tok}bleu_avg" if f"{tok}bleu_avg" in table.metrics else m
    return None


def note(table: Table) -> str:
    """The footer line of a table whose rows were tested."""
    score, column = tested(table) or ("bleu", "bleu")
    what = (f"{label(score)} marked {MARK}" if score == column else
            f"{label(column)} marked {MARK}: the row's {label(score)} of the whole test split (all its sets together)")
    return (f"{what} differs from {table.baseline}'s at p < {ALPHA} (sacrebleu's paired "
            f"bootstrap, {SAMPLES:,} resamples, between each pair of the two rows' decodings: seed by seed where "
            "both rows decode the same seeds, else every pair; a row's largest p-value counts, and 1 where its "
            "pairs differ in opposite directions); the CSV has each row's p_value.")


def pairs(row: Row, base: Row) -> list[tuple[str, str]]:
    """(row's member, reference row's member) pairs: seed by seed where both rows decode the same seeds
    one by one, else the row's every decoding against each of the reference row's."""
    mine, theirs = row.members(), base.members()
    if not row.ensemble and not base.ensemble and set(row.seeds) == set(base.seeds):
        return [(f"seed{s}", f"seed{s}") for s in row.seeds]
    return [(m, b) for m in mine for b in theirs]


def p_values(table: Table, scored: dict[tuple[str, str], Scored], samples: int = SAMPLES,
             metrics: dict[tuple[str, str], dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """Per trained row but the reference: its p-value (the largest of its pairs', or 1 where they differ
    in opposite directions; NaN where no pair is left) and the pairs' own, with each pair's difference
    (row − reference), and `left_out`: why pairs were not tested. `scored`: what each (variant, member)'s
    metrics file scored; `metrics`: the metrics files themselves (whose train records say whether a model
    learned)."""
    if not table.baseline or table.kind != "translation" or (what := tested(table)) is None:
        return {}
    metric = what[0]
    base = next((r for r in table.rows if r.system == table.baseline), None)
    if base is None or not base.trained:
        raise InputError(f"table {table.name}: baseline {table.baseline!r} is not one of its trained rows; name "
                         "the row that the others are tested against (the paper's baseline system)")
    out: dict[str, dict[str, Any]] = {}
    sides: dict[tuple[str, str], tuple[Any, list[str], list[list[str]]]] = {}

    def side(key: tuple[str, str]) -> tuple[Any, list[str], list[list[str]]]:
        if key not in sides:                    # the reference row's files are read once, not once a pair
            sides[key] = scored[key].bleu_side(metric)
        return sides[key]

    row_pairs_of = {row.system: (row, pairs(row, base)) for row in table.trained_rows if row is not base}
    for row, row_pairs in row_pairs_of.values():
        missing = list(dict.fromkeys(f"{r.variant} {m}" for mine, theirs in row_pairs
                                     for r, m in ((base, theirs), (row, mine)) if (r.variant, m) not in scored))
        if missing:
            raise InputError(f"table {table.name}: no metrics of {', '.join(missing)}, which the test of row "
                             f"{row.system!r} against {base.system!r} pairs; build the table with every row's "
                             "decodings")
    for row, row_pairs in row_pairs_of.values():
        found, left_out = [], []
        for mine, theirs in row_pairs:
            keys = ((base.variant, theirs), (row.variant, mine))
            # the metrics file (its train record says whether the model learned), else what was scored
            records = [(metrics or {}).get(k) or {"variant": k[0], "member": k[1], "scores": scored[k].scores}
                       for k in keys]
            why = "; ".join(w for r in records if (w := ran.said_nothing(r)))
            if why:
                left_out.append(why)
                continue
            scorer, a, refs = side((base.variant, theirs))
            _, b, b_refs = side((row.variant, mine))
            if b_refs != refs:
                raise InputError(f"table {table.name}: rows {row.system!r} and {base.system!r} were scored against "
                                 "different references; a paired test needs one test set")
            r = paired_test(a, b, refs, {"bleu": scorer}, "bs", samples)
            (res,) = r.values()
            found.append({"member": mine, "baseline_member": theirs, "diff": res["b"] - res["a"],
                          "p_value": 1.0 if res["a"] == res["b"] else res["p_value"]})
        one_way = len(_sides(found)) < 2
        p = (max(f["p_value"] for f in found) if one_way else 1.0) if found else math.nan
        out[row.system] = {"p_value": p, "pairs": found, "left_out": left_out}
    return out


def _sides(found: list[dict[str, Any]]) -> set[bool]:
    """The directions (row above the reference: True) in which a row's pairs differ; an equal pair has none."""
    return {f["diff"] > 0 for f in found if f["diff"]}


def both_ways(table: Table, tested: dict[str, dict[str, Any]]) -> list[str]:
    """A footer line per row whose pairs differ from the reference row's in opposite directions (its p = 1):
    each pair's difference and p-value, which the CSV's one p-value a row cannot show; and one per row
    tested on fewer pairs than its decodings give, saying why."""
    out = []
    for system, t in tested.items():
        if t.get("left_out"):
            n, total = len(t["pairs"]), len(t["pairs"]) + len(t["left_out"])
            tested_on = f"tested on {n} of {total} pairs" if n else "not tested: no pair is left"
            out.append(f"{system} is {tested_on} with {table.baseline}'s decodings: "
                       f"{'; '.join(dict.fromkeys(t['left_out']))}.")
        if len(_sides(t["pairs"])) > 1:
            each = ", ".join(f"{f['member']} vs {f['baseline_member']} {f['diff']:+.2f} (p = {f['p_value']:.3f})"
                             for f in t["pairs"])
            out.append(f"{system} is not marked: its decodings differ from {table.baseline}'s both ways ({each}).")
    return out
