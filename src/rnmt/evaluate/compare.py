"""`rnmt compare RUN_A RUN_B`: the systems two runs both translated, side by side, with sacrebleu's paired
significance test of BLEU and chrF.

A system is a (corpus, variant, member, test set) whose metrics file both runs have; its translation and
references are the files that metrics file scored (`files`, written by `rnmt score`), scored with the
same scorers as the tables' `bleu` and `chrf` columns (sacrebleu 13a BLEU and chrF, case-insensitive
where the corpus is). Run A is the baseline. The test is sacrebleu's own (`sacrebleu.significance.PairedTest`,
the code behind `sacrebleu -i A B --paired-bs | --paired-ar`): paired bootstrap resampling (Koehn 2004;
1,000 resamples by default), which also gives each score's mean and 95% confidence interval, or
approximate randomization (Riezler & Maxwell 2005; 10,000 trials). Its RNG seed is sacrebleu's
(`SACREBLEU_SEED`, default 12345), so the p-values equal the sacrebleu command line's on the same files.

One exception: no difference at all. sacrebleu (after MultEval) counts only resampled differences
strictly above the observed one, so where the two scores are equal and every resample gives equal scores
too (identical translations, or ones that differ only where the metric does not look), it returns the
smallest p-value the samples allow (1/1001), which reads as significant. rnmt reports an observed
difference of exactly 0 with p = 1, never significant, and marks identical translations (`identical`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from sacrebleu.metrics.base import Metric

from rnmt.evaluate.metrics import Scored, scored_file
from rnmt.evaluate.score import chrf_scorer, detok_scorer
from rnmt.io import InputError, atomic_writer, read_json, read_lines

log = logging.getLogger(__name__)

Key = tuple[str, str, str, str]                 # corpus, variant, member, test set
KEY_NAMES = ("corpus", "variant", "member", "testset")
TESTS = {"bs": "paired bootstrap resampling", "ar": "approximate randomization"}
ALPHA = 0.05


def run_folder(arg: str | Path) -> Path:
    """A run's results folder: `arg` itself, or results/<arg> for a run name."""
    for d in (Path(arg), Path("results") / str(arg)):
        if (d / "metrics").is_dir():
            return d
    raise InputError(f"{arg}: not a run's results folder (no metrics/ in it, nor in results/{arg}): give "
                     "results/<run> or the run's name, for a run whose score jobs have finished (ls results/)")


def scored_systems(run: Path) -> dict[Key, Scored]:
    out: dict[Key, Scored] = {}
    for f in sorted((run / "metrics").rglob("*.json")):
        m = read_json(f)
        if not all(k in m for k in KEY_NAMES):
            continue
        scored = scored_file(f, m)
        if "empty_output" in scored.scores:
            log.warning("%s: not compared: %s", f, scored.scores["empty_output"])
            continue
        out[tuple(str(m[k]) for k in KEY_NAMES)] = scored  # type: ignore[index]
    return out


def table_systems(runs: Sequence[Path], table: str) -> dict[tuple[str, str], str]:
    """(variant, member) -> the table's system name, in the table's row order, from the first run that
    built the table (its CSV's `row`, `variant` and `members` columns)."""
    for run in runs:
        csv = run / "tables" / f"{table}.csv"
        if csv.is_file():
            df = pd.read_csv(csv, keep_default_na=False).sort_values("row", kind="stable")
            return {(v, m): s for v, ms, s in zip(df.variant, df.members, df.system, strict=True)
                    for m in str(ms).split(";") if v and m}
    wanted = " and ".join(f"{r / 'tables' / table}.csv" for r in runs)
    raise InputError(f"--table {table}: neither run has built it ({wanted} missing): build it first, "
                     f"`snakemake --cores all results/<run>/tables/{table}.csv`")


def _read(paths: Sequence[Path], what: str) -> list[list[str]]:
    missing = [p for p in paths if not p.is_file()]
    if missing:
        raise InputError(f"{missing[0]}: {what} is missing (moved or deleted since it was scored): rerun the "
                         "run's translate and score jobs")
    return [read_lines(p) for p in paths]


def paired_test(baseline: Sequence[str], system: Sequence[str], refs: Sequence[Sequence[str]],
                metrics: dict[str, Metric], test: str = "bs", samples: int = 0) -> dict[str, dict[str, Any]]:
    """sacrebleu's paired test of `system` against `baseline`: per metric the two scores, the p-value and,
    with bootstrap resampling, each score's resampled mean and 95% confidence interval."""
    from sacrebleu.significance import PairedTest

    if test not in TESTS:
        raise InputError(f"--test {test}: unknown; one of {', '.join(TESTS)}")
    pt = PairedTest([("a", list(baseline)), ("b", list(system))], metrics, [list(r) for r in refs],
                    test_type=test, n_samples=samples)
    signatures, results = pt()
    out = {}
    for name in signatures:
        a, b = results[name]
        out[name] = {"a": a.score, "b": b.score, "p_value": b.p_value, "a_mean": a.mean, "a_ci": a.ci,
                     "b_mean": b.mean, "b_ci": b.ci, "signature": str(signatures[name])}
    return out


