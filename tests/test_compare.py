"""`rnmt compare`: two runs' common systems with sacrebleu's paired significance tests, whose p-values must be
those of the sacrebleu command line on the same files."""

import random
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import SESSION_ENV
from rnmt.evaluate.compare import compare
from rnmt.evaluate.metrics import write_metrics
from rnmt.io import InputError

WORDS = ["the", "a", "cat", "dog", "bird", "sat", "on", "under", "mat", "roof", "ran", "fast", "slow", "big", "small",
         "red", "green", "house", "tree", "saw", "quickly", "old", "young", "man", "woman", "child", "garden"]
ENV = {**SESSION_ENV, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 14))) + "." for _ in range(n)]


def noisy(refs: list[str], p: float, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(w if rng.random() > p else rng.choice(WORDS) for w in r.split()) for r in refs]


def make_run(root: Path, name: str, systems: dict[tuple[str, str], list[str]], refs: list[str]) -> Path:
    """A run folder as the pipeline lays it out, its metrics files written by the score step's function."""
    run = root / "results" / name
    ref = run / "data/c/raw/test.tgt"
    ref.parent.mkdir(parents=True, exist_ok=True)
    ref.write_text("\n".join(refs) + "\n")
    for (variant, member), hyps in systems.items():
        hyp = run / f"translations/c/{variant}/{member}/test.txt"
        hyp.parent.mkdir(parents=True, exist_ok=True)
        hyp.write_text("\n".join(hyps) + "\n")
        write_metrics(str(run / f"metrics/c/{variant}/{member}/test.json"), str(hyp), [str(ref)],
                      meta={"corpus": "c", "variant": variant, "member": member, "testset": "test", "run": name})
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cmp")
    refs = sentences(150, 0)
    make_run(root, "base", {("gru", "seed1"): noisy(refs, 0.34, 1), ("atr", "seed1"): noisy(refs, 0.30, 2),
                            ("atr", "ens1-2"): noisy(refs, 0.25, 3), ("lstm", "seed1"): noisy(refs, 0.3, 4)}, refs)
    make_run(root, "new", {("gru", "seed1"): noisy(refs, 0.32, 5), ("atr", "seed1"): noisy(refs, 0.20, 6),
                           ("atr", "ens1-2"): noisy(refs, 0.24, 7), ("sru", "seed1"): noisy(refs, 0.3, 8)}, refs)
    # the table's CSV as `rnmt table` writes it (tests/test_workflow.py checks these columns on a real run)
    table = pd.DataFrame({"row": [1, 1, 2, 2, 3, 3], "system": ["GRU"] * 2 + ["ATR"] * 2 + ["ATR ens"] * 2,
                          "variant": ["gru"] * 2 + ["atr"] * 4, "members": ["seed1"] * 4 + ["ens1-2"] * 2,
                          "metric": ["bleu", "chrf"] * 3})
    (root / "results/new/tables").mkdir(parents=True)
    table.to_csv(root / "results/new/tables/t.csv", index=False)
    return root


def sacrebleu_p_values(ref: Path, a: Path, b: Path, test: str) -> tuple[float, float]:
    """The p-values of BLEU and chrF that `sacrebleu REF -i A B --paired-TEST` prints for B."""
    out = subprocess.run([sys.executable, "-m", "sacrebleu", str(ref), "-i", str(a), str(b), "-m", "bleu", "chrf",
                          f"--paired-{test}", "-f", "text"], capture_output=True, text=True, check=True).stdout
    p = [float(x) for x in re.findall(r"\(p = (0\.\d+)\)", out)]
    assert len(p) == 2, out
    return p[0], p[1]


@pytest.mark.parametrize("test", ["bs", "ar"])
def test_p_values_are_sacrebleus_on_the_same_files(runs: Path, test: str) -> None:
    df = compare(runs / "results/base", runs / "results/new", test=test)
    assert set(zip(df.variant, df.member, strict=True)) == {("gru", "seed1"), ("atr", "seed1"), ("atr", "ens1-2")}
    for (variant, member), g in df.groupby(["variant", "member"]):
        g = g.set_index("metric")
        files = [runs / f"results/{r}/translations/c/{variant}/{member}/test.txt" for r in ("base", "new")]
        p_bleu, p_chrf = sacrebleu_p_values(runs / "results/base/data/c/raw/test.tgt", *files, test)
        assert g.p_value["bleu"] == pytest.approx(p_bleu, abs=5e-5)
        assert g.p_value["chrf"] == pytest.approx(p_chrf, abs=5e-5)
        # the scores are the metrics files' (the tables' bleu and chrf columns)
        for run, col in (("base", "a"), ("new", "b")):
            m = pd.read_json(runs / f"results/{run}/metrics/c/{variant}/{member}/test.json", typ="series")
            assert g[col]["bleu"] == pytest.approx(m["scores"]["bleu"])
            assert g[col]["chrf"] == pytest.approx(m["scores"]["chrf"])
        assert g["diff"]["bleu"] == pytest.approx(g.b["bleu"] - g.a["bleu"])
    p = df.set_index(["variant", "member", "metric"]).p_value
    assert p["atr", "seed1", "bleu"] < 0.05 < p["atr", "ens1-2", "bleu"]     # a clear gain, and none
    assert (df.significant == (df.p_value < 0.05)).all()
    if test == "bs":
        assert df.b_ci.notna().all() and (df.b_ci > 0).all()


