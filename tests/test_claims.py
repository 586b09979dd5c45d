"""The papers' claims, checked: written as the papers state them (each holds on the paper's own numbers),
verdicts from paired bootstrap intervals on real scored files, and the tables' significance test on a
tokenized, compound-split BLEU equal to sacrebleu's own."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from rnmt.config import ConfigError
from rnmt.evaluate.bootstrap import bleu_of, paired_interval, sentence_stats
from rnmt.evaluate.metrics import write_metrics
from rnmt.evaluate.score import split_compounds, tok_scorer
from rnmt.io import InputError
from rnmt.planning.experiments import check_claims
from rnmt.planning.table import Row, Table, table_from_experiment
from rnmt.report import claims
from rnmt.report.tables import build

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = sorted((ROOT / "workflow/experiments").glob("*.yaml"))


def paper_frame(table: Table) -> pd.DataFrame:
    return pd.DataFrame([{"system": r.system, "metric": m, "paper": r.paper.get(m, math.nan), "ours": math.nan}
                         for r in table.rows for m in table.metrics]).astype({"paper": float})


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_every_claim_holds_on_the_papers_own_numbers(path: Path) -> None:
    """A claim written down wrongly (rows swapped, the wrong direction, a margin the paper breaks) shows
    here: the paper's numbers must bear out what the paper concludes from them."""
    exp = yaml.safe_load(path.read_text())
    check_claims(exp, path)
    table = table_from_experiment(exp, path)
    checked = claims.check(table, claims.parse(table), paper_frame(table), None)
    both = checked[checked.paper_diff.notna()]
    assert (both.paper_verdict == claims.HOLDS).all(), both[["says", "row", "than", "paper_diff"]]
    assert (checked[checked.paper_diff.isna()].paper_verdict == claims.NO_NUMBERS).all()


def test_the_headline_tables_state_the_papers_claims() -> None:
    """Each paper's headline table carries its claims, on its BLEU against the paper's baseline row."""
    for name, baseline in [("atr-table2", "RNNSearch + GRU + BPE"), ("srnmt-table2", "LSTM 2L"),
                           ("dtmt-table1", "ShallowRNMT"), ("ud-labels", "RNNSearch + GRU")]:
        exp = yaml.safe_load((ROOT / f"workflow/experiments/{name}.yaml").read_text())
        assert exp["baseline"] == baseline and exp["claims"], name


def test_verdicts_read_the_interval() -> None:
    assert claims.verdict("higher", 0.1, 0.9) == claims.HOLDS
    assert claims.verdict("higher", -0.2, 0.9) == claims.UNSURE
    assert claims.verdict("higher", -0.9, -0.1) == claims.FAILS
    assert claims.verdict("lower", -0.9, -0.1) == claims.HOLDS
    assert claims.verdict("within", -0.3, 0.4, 0.5) == claims.HOLDS
    assert claims.verdict("within", 0.2, 0.7, 0.5) == claims.UNSURE
    assert claims.verdict("within", 0.6, 0.9, 0.5) == claims.FAILS
    assert claims.verdict("higher", math.nan, math.nan) == claims.NO_NUMBERS
    assert claims.combine([claims.HOLDS, claims.UNSURE]) == claims.UNSURE
    assert claims.combine([claims.HOLDS, claims.FAILS, claims.UNSURE]) == claims.FAILS
    assert claims.combine([claims.HOLDS, claims.HOLDS]) == claims.HOLDS


def test_a_difference_of_exactly_the_margin_is_within_it() -> None:
    """10.0 − 9.7 is 0.3000000000000007 in floats: a paper whose rows differ by exactly a claim's margin
    must read "holds", and the claims CSV must carry the difference as the paper's numbers give it."""
    said = [{"says": "ATR on par with GRU", "metric": "bleu", "kind": "within", "margin": 0.3,
             "row": "ATR", "than": "GRU"}]
    table = Table("t", Path("t.yaml"), "T", "c", "test", ["bleu"],
                  [Row("GRU", "gru", {"bleu": 9.7}, (1,)), Row("ATR", "atr", {"bleu": 10.0}, (1,))],
                  baseline="GRU", claims=said)
    checked = claims.check(table, claims.parse(table), paper_frame(table), None)
    assert checked.paper_diff.tolist() == [0.3] and checked.paper_verdict.tolist() == [claims.HOLDS]


