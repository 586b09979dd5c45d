"""A run's numbers are kept as a record, and a later run is checked against it: every number that does
not measure time must come back; speeds may differ. The README's demo numbers are the committed record's."""

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from rnmt import cli
from rnmt.report import record


def finished_run(d: Path, bleu: float = 61.23456, speed: float = 1000.0) -> Path:
    """A run folder as the pipeline leaves it: a table's CSV and one trained model's metrics."""
    (d / "tables").mkdir(parents=True)
    rows = [("t", 1, "GRU", "gru", "seed1", "bleu", bleu, 1),
            ("t", 1, "GRU", "gru", "seed1", "train_tgt_words_per_s", speed, 1),
            ("t", 1, "GRU", "gru", "seed1", "train_tgt_words_per_s_ratio", 1.0 if speed else 0.5, 1),
            ("t", 2, "ATR", "atr", "seed1;seed2", "bleu", float("nan"), 0),
            ("t", 2, "ATR", "atr", "seed1;seed2", "params_m", 0.123, 2)]
    df = pd.DataFrame(rows, columns=record.COLUMNS).assign(paper=float("nan"), why_empty="")
    df.to_csv(d / "tables/t.csv", index=False)
    # and the claims checked beside the table, which hold no table numbers
    pd.DataFrame({"table": ["t"], "claim": ["ATR within 0.5 BLEU of GRU"], "verdict": ["holds"]}).to_csv(
        d / "tables/t.claims.csv", index=False)
    m = d / "metrics/c/gru/seed1/test.json"
    m.parent.mkdir(parents=True)
    m.write_text(json.dumps({"git_commit": "abc", "train": {"hardware": {"cpu": "CPU X", "cpu_isa": "avx2",
                                                                                  "torch": "2.13.0"}}}))
    return d


def test_a_run_giving_the_records_numbers_passes_whatever_its_speed(tmp_path: Path) -> None:
    rec = tmp_path / "record.csv"
    kept = record.write(finished_run(tmp_path / "a"), rec)
    assert list(zip(kept.metric, kept.ours, strict=True)) == [("bleu", 61.2346), ("params_m", 0.123)]
    assert json.loads(record.machine_path(rec).read_text())["cpu"] == "CPU X"
    same, message = record.report(finished_run(tmp_path / "b", speed=5.0), rec)
    assert same and "all 2 numbers equal the record" in message


def test_a_changed_or_missing_number_is_named_with_what_it_means(tmp_path: Path) -> None:
    rec = tmp_path / "record.csv"
    record.write(finished_run(tmp_path / "a"), rec)
    same, message = record.report(finished_run(tmp_path / "b", bleu=60.0), rec)
    assert not same
    assert "1 of 2 numbers differ" in message and "t / GRU / bleu: recorded 61.2346, now 60.0" in message
    assert "this CPU type (CPU X)" in message and "report this as a defect" in message
    other = finished_run(tmp_path / "c", bleu=60.0)
    (other / "metrics/c/gru/seed1/test.json").write_text(json.dumps({"train": {"hardware": {"cpu": "CPU Y"}}}))
    (other / "tables/t.csv").write_text((other / "tables/t.csv").read_text().replace("seed2,params_m", "seed2,chrf"))
    same, message = record.report(other, rec)
    assert not same and "t / ATR / params_m: recorded 0.123, now nan" in message
    assert "t / ATR / chrf: recorded nan, now 0.123" in message and "made on CPU X" in message
    # one CPU name, other vector instructions (a VM's "AMD EPYC" with and without AVX-512): not the same machine
    wider = finished_run(tmp_path / "d", bleu=60.0)
    hardware = {"cpu": "CPU X", "cpu_isa": "avx512", "torch": "2.13.0"}
    (wider / "metrics/c/gru/seed1/test.json").write_text(json.dumps({"train": {"hardware": hardware}}))
    same, message = record.report(wider, rec)
    assert not same and "made on CPU X (avx2)" in message and "this run on CPU X (avx512)" in message
    assert "report this as a defect" not in message


def test_record_check_exits_1_with_the_differences_and_names_a_run_without_tables(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = tmp_path / "record.csv"
    assert cli.main(["record", "write", str(finished_run(tmp_path / "a")), str(rec)]) == 0
    with pytest.raises(SystemExit) as e:
        cli.main(["record", "check", str(finished_run(tmp_path / "b", bleu=1.0)), str(rec)])
    assert e.value.code == 1 and "recorded 61.2346, now 1.0" in capsys.readouterr().out
    assert cli.main(["record", "check", str(tmp_path / "none"), str(rec)]) == 2
    assert "rnmt record: error:" in capsys.readouterr().err


ROOT = Path(__file__).resolve().parents[1]
DEMO_RECORD = ROOT / "benchmarks/demo/record.csv"


def test_the_readmes_demo_numbers_are_the_committed_records_and_its_findings_hold() -> None:
    """Every number the README's demo paragraph quotes is the committed record's (made by a fresh clone's
    `make demo`; tests/test_demo_findings.py retrains its rows and compares them with it), and every
    finding it states holds in that record."""
    rec = pd.read_csv(DEMO_RECORD)

    def value(table: str, metric: str, system: str | None = None, members: str | None = None) -> float:
        sel = (rec.table == table) & (rec.metric == metric)
        sel &= (rec.system == system) if system is not None else (rec.members == members)
        return float(rec[sel].ours.item())

    none = value("ud-labels", "bleu", "RNNSearch + GRU")
    gold = value("ud-labels", "bleu", "RNNSearch + GRU + gold labels")
    ca = rec[(rec.table == "atr-table2") & (rec.variant == "atr-rnnsearch-atr-ca") & (rec.metric == "bleu")]
    ensemble = float(ca[ca.members == "ens1-2"].ours.item())
    member = float(ca[ca.members == "seed1"].ours.item())      # the table scores seed 1 alone (the findings test both)
    full, no_ln, no_highway = (value("srnmt-table4", "tok_bleu_compound", s)
                               for s in ("LNMA-SRU 4L", "- LayerNorm", "- Highway"))
    r = value("atr-figure3", "gate_pearson_r", "RNNSearch + ATR + BPE")
    bleu = rec[rec.metric == "bleu"].ours
    readme = " ".join((ROOT / "README.md").read_text().split())
    claims = [f"every decoding reaches BLEU {math.floor(bleu.min())} (half the rows score {bleu.median():.1f} or more)",
              f"gold dependency labels beating none ({gold:.1f} against {none:.1f})",
              f"an ensemble of two beating one of its members alone ({ensemble:.1f} against {member:.1f})",
              f"tokenized BLEU without layer norm ({no_ln:.1f} against {full:.1f},",
              f"or highway ({no_highway:.1f})",
              f"correlating at r = −{abs(r):.2f}"]
    for claim in claims:
        assert claim in readme, f"the README's demo paragraph should say: {claim}"
    assert gold > none and ensemble > member and no_ln < full and no_highway < full and r <= -0.8
    assert json.loads(record.machine_path(DEMO_RECORD).read_text())["fast_path_mode"] == "default"
