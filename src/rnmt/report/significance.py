"""Whether a table row's BLEU differs from its reference row's beyond chance: sacrebleu's paired bootstrap
test (`rnmt compare`'s, on the files the metrics files scored) of the row's translations against the
reference row's (the table's `baseline:`: the paper's baseline system).

A row with several seeds and a reference row with the same seeds are paired seed by seed; an ensemble,
or a row whose seeds differ from the reference row's, is paired with each of the reference row's
decodings. A row's p-value is the largest over its pairs: it counts as different (p < 0.05) only where
every pair does, so one lucky seed does not make a difference. Equal scores give p = 1, as in compare.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rnmt.evaluate.compare import ALPHA, paired_test, scored_file
from rnmt.evaluate.score import detok_scorer
from rnmt.io import InputError, read_lines
from rnmt.plan import Row, Table

SAMPLES = 1000          # sacrebleu's default number of bootstrap resamples
MARK = "*"              # a BLEU that differs from the reference row's, in the rendered tables


def note(table: Table) -> str:
    """The footer line of a table whose rows were tested."""
    return (f"BLEU marked {MARK} differs from {table.baseline}'s at p < {ALPHA} (sacrebleu's paired bootstrap, "
            f"{SAMPLES:,} resamples, between each pair of the two rows' decodings: seed by seed where both rows "
            "decode the same seeds, else every pair; a row's largest p-value counts); the CSV has each row's p_value.")


def pairs(row: Row, base: Row) -> list[tuple[str, str]]:
    """(row's member, reference row's member) pairs: seed by seed where both rows decode the same seeds
    one by one, else the row's every decoding against each of the reference row's."""
    mine, theirs = row.members(), base.members()
    if not row.ensemble and not base.ensemble and set(row.seeds) == set(base.seeds):
        return [(f"seed{s}", f"seed{s}") for s in row.seeds]
    return [(m, b) for m in mine for b in theirs]


def p_values(table: Table, paths: dict[tuple[str, str], Path], samples: int = SAMPLES) -> dict[str, dict[str, Any]]:
    """Per trained row but the reference: the largest p-value of its pairs, and the pairs' own."""
    if not table.baseline:
        return {}
    base = next((r for r in table.rows if r.system == table.baseline), None)
    if base is None or not base.trained:
        raise InputError(f"table {table.name}: baseline {table.baseline!r} is not one of its trained rows; name "
                         "the row that the others are tested against (the paper's baseline system)")
    out: dict[str, dict[str, Any]] = {}
    cache: dict[Path, list[str]] = {}

    def lines(path: Path) -> list[str]:
        if path not in cache:
            cache[path] = read_lines(path)
        return cache[path]

    tested = {row.system: (row, pairs(row, base)) for row in table.trained_rows if row is not base}
    for row, row_pairs in tested.values():
        missing = list(dict.fromkeys(f"{r.variant} {m}" for mine, theirs in row_pairs
                                     for r, m in ((base, theirs), (row, mine)) if (r.variant, m) not in paths))
        if missing:
            raise InputError(f"table {table.name}: no metrics of {', '.join(missing)}, which the test of row "
                             f"{row.system!r} against {base.system!r} pairs; build the table with every row's "
                             "decodings")
    for row, row_pairs in tested.values():
        found = []
        for mine, theirs in row_pairs:
            a, b = scored_file(paths[(base.variant, theirs)]), scored_file(paths[(row.variant, mine)])
            refs = [lines(r) for r in a.refs]
            if [lines(r) for r in b.refs] != refs:
                raise InputError(f"table {table.name}: rows {row.system!r} and {base.system!r} were scored against "
                                 "different references; a paired test needs one test set")
            r = paired_test(lines(a.hyp), lines(b.hyp), refs, {"bleu": detok_scorer(a.lowercase)}, "bs",
                            samples)
            (res,) = r.values()
            found.append({"member": mine, "baseline_member": theirs,
                          "p_value": 1.0 if res["a"] == res["b"] else res["p_value"]})
        out[row.system] = {"p_value": max(f["p_value"] for f in found), "pairs": found}
    return out