def test_a_claim_on_a_row_or_metric_the_table_lacks_is_refused_by_name() -> None:
    exp = {"rows": [{"system": "GRU"}, {"system": "ATR"}], "metrics": ["bleu"],
           "claims": [{"says": "x", "metric": "bleu", "kind": "higher", "row": "ATR", "than": "GRU "}]}
    with pytest.raises(ConfigError, match=r"no row 'GRU ' in the table \(did you mean 'GRU'\?\)"):
        check_claims(exp, Path("t.yaml"))
    exp["claims"][0].update(than="GRU", metric="chrf")
    with pytest.raises(ConfigError, match="metric 'chrf' is not one of the table's metrics"):
        check_claims(exp, Path("t.yaml"))
    exp["claims"][0].update(metric="bleu", kind="within")
    with pytest.raises(ConfigError, match="needs `margin`"):
        check_claims(exp, Path("t.yaml"))


# a small test set's words, two of them hyphenated compounds (for compound splitting)
WORDS = ("the", "a", "dog", "cat", "house", "garden", "runs", "sits", "sees", "under", "over", "red", "small",
         "big", "man", "woman", "child", "ball", "plays", "with", "in", "on", "street", "water", "well-known",
         "long-term")


def corpus(n: int = 240, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(6, 14)))) for _ in range(n)]