def test_identical_translations_are_never_a_significant_difference(runs: Path, tmp_path: Path) -> None:
    """sacrebleu gives a system against an identical copy its smallest p-value (1/1001, 'significant');
    compare reports the pair as identical, p = 1. So it does for outputs that differ but score alike in
    every resample (here: a changed sentence that shares no n-gram with its reference either way)."""
    refs = sentences(150, 0)
    same = noisy(refs, 0.3, 4)
    alike = [list(same), list(same)]
    alike[1][7] = "1111 2222 3333"                      # both versions of line 7 match nothing of its reference
    alike[0][7] = "4444 5555 6666"
    for name, seed, other in (("x", 9, alike[0]), ("y", 10, alike[1])):
        make_run(tmp_path, name, {("lstm", "seed1"): same, ("gru", "seed1"): noisy(refs, 0.3, seed),
                                  ("ran", "seed1"): other}, refs)
    files = [tmp_path / f"results/{r}/translations/c/lstm/seed1/test.txt" for r in ("x", "y")]
    theirs = sacrebleu_p_values(tmp_path / "results/x/data/c/raw/test.tgt", *files, "bs")
    assert theirs == pytest.approx((1 / 1001,) * 2, abs=5e-5)
    df = compare(tmp_path / "results/x", tmp_path / "results/y").set_index(["variant", "metric"])
    assert list(df.loc["lstm"].p_value) == [1.0, 1.0] and not df.loc["lstm"].significant.any()
    assert df.loc["lstm"].identical.all() and not df.loc["gru"].identical.any()
    assert (df.loc["lstm"]["diff"] == 0).all()
    ran = df.loc["ran"]
    assert not ran.identical.any() and (ran["diff"] == 0).all() and list(ran.p_value) == [1.0, 1.0]
    assert df.loc["gru"].p_value.lt(1).all()


def test_the_command_line_orders_and_names_a_tables_rows(runs: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "rnmt", "compare", "base", "new", "--table", "t", "--output", "c.csv",
                        "--md", "c.md"], cwd=runs, capture_output=True, text=True, env=ENV)
    assert r.returncode == 0, r.stderr
    assert "sacrebleu" not in r.stderr           # rnmt's own lines only: sacrebleu's INFO chatter is muted
    df = pd.read_csv(runs / "c.csv")
    assert list(dict.fromkeys(df.system)) == ["GRU", "ATR", "ATR ens"]
    md = (runs / "c.md").read_text()
    assert md == r.stdout
    assert md.splitlines()[0] == "| System | member | test set | BLEU A | BLEU B | Δ | p | chrF A | chrF B | Δ | p |"
    assert [line.split(" | ")[0] for line in md.splitlines()[2:5]] == ["| GRU", "| ATR", "| ATR ens"]
    assert "nrefs:1|bs:1000|seed:12345|case:mixed|eff:no|tok:13a" in md


def test_bad_runs_are_refused_with_the_fix(runs: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a run's results folder"):
        compare(runs / "results/base", tmp_path / "nowhere")
    with pytest.raises(InputError, match="neither run has built it"):
        compare(runs / "results/base", runs / "results/new", table="other")
    # a run of another test set: no significance test across different references
    other = make_run(tmp_path, "other", {("gru", "seed1"): sentences(150, 9)}, sentences(150, 10))
    with pytest.raises(InputError, match="different references"):
        compare(runs / "results/base", other)
    # nothing in common
    lone = make_run(tmp_path, "lone", {("x", "seed1"): sentences(150, 0)}, sentences(150, 0))
    with pytest.raises(InputError, match="no system was scored in both runs"):
        compare(runs / "results/base", lone)


def test_a_file_changed_after_scoring_is_refused_by_compare_table_and_runs(runs: Path, tmp_path: Path) -> None:
    """A translation replaced after its score job (the same number of lines): compare would re-score the new
    file beside the old metrics, a table or runs.csv would show the old score for the new file."""
    refs = sentences(150, 0)
    a = make_run(tmp_path, "a", {("gru", "seed1"): noisy(refs, 0.3, 1)}, refs)
    b = make_run(tmp_path, "b", {("gru", "seed1"): noisy(refs, 0.9, 2)}, refs)
    assert len(compare(a, b)) == 2
    hyp = b / "translations/c/gru/seed1/test.txt"
    hyp.write_text("\n".join(refs) + "\n")                        # BLEU 100 now, against 0.2 recorded
    metrics = b / "metrics/c/gru/seed1/test.json"
    with pytest.raises(InputError, match=r"test.txt has changed since .*test.json scored it.*rerun its score job"):
        compare(a, b)
    from rnmt.report.runs import write_runs

    with pytest.raises(InputError, match="has changed since"):
        write_runs([metrics], tmp_path / "runs.csv")
    (a / "data/c/raw/test.tgt").unlink()
    with pytest.raises(InputError, match=r"test.tgt: scored in .* but missing now"):
        write_runs([a / "metrics/c/gru/seed1/test.json"], tmp_path / "runs.csv")
    metrics.write_text(metrics.read_text()[:50])                  # a truncated metrics file
    with pytest.raises(InputError, match=r"test.json: not valid JSON .*delete it and rerun"):
        write_runs([metrics], tmp_path / "runs.csv")