def compare(run_a: str | Path, run_b: str | Path, table: str | None = None, test: str = "bs",
            samples: int = 0) -> pd.DataFrame:
    """One row per system both runs scored and metric (BLEU, chrF): A's and B's score, B − A, the
    p-value of the difference and whether it is under 0.05."""
    a_dir, b_dir = run_folder(run_a), run_folder(run_b)
    a, b = scored_systems(a_dir), scored_systems(b_dir)
    keys = [k for k in a if k in b]
    names: dict[tuple[str, str], str] = {}
    if table:
        names = table_systems([a_dir, b_dir], table)
        order = {vm: i for i, vm in enumerate(names)}
        keys = sorted((k for k in keys if k[1:3] in order), key=lambda k: (order[k[1:3]], k))
    if not keys:
        def listed(s: dict[Key, Scored]) -> str:
            return ", ".join(sorted({"/".join(k) for k in s})[:8]) or "none"
        raise InputError(f"no system was scored in both runs{f' among table {table} rows' if table else ''}: "
                         f"{a_dir} has {listed(a)}; {b_dir} has {listed(b)}")
    for k in sorted(set(a) ^ set(b)):
        log.info("%s: scored in one run only, not compared", "/".join(k))
    rows = []
    for k in keys:
        sa, sb = a[k], b[k]
        ref_a, ref_b = _read(sa.refs, "a reference"), _read(sb.refs, "a reference")
        if ref_a != ref_b:
            raise InputError(f"{'/'.join(k)}: the runs scored against different references ({sa.refs[0]} and "
                             f"{sb.refs[0]}): a significance test needs one test set; compare runs of the same "
                             "corpus and preprocessing")
        (hyp_a,), (hyp_b,) = _read([sa.hyp], "the translation"), _read([sb.hyp], "the translation")
        for hyp, s in ((hyp_a, sa), (hyp_b, sb)):
            if len(hyp) != len(ref_a[0]):
                raise InputError(f"{s.hyp}: {len(hyp)} lines for {len(ref_a[0])} reference lines: the translation "
                                 "changed since it was scored; rerun its score job")
        metrics: dict[str, Metric] = {"bleu": detok_scorer(sa.lowercase), "chrf": chrf_scorer(sa.lowercase)}
        result = paired_test(hyp_a, hyp_b, ref_a, metrics, test, samples)
        identical = hyp_a == hyp_b
        for metric, (sig_name, r) in zip(metrics, result.items(), strict=True):
            p_value = 1.0 if r["b"] == r["a"] else r["p_value"]
            rows.append({
                **dict(zip(KEY_NAMES, k, strict=True)), "system": names.get(k[1:3], k[1]), "metric": metric,
                "a": r["a"], "b": r["b"], "diff": r["b"] - r["a"], "p_value": p_value, "identical": identical,
                "significant": p_value < ALPHA, "a_mean": r["a_mean"], "a_ci": r["a_ci"],
                "b_mean": r["b_mean"], "b_ci": r["b_ci"], "test": test, "run_a": str(a_dir),
                "run_b": str(b_dir), "signature": r["signature"], "sacrebleu_metric": sig_name,
            })
    return pd.DataFrame(rows)


def markdown(df: pd.DataFrame) -> str:
    """Side by side, one line per system: BLEU and chrF of A and B, the difference and its p-value
    (* under 0.05; 1 where the scores are equal), and the test's signature below."""
    def cell(r: pd.Series) -> tuple[str, str, str, str]:
        ci = (lambda m, c: f" ({m:.1f} ± {c:.1f})") if pd.notna(r.a_ci) else (lambda m, c: "")
        star = "*" if r.significant else ""
        return (f"{r.a:.2f}{ci(r.a_mean, r.a_ci)}", f"{r.b:.2f}{ci(r.b_mean, r.b_ci)}", f"{r['diff']:+.2f}",
                "1 (same output)" if r.identical else "1 (no difference)" if r.a == r.b else f"{r.p_value:.4f}{star}")

    head = ["System", "member", "test set"]
    metrics = list(dict.fromkeys(df.metric))
    labels = {"bleu": "BLEU", "chrf": "chrF"}
    for m in metrics:
        head += [f"{labels[m]} A", f"{labels[m]} B", "Δ", "p"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, g in df.groupby(["corpus", "variant", "member", "testset"], sort=False):
        first = g.iloc[0]
        cells = [str(first.system), str(first.member), str(first.testset)]
        for m in metrics:
            cells += list(cell(g[g.metric == m].iloc[0]))
        lines.append("| " + " | ".join(cells) + " |")
    first = df.iloc[0]
    lines += ["", f"A: {first.run_a}; B: {first.run_b}. {TESTS[first.test].capitalize()} (sacrebleu), "
              f"* p < {ALPHA}; scores with bootstrap mean ± 95% CI where the test gives them.", ""]
    lines += [f"- {m}: {df[df.metric == m].signature.iloc[0]}" for m in metrics]
    return "\n".join(lines) + "\n"


def write(df: pd.DataFrame, csv: str | Path | None = None, md: str | Path | None = None) -> None:
    if csv:
        with atomic_writer(csv) as f:
            df.to_csv(f, index=False)
    if md:
        with atomic_writer(md) as f:
            f.write(markdown(df))