def damage(lines: list[str], share: float, seed: int) -> list[str]:
    """Each sentence with probability `share` loses its second half (a worse system)."""
    rng = np.random.default_rng(seed)
    return [" ".join(s.split()[: len(s.split()) // 2]) if rng.random() < share else s for s in lines]


def test_bootstrap_statistics_give_the_scorers_bleu_and_an_interval_around_the_difference() -> None:
    refs = corpus()
    a, b = damage(refs, 0.2, 1), damage(refs, 0.5, 2)
    scorer = tok_scorer()
    sa, sb = sentence_stats(scorer, a, [refs]), sentence_stats(scorer, b, [refs])
    assert bleu_of(scorer, sa) == pytest.approx(scorer.corpus_score(a, [refs]).score, abs=1e-9)
    whole = [np.arange(len(refs))]
    observed, low, high = paired_interval(scorer, sa, sb, whole)
    exact = scorer.corpus_score(a, [refs]).score - scorer.corpus_score(b, [refs]).score
    assert observed == pytest.approx(exact, abs=1e-9) and low < observed < high and low > 0
    assert paired_interval(scorer, sa, sb, whole) == (observed, low, high)          # seeded: reproducible
    assert paired_interval(scorer, sa, sa, whole) == (0.0, 0.0, 0.0)
    halves = [np.arange(0, 120), np.arange(120, 240)]                               # the sets' mean BLEU
    mean = np.mean([scorer.corpus_score([a[i] for i in g], [[refs[i] for i in g]]).score for g in halves]) - \
        np.mean([scorer.corpus_score([b[i] for i in g], [[refs[i] for i in g]]).score for g in halves])
    assert paired_interval(scorer, sa, sb, halves)[0] == pytest.approx(mean, abs=1e-9)


def scored_run(tmp: Path, systems: dict[tuple[str, str], list[str]], refs: list[str],
               src: list[str] | None = None) -> list[Path]:
    """A metrics file per (variant, member), written by `rnmt score`'s own function on real files (with
    BLEU by the source's lengths where `src` is given)."""
    (tmp / "ref.txt").write_text("\n".join(refs) + "\n")
    (tmp / "ref.tok").write_text("\n".join(refs) + "\n")
    if src is not None:
        (tmp / "src.tok").write_text("\n".join(src) + "\n")
    out = []
    for (variant, member), hyps in systems.items():
        d = tmp / variant / member
        d.mkdir(parents=True)
        for ext in ("txt", "tok"):
            (d / f"test.{ext}").write_text("\n".join(hyps) + "\n")
        path = d / "test.json"
        write_metrics(str(path), str(d / "test.txt"), [str(tmp / "ref.txt")], str(d / "test.tok"),
                      [str(tmp / "ref.tok")], src=str(tmp / "src.tok") if src is not None else None,
                      meta={"variant": variant, "member": member})
        out.append(path)
    return out


def test_a_table_checks_its_claims_on_the_scored_translations(tmp_path: Path) -> None:
    """Three rows with two seeds each: a good system, a much worse one, and one that equals the good one
    but for a few sentences. The claims' verdicts follow the bootstrap intervals of the seed pairs; the
    claims go into the CSV and the Markdown, HTML and LaTeX renderings."""
    refs = corpus()
    systems = {("good", "seed1"): damage(refs, 0.1, 1), ("good", "seed2"): damage(refs, 0.1, 2),
               ("bad", "seed1"): damage(refs, 0.6, 3), ("bad", "seed2"): damage(refs, 0.6, 4)}
    for s in ("seed1", "seed2"):
        close = list(systems[("good", s)])
        close[0] = damage([refs[0]], 1.0, 0)[0]
        systems[("close", s)] = close
    files = scored_run(tmp_path, systems, refs)
    said = [{"says": "good beats bad", "metric": "tok_bleu", "kind": "higher", "row": "Good", "than": "Bad"},
            {"says": "bad beats good", "metric": "tok_bleu", "kind": "higher", "row": "Bad", "than": "Good"},
            {"says": "close is on par with good", "metric": "bleu", "kind": "within", "margin": 2.0,
             "row": "Close", "than": "Good"},
            {"says": "close beats good", "metric": "bleu", "kind": "higher", "row": "Close", "than": "Good"},
            {"says": "good is best", "metric": "tok_bleu", "kind": "higher", "row": "Good",
             "than": ["Bad", "Close"]}]
    table = Table("t", tmp_path / "t.yaml", "T", "c", "test", ["bleu", "tok_bleu"],
                  [Row("Good", "good", {}, (1, 2)), Row("Bad", "bad", {}, (1, 2)), Row("Close", "close", {}, (1, 2))],
                  baseline="Good", claims=said)
    out = tmp_path / "out"
    build(table, files, "r", "mini", out / "t.csv", out / "t.md", out / "t.tex", out_html=out / "t.html",
          out_claims=out / "t.claims.csv")
    got = pd.read_csv(out / "t.claims.csv")
    verdicts = got.groupby("claim").claim_verdict.first().tolist()
    assert verdicts == [claims.HOLDS, claims.FAILS, claims.HOLDS, claims.UNSURE, claims.UNSURE]
    assert (got.pairs == 2).all()                                   # seed by seed, both rows' seeds 1 and 2
    best = got[got.claim == 5].set_index("than").verdict
    assert best["Bad"] == claims.HOLDS and best["Close"] == claims.UNSURE
    table_csv = pd.read_csv(out / "t.csv").set_index(["system", "metric"])
    diff = table_csv.loc[("Good", "tok_bleu"), "ours"] - table_csv.loc[("Bad", "tok_bleu"), "ours"]
    assert got.loc[0, "diff"] == pytest.approx(diff) and got.loc[0, "low"] > 0
    md = (out / "t.md").read_text()
    assert "## The paper's claims, checked" in md and "| 1. good beats bad (holds) | Good > Bad | tok BLEU |" in md
    assert "close is on par with good (holds)" in (out / "t.html").read_text()
    assert "bad beats good (does not hold)" in (out / "t.tex").read_text()


def test_a_claim_at_every_source_length_is_tested_on_each_lengths_sentences(tmp_path: Path) -> None:
    """DTMT Figure 3's "DTMT#4 is best on sentences of every length": one comparison per length, each a
    bootstrap over that length's sentences alone, its difference the scorer's BLEU on them. A system
    better on long sentences and worse on short ones does not hold at every length; a length with no
    test sentence has no numbers, one with a handful is not compared; a metrics file that does not name
    its source cannot be tested so."""
    refs = corpus(seed=3)
    src = [" ".join(["w"] * (5 if i % 2 else 45 if i < 20 else 15)) for i in range(len(refs))]   # odd short
    long_good = [r if i % 2 == 0 else damage([r], 1.0, 0)[0] for i, r in enumerate(refs)]
    short_good = [r if i % 2 else damage([r], 1.0, 0)[0] for i, r in enumerate(refs)]
    files = scored_run(tmp_path, {("long", "seed1"): long_good, ("short", "seed1"): short_good}, refs, src)
    metrics = ["tok_bleu_len@0-10", "tok_bleu_len@10-inf", "tok_bleu_len@40-inf", "tok_bleu_len@60-inf"]
    said = [{"says": "long is best at every length", "metric": metrics[:2], "kind": "higher", "row": "Long",
             "than": "Short"},
            {"says": "long is best on long sentences", "metric": "tok_bleu_len@10-inf", "kind": "higher",
             "row": "Long", "than": "Short"},
            {"says": "long is best beyond 40 words", "metric": ["tok_bleu_len@40-inf"], "kind": "higher",
             "row": "Long", "than": "Short"},
            {"says": "long is best beyond 60 words", "metric": ["tok_bleu_len@60-inf"], "kind": "higher",
             "row": "Long", "than": "Short"}]
    table = Table("t", tmp_path / "t.yaml", "T", "c", "test", metrics,
                  [Row("Short", "short", {}, (1,)), Row("Long", "long", {}, (1,))], claims=said)
    out = tmp_path / "out"
    build(table, files, "r", "mini", out / "t.csv", out / "t.md", out_claims=out / "t.claims.csv")
    got = pd.read_csv(out / "t.claims.csv")
    assert got.groupby("claim").claim_verdict.first().tolist() == [claims.FAILS, claims.HOLDS, claims.APART,
                                                                   claims.NO_NUMBERS]
    assert got[got.claim == 3].why.tolist() == ["10 test sentences, too few for a BLEU to mean much"]
    assert got[got.claim == 1].set_index("metric").verdict.to_dict() == {
        "tok_bleu_len@0-10": claims.FAILS, "tok_bleu_len@10-inf": claims.HOLDS}
    scorer, longer = tok_scorer(), [i for i, x in enumerate(src) if len(x.split()) > 10]
    exact = (scorer.corpus_score([long_good[i] for i in longer], [[refs[i] for i in longer]]).score
             - scorer.corpus_score([short_good[i] for i in longer], [[refs[i] for i in longer]]).score)
    row = got[(got.claim == 2)].iloc[0]
    assert row["diff"] == pytest.approx(exact, abs=1e-9) and 0 < row.low < exact < row.high
    md = (out / "t.md").read_text()
    assert "| 1. long is best at every length (does not hold) | Long > Short | tok len 1-10 |" in md
    assert "|  | Long > Short | tok len >10 |" in md and "over several rows or metrics holds" in md

    for f in files:                                 # written by an rnmt that did not record the source
        m = json.loads(f.read_text())
        del m["files"]["src"]
        f.write_text(json.dumps(m))
    with pytest.raises(InputError, match="does not name the source .*--forcerun score"):
        build(table, files, "r", "mini", out / "t.csv", out / "t.md", out_claims=out / "t.claims.csv")


def test_a_claim_on_a_model_that_did_not_learn_is_not_judged(tmp_path: Path) -> None:
    """A row whose model never left what word frequencies give (train.json's `learned`) says nothing of its
    system: a claim that compares it reads 'not comparable', naming the model, where its BLEU would have
    made the claim 'hold' or 'not hold' by a training failure."""
    refs = corpus()
    files = scored_run(tmp_path, {("good", "seed1"): damage(refs, 0.1, 1), ("stuck", "seed1"): damage(refs, 0.9, 2)},
                       refs)
    stuck = json.loads(files[1].read_text())
    stuck["train"] = {"steps": 1500, "learned": False, "lowest_dev_loss": 5.71, "frequency_dev_loss": 5.7226,
                      "train_settings": {"seed": 1}, "warnings": ["the model did not learn to translate"]}
    files[1].write_text(json.dumps(stuck))
    said = [{"says": "deep beats shallow", "metric": "bleu", "kind": "higher", "row": "Stuck", "than": "Good"}]
    table = Table("t", tmp_path / "t.yaml", "T", "c", "test", ["bleu"],
                  [Row("Good", "good", {}, (1,)), Row("Stuck", "stuck", {}, (1,))], baseline="Good", claims=said)
    out = tmp_path / "out"
    build(table, files, "r", "mini", out / "t.csv", out / "t.md", out_claims=out / "t.claims.csv")
    got = pd.read_csv(out / "t.claims.csv")
    assert got.verdict.tolist() == [claims.APART] and got.pairs.tolist() == [0]
    assert got.why[0] == ("stuck (seed 1) did not learn to translate: its lowest dev loss, 5.71, stayed near word "
                          "frequencies' 5.7226")
    md = (out / "t.md").read_text()
    assert "deep beats shallow (not comparable)" in md
    assert "Warning: stuck (seed 1): the model did not learn to translate." in md       # named by row and seed


def test_a_row_with_a_seed_that_gave_no_output_says_over_how_many_seeds_and_pairs(tmp_path: Path) -> None:
    """One of a row's seeds did not learn and wrote no output (its BLEU unscored): the row's mean is over the
    other seed and says so in the Markdown, and the claim is judged on the one seed pair left, saying which
    model it set aside, where the table would otherwise read as two seeds' mean and verdict."""
    refs = corpus()
    files = scored_run(tmp_path, {("good", "seed1"): damage(refs, 0.1, 1), ("good", "seed2"): damage(refs, 0.1, 2),
                                  ("deep", "seed1"): damage(refs, 0.6, 3), ("deep", "seed2"): [""] * len(refs)},
                       refs)
    stuck = json.loads(files[3].read_text())
    assert "empty_output" in stuck["scores"]
    stuck["train"] = {"steps": 5500, "learned": False, "lowest_dev_loss": 6.239, "frequency_dev_loss": 6.1955,
                      "train_settings": {"seed": 2}, "warnings": ["the model did not learn to translate"]}
    files[3].write_text(json.dumps(stuck))
    said = [{"says": "deep beats good", "metric": "bleu", "kind": "higher", "row": "Deep", "than": "Good"}]
    table = Table("t", tmp_path / "t.yaml", "T", "c", "test", ["bleu"],
                  [Row("Good", "good", {}, (1, 2)), Row("Deep", "deep", {}, (1, 2))], baseline="Good", claims=said)
    out = tmp_path / "out"
    build(table, files, "r", "mini", out / "t.csv", out / "t.md", out_claims=out / "t.claims.csv")
    rows = pd.read_csv(out / "t.csv").set_index("system")
    assert rows.n_seeds.to_dict() == {"Good": 2, "Deep": 1}
    got = pd.read_csv(out / "t.claims.csv")
    assert got.verdict.tolist() == [claims.FAILS] and got.pairs.tolist() == [1]
    md = (out / "t.md").read_text()
    deep = next(line for line in md.splitlines() if line.startswith("| Deep |"))
    good = next(line for line in md.splitlines() if line.startswith("| Good |"))
    assert deep.endswith(" (1 of 2 seeds) |") and "of 2 seeds" not in good
    assert ("does not hold, from 1 seed pair (deep (seed 2) did not learn to translate: its lowest dev loss, "
            "6.239, stayed near word frequencies' 6.1955) |") in md
    # a row of that seed alone has no BLEU, and its empty cell says why
    alone = Table("t", tmp_path / "t.yaml", "T", "c", "test", ["bleu"], [Row("Deep", "deep", {}, (2,))])
    df = build(alone, files[3:], "r", "mini", out / "a.csv", out / "a.md")
    assert df.why_empty.tolist() == ["deep (seed 2) did not learn to translate: its lowest dev loss, 6.239, stayed "
                                     "near word frequencies' 6.1955"]


def test_a_pair_left_out_of_a_claim_is_named_with_why(tmp_path: Path) -> None:
    """A speed claim over two seeds each, one seed's training speed not recorded (a run from before it was):
    the claim is judged on the one pair left and says which decoding lacked the metric, where it had been
    judged on one pair as if on both."""
    refs = corpus()
    files = scored_run(tmp_path, {(v, f"seed{s}"): damage(refs, 0.2, s) for v in ("fast", "slow") for s in (1, 2)},
                       refs)
    for f, speed in zip(files, (900.0, 950.0, 500.0, None), strict=True):
        m = json.loads(f.read_text())
        m["train"] = {"steps": 100, "train_settings": {"seed": int(m["member"][-1])}}
        if speed is not None:
            m["train"]["train_tgt_words_per_s"] = speed
        f.write_text(json.dumps(m))
    said = [{"says": "fast trains faster", "metric": "train_tgt_words_per_s", "kind": "higher", "row": "Fast",
             "than": "Slow"}]
    table = Table("t", tmp_path / "t.yaml", "T", "c", "test", ["bleu", "train_tgt_words_per_s"],
                  [Row("Fast", "fast", {}, (1, 2)), Row("Slow", "slow", {}, (1, 2))], baseline="Slow", claims=said)
    build(table, files, "r", "mini", tmp_path / "t.csv", tmp_path / "t.md", out_claims=tmp_path / "t.claims.csv")
    got = pd.read_csv(tmp_path / "t.claims.csv")
    assert got.pairs.tolist() == [1] and got.verdict.tolist() == [claims.HOLDS]
    assert got.why[0] == "no Train words/s recorded for slow (seed 2)"
    assert "holds, from 1 seed pair (no Train words/s recorded for slow (seed 2)) |" in (tmp_path / "t.md").read_text()


def two_rows(tmp: Path, refs: list[str], metric: str, damages: dict[str, tuple[float, float]]
             ) -> tuple[dict[tuple[str, str], list[str]], pd.DataFrame]:
    """A table of two rows of two seeds on `metric`, the first row its reference, each seed's translations
    the references with that share of sentences cut (`damage`): (translations by (row, seed), the table)."""
    systems = {(row, f"seed{s}"): damage(refs, share, 2 * i + s)
               for i, (row, shares) in enumerate(damages.items()) for s, share in zip((1, 2), shares, strict=True)}
    files = scored_run(tmp, {(row.lower().replace(" ", ""), s): h for (row, s), h in systems.items()}, refs)
    names = list(damages)
    table = Table("t", tmp / "t.yaml", "T", "c", "test", [metric],
                  [Row(n, n.lower().replace(" ", ""), {}, (1, 2)) for n in names], baseline=names[0])
    return systems, build(table, files, "r", "mini", tmp / "t.csv", tmp / "t.md")


def sacrebleu_pairs(systems: dict[tuple[str, str], list[str]], refs: list[str], base: str, row: str, scorer,
                    prep=lambda lines: lines) -> list[tuple[float, float]]:
    """sacrebleu's own paired bootstrap of each of `row`'s two seeds against the same seed of `base`, on the
    files as `prep` makes them: (p-value, row's BLEU − base's) per seed."""
    from sacrebleu.significance import PairedTest

    out = []
    for s in ("seed1", "seed2"):
        _, results = PairedTest([("base", prep(systems[(base, s)])), ("sys", prep(systems[(row, s)]))],
                                {"BLEU": scorer}, [prep(refs)], test_type="bs", n_samples=1000)()
        b, other = results["BLEU"]
        out.append((1.0 if b.score == other.score else other.p_value, other.score - b.score))
    return out


def test_significance_of_a_compound_split_bleu_is_sacrebleus_paired_test_on_the_split_files(tmp_path: Path) -> None:
    """SR-NMT's tables report tokenized BLEU after compound splitting; their rows are tested on that score,
    as sacrebleu's paired bootstrap tests the split files (seed by seed, the larger p-value counts)."""
    refs = corpus(seed=5)
    systems, df = two_rows(tmp_path, refs, "tok_bleu_compound", {"LSTM 2L": (0.3, 0.3), "SR-NMT 2L": (0.25, 0.28)})
    tests = sacrebleu_pairs(systems, refs, "LSTM 2L", "SR-NMT 2L", tok_scorer(),
                            lambda lines: [split_compounds(x) for x in lines])
    p = [pv for pv, _ in tests]
    assert all(diff > 0 for _, diff in tests)      # both pairs one way: the larger p-value is the row's
    got = df.set_index(["system", "metric"]).p_value
    assert got[("SR-NMT 2L", "tok_bleu_compound")] == pytest.approx(max(p), abs=1e-12)
    assert math.isnan(got[("LSTM 2L", "tok_bleu_compound")])
    assert "tok BLEU (compounds split) marked * differs from LSTM 2L's" in (tmp_path / "t.md").read_text()


def test_a_row_whose_seeds_differ_from_the_reference_in_opposite_directions_is_not_marked(tmp_path: Path) -> None:
    """Seed 1 far better than the reference's seed 1, seed 2 far worse than its seed 2: each pair differs
    beyond chance, but the row does not differ one way, so it gets p = 1 and no mark."""
    from sacrebleu.metrics import BLEU

    refs = corpus(seed=6)
    systems, df = two_rows(tmp_path, refs, "bleu", {"GRU": (0.3, 0.3), "GRU + labels": (0.05, 0.6)})
    (p1, d1), (p2, d2) = sacrebleu_pairs(systems, refs, "GRU", "GRU + labels", BLEU())
    assert p1 < 0.05 and p2 < 0.05 and d1 > 0 > d2          # each pair beyond chance, the two opposite ways
    assert df.set_index(["system", "metric"]).p_value[("GRU + labels", "bleu")] == 1.0
    row = next(line for line in (tmp_path / "t.md").read_text().splitlines() if line.startswith("| GRU + labels |"))
    assert "*" not in row
    md = (tmp_path / "t.md").read_text()
    assert "1 where its pairs differ in opposite directions" in md
    line = next(x for x in md.splitlines() if x.startswith("GRU + labels is not marked"))
    assert re.search(r"both ways \(seed1 vs seed1 \+\d+\.\d\d \(p = 0\.00\d\), seed2 vs seed2 -\d+\.\d\d", line), line


def test_a_seed_that_says_nothing_is_left_out_of_the_rows_significance_test(tmp_path: Path) -> None:
    """Seed 1 of a row is far better than the reference's seed 1; its seed 2 did not learn (its translation
    poor but there). The mean and the claims leave seed 2 out, and so must the test: its translation against
    the reference's would make the row differ both ways (p = 1, no mark). The row's p-value is sacrebleu's
    of the one pair left, and the table says which pair it left out and why; a seed that wrote no output at
    all is left out the same way."""
    from sacrebleu.metrics import BLEU

    refs = corpus(seed=7)
    systems = {("GRU", "seed1"): damage(refs, 0.4, 1), ("GRU", "seed2"): damage(refs, 0.4, 2),
               ("Deep", "seed1"): damage(refs, 0.05, 3), ("Deep", "seed2"): damage(refs, 0.95, 4)}
    files = scored_run(tmp_path, {(r.lower(), s): h for (r, s), h in systems.items()}, refs)
    stuck = json.loads(files[3].read_text())
    stuck["train"] = {"steps": 5500, "learned": False, "lowest_dev_loss": 6.239, "frequency_dev_loss": 6.1955,
                      "train_settings": {"seed": 2}}
    files[3].write_text(json.dumps(stuck))
    table = Table("t", tmp_path / "t.yaml", "T", "c", "test", ["bleu"],
                  [Row("GRU", "gru", {}, (1, 2)), Row("Deep", "deep", {}, (1, 2))], baseline="GRU")
    df = build(table, files, "r", "mini", tmp_path / "t.csv", tmp_path / "t.md")
    (p1, d1), (p2, d2) = sacrebleu_pairs(systems, refs, "GRU", "Deep", BLEU())
    assert p1 < 0.05 and d1 > 0 > d2 and p2 < 0.05           # with seed 2's pair, the row differs both ways
    assert df.set_index(["system", "metric"]).p_value[("Deep", "bleu")] == pytest.approx(p1, abs=1e-12)
    md = (tmp_path / "t.md").read_text()
    assert next(x for x in md.splitlines() if x.startswith("| Deep |")).endswith("* (1 of 2 seeds) |")
    assert ("Deep is tested on 1 of 2 pairs with GRU's decodings: deep (seed 2) did not learn to translate: its "
            "lowest dev loss, 6.239, stayed near word frequencies' 6.1955.") in md
    (tmp_path / "deep/seed2/test.txt").write_text("\n" * len(refs))          # no output, no train record
    (tmp_path / "deep/seed2/test.tok").write_text("\n" * len(refs))
    write_metrics(str(files[3]), str(tmp_path / "deep/seed2/test.txt"), [str(tmp_path / "ref.txt")],
                  str(tmp_path / "deep/seed2/test.tok"), [str(tmp_path / "ref.tok")],
                  meta={"variant": "deep", "member": "seed2"})
    df = build(table, files, "r", "mini", tmp_path / "t.csv", tmp_path / "t.md")
    assert df.set_index(["system", "metric"]).p_value[("Deep", "bleu")] == pytest.approx(p1, abs=1e-12)
    assert "with GRU's decodings: deep (seed 2): every hypothesis is empty: the model produced no output" in \
        (tmp_path / "t.md").read_text()


def test_a_table_of_set_averages_is_tested_on_the_whole_split_and_says_so(tmp_path: Path) -> None:
    from rnmt.report.significance import note, tested

    table = Table("t", tmp_path / "t.yaml", "T", "c", "test", ["tok_bleu@nist-mt02", "tok_bleu_avg", "params_m"],
                  [Row("Shallow", "s", {}, (1,)), Row("Deep", "d", {}, (1,))], baseline="Shallow")
    assert tested(table) == ("tok_bleu", "tok_bleu_avg")
    assert note(table).startswith("tok Avg marked *: the row's tok BLEU of the whole test split (all its sets "
                                  "together) differs from")


def test_a_decoding_given_twice_or_a_seed_listed_twice_is_refused(tmp_path: Path) -> None:
    """Two metrics files of one (variant, member), e.g. an old run's beside the new one, would leave the
    table with whichever came last; a row listing a seed twice would count one model twice."""
    from rnmt.config import validate
    from rnmt.io import InputError

    refs = corpus(40)
    files = scored_run(tmp_path, {("good", "seed1"): damage(refs, 0.1, 1)}, refs)
    copy = tmp_path / "old" / "test.json"
    copy.parent.mkdir()
    copy.write_text(files[0].read_text())
    table = Table("t", tmp_path / "t.yaml", "T", "c", "test", ["bleu"], [Row("Good", "good", {}, (1,))])
    with pytest.raises(InputError, match=r"old/test.json are both the metrics of good seed1; pass one file"):
        build(table, [*files, copy], "r", "mini", tmp_path / "t.csv", tmp_path / "t.md")
    exp = yaml.safe_load((ROOT / "workflow/experiments/atr-table4.yaml").read_text())
    exp["rows"][0]["seeds"] = [1, 1]
    with pytest.raises(ConfigError, match="non-unique elements"):
        validate(exp, ROOT / "workflow/schemas/experiment.schema.yaml", "atr-table4.yaml")


def test_an_interval_is_written_at_its_differences_precision() -> None:
    """A reader compares the interval's ends with the difference: +0.47 [+0.01, +0.95], not
    +0.47 [+0.00912, +0.953]; a small difference keeps its significant figures and so does its interval."""
    frame = pd.DataFrame([
        {"claim": 1, "says": "a", "kind": "higher", "margin": math.nan, "row": "A", "than": "B", "metric": "bleu",
         "paper_diff": math.nan, "paper_verdict": claims.NO_NUMBERS, "diff": 0.4699906955318731,
         "low": 0.009120171427059998, "high": 0.9533800447976446, "verdict": claims.HOLDS,
         "claim_verdict": claims.HOLDS, "pairs": 1, "why": ""},
        {"claim": 2, "says": "b", "kind": "higher", "margin": math.nan, "row": "A", "than": "B",
         "metric": "gate_pearson_r", "paper_diff": math.nan, "paper_verdict": claims.NO_NUMBERS, "diff": -0.0123,
         "low": -0.01861, "high": -0.004, "verdict": claims.HOLDS, "claim_verdict": claims.HOLDS,
         "pairs": 1, "why": ""},
        {"claim": 3, "says": "c", "kind": "lower", "margin": math.nan, "row": "A", "than": "B",
         "metric": "tok_bleu_avg", "paper_diff": -1.06, "paper_verdict": claims.HOLDS, "diff": 0.0942,
         "low": -0.5721, "high": 0.8706, "verdict": claims.UNSURE, "claim_verdict": claims.UNSURE,
         "pairs": 1, "why": ""},
        {"claim": 4, "says": "d", "kind": "lower", "margin": math.nan, "row": "A", "than": "B",
         "metric": "tok_bleu_compound", "paper_diff": -0.6, "paper_verdict": claims.HOLDS, "diff": 0.0942,
         "low": -0.5721, "high": 0.8706, "verdict": claims.UNSURE, "claim_verdict": claims.UNSURE,
         "pairs": 1, "why": ""}])
    got = [line[4] for line in claims.lines(frame)]
    # a BLEU difference at BLEU's two decimals (DTMT Table 4 read +0.0942 [−0.5721, +0.8706] beside −0.56),
    # the compound-split BLEU of SR-NMT Table 2 too (its paper difference read −0.6 beside +0.53)
    assert got == ["+0.47 [+0.01, +0.95]", "−0.0123 [−0.0186, −0.0040]", "+0.09 [−0.57, +0.87]",
                   "+0.09 [−0.57, +0.87]"]
    assert [line[3] for line in claims.lines(frame)][3] == "−0.60 (holds)"


def test_a_length_without_test_sentences_has_no_numbers_though_a_seed_did_not_learn(tmp_path: Path) -> None:
    """DTMT Figure 3 at `mini`: one of DTMT#4's seeds did not learn, and no test sentence is longer than 50
    words. A comparison beyond a length no test sentence reaches has no numbers, for every seed pair: it reads
    'no numbers', not 'not comparable' naming the seed that did not learn, which was not why it has none. A
    length with sentences is judged on the pair that learned, naming the seed left out."""
    refs = corpus(seed=4)
    src = [" ".join(["w"] * (5 if i % 2 else 15)) for i in range(len(refs))]
    files = scored_run(tmp_path, {("good", "seed1"): damage(refs, 0.1, 1), ("good", "seed2"): damage(refs, 0.1, 2),
                                  ("deep", "seed1"): damage(refs, 0.3, 3), ("deep", "seed2"): damage(refs, 0.9, 4)},
                       refs, src)
    stuck = json.loads(files[3].read_text())
    stuck["train"] = {"steps": 5000, "learned": False, "lowest_dev_loss": 6.2402, "frequency_dev_loss": 6.1955,
                      "train_settings": {"seed": 2}, "warnings": ["the model did not learn to translate"]}
    files[3].write_text(json.dumps(stuck))
    metrics = ["tok_bleu_len@10-inf", "tok_bleu_len@50-inf"]
    said = [{"says": "deep is best at every length", "metric": metrics, "kind": "higher", "row": "Deep",
             "than": "Good"}]
    table = Table("t", tmp_path / "t.yaml", "T", "c", "test", metrics,
                  [Row("Good", "good", {}, (1, 2)), Row("Deep", "deep", {}, (1, 2))], claims=said)
    out = tmp_path / "out"
    build(table, files, "r", "mini", out / "t.csv", out / "t.md", out_claims=out / "t.claims.csv")
    got = pd.read_csv(out / "t.claims.csv", keep_default_na=False).set_index("metric")
    assert got.loc["tok_bleu_len@50-inf", "verdict"] == claims.NO_NUMBERS
    assert got.loc["tok_bleu_len@50-inf", "why"] == "" and got.loc["tok_bleu_len@50-inf", "pairs"] == 0
    assert got.loc["tok_bleu_len@10-inf", "verdict"] == claims.FAILS and got.loc["tok_bleu_len@10-inf", "pairs"] == 1
    assert got.loc["tok_bleu_len@10-inf", "why"].startswith("deep (seed 2) did not learn to translate")
