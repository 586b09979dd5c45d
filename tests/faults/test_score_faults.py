"""`rnmt score` on translations and references that cannot give a meaningful score: empty files,
and a model that produced nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faults.faultlib import rnmt
from rnmt.evaluate.score import EMPTY_OUTPUT
from rnmt.planning.table import table_from_experiment
from rnmt.report.tables import tidy, why_empty

pytestmark = pytest.mark.faults


def write(path: Path, rows: list[str]) -> Path:
    path.write_text("".join(r + "\n" for r in rows), encoding="utf-8")
    return path


def test_score_on_empty_files_is_a_clear_error(tmp_path: Path, record) -> None:
    record.bad_input("an empty hypothesis and an empty reference file (`rnmt score`)")
    hyp, ref = write(tmp_path / "test.txt", []), write(tmp_path / "test.tgt", [])
    got = rnmt("score", "--hyp", str(hyp), "--ref", str(ref), "--output", str(tmp_path / "m.json"))
    assert got.returncode == 2 and "Traceback" not in got.stderr, got.stderr[-2000:]
    assert f"rnmt score: error: {ref}: the reference file is empty: the test set has no sentences" in got.stderr
    assert not (tmp_path / "m.json").exists()

    record.bad_input("an empty hypothesis file against a non-empty reference (`rnmt score`)")
    write(ref, ["a b c", "d e"])
    got = rnmt("score", "--hyp", str(hyp), "--ref", str(ref), "--output", str(tmp_path / "m.json"))
    assert got.returncode == 2 and "Traceback" not in got.stderr, got.stderr[-2000:]
    assert f"rnmt score: error: {hyp}: the translation is empty (0 lines for 2 reference lines)" in got.stderr
    assert "rerun" in got.stderr and not (tmp_path / "m.json").exists()


def test_every_hypothesis_empty_is_no_bleu_zero_but_a_reason_in_the_table(tmp_path: Path, record) -> None:
    record.bad_input("a translation whose every line is empty (`rnmt score`, then its table: no BLEU 0.0)")
    hyp, ref = write(tmp_path / "test.txt", ["", "", ""]), write(tmp_path / "test.tgt", ["a b", "c d", "e"])
    got = rnmt("score", "--hyp", str(hyp), "--ref", str(ref), "--output", str(tmp_path / "m.json"))
    assert got.returncode == 0 and "Traceback" not in got.stderr, got.stderr[-2000:]
    assert f"not scored: {EMPTY_OUTPUT} (3 lines of {hyp})" in got.stderr
    scores = json.loads((tmp_path / "m.json").read_text())["scores"]
    assert scores["empty_output"] == EMPTY_OUTPUT and "bleu" not in scores and "chrf" not in scores
    table = table_from_experiment({"table": "t", "title": "t", "corpus": "c", "metrics": ["bleu", "chrf"],
                                   "rows": [{"system": "S", "variant": "v", "arch": "rnnsearch"}]}, Path("t.yaml"))
    df = tidy(table, {("v", "seed1"): {"scores": scores}}, "r", "demo")
    assert df.ours.isna().all() and set(df.why_empty) == {EMPTY_OUTPUT}
    # one seed of three empty: the row is the others' mean, and a test set the scale lacks keeps its own
    # reason (the scored seeds lack it too), not the empty seed's
    nist = table_from_experiment({"table": "t", "title": "t", "corpus": "c", "metrics": ["bleu", "bleu@nist-mt02"],
                                  "rows": [{"system": "S", "variant": "v", "arch": "rnnsearch",
                                            "seeds": [1, 2, 3]}]}, Path("t.yaml"))
    df = tidy(nist, {("v", "seed1"): {"scores": {"bleu": 30.0}}, ("v", "seed2"): {"scores": scores},
                     ("v", "seed3"): {"scores": {"bleu": 32.0}}}, "r", "mini").set_index("metric")
    assert df.loc["bleu", "ours"] == 31.0 and df.loc["bleu", "n_seeds"] == 2 and df.loc["bleu", "why_empty"] == ""
    assert df.loc["bleu@nist-mt02", "why_empty"] == why_empty("bleu@nist-mt02", "mini") != EMPTY_OUTPUT
    write(hyp, ["", "c d", ""])                # some empty lines are a (poor) result, scored as such
    got = rnmt("score", "--hyp", str(hyp), "--ref", str(ref), "--output", str(tmp_path / "m.json"))
    assert got.returncode == 0, got.stderr[-2000:]
    assert json.loads((tmp_path / "m.json").read_text())["scores"]["sentences"] == 3
