"""benchmarks/gpu/record.py turns what a GPU lease brought back into the committed CSVs' rows: a finished
model's numbers from its own train.json and metrics, an unfinished one's last step and why it stopped from
its log, and a lease appended twice is refused (a doubled row would count twice in every comparison)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks/gpu/record.py"


def _record():                                      # the script, loaded as a module (benchmarks/ is no package)
    spec = importlib.util.spec_from_file_location("gpu_record", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _env(tmp_path: Path, card: str) -> Path:
    """A lease's env.txt as common.sh's gpu_start writes it, for a card of that name."""
    env = tmp_path / f"env-{card.split()[1]}.txt"
    _write(env, f"name, memory.total [MiB], driver_version, clocks.max.sm [MHz]\n{card}, 81559 MiB, 580.159.04, "
                "1980 MHz\ntorch 2.11.0+cu130 cuda 13.0 triton 3.6.0 python 3.12.3\n16\nmodel name\t: Intel Xeon\n")
    return env


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "mini-gpu"
    logs = run / "logs/train/multi30k-en-de"
    _write(logs / "atr-rnnsearch-atr.seed1.log", "step 50/6000 (1% of the budget) | 20,000 target tokens/s\n")
    _write(run / "models/multi30k-en-de/atr-rnnsearch-atr/seed1/train.json", json.dumps({
        "steps": 6000, "train_seconds": 177.94, "train_tgt_tokens_per_s": 32909.4, "best_dev_bleu_greedy": 38.213,
        "best_step": 5000, "train_settings": {"amp": True}, "stop_reason": "max_steps",
        "hardware": {"gpu": "NVIDIA H200", "torch": "2.11.0+cu130"}}))
    _write(run / "metrics/multi30k-en-de/atr-rnnsearch-atr/seed1/test.json", json.dumps({
        "scores": {"bleu": 32.6412, "sentences": 2461}, "decode": {"beam": 10, "decode_seconds": 13.318}}))
    _write(logs / "atr-transformer.seed1.log", "step 6000/6000 (100% of the budget)\n")
    _write(run / "models/multi30k-en-de/atr-transformer/seed1/train.json", json.dumps({
        "steps": 6000, "train_seconds": 142.6, "train_tgt_tokens_per_s": 41037.0, "best_dev_bleu_greedy": 36.23,
        "best_step": 5000, "train_settings": {"amp": True}, "stop_reason": "max_steps", "hardware": {}}))
    _write(logs / "atr-rnnsearch-lstm.seed1.log",
           "INFO: step 450/6000 (8% of the budget)\nINFO: step 500/6000 (8% of the budget)\n"
           "INFO: validation at step 500: dev ppl 32.288\nTraceback (most recent call last):\n"
           "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n")
    _write(logs / "atr-deep-rnnsearch-gru.seed1.log",
           "INFO: step 5600/6000 (93% of the budget)\n"
           "rnmt WARNING: interrupted: signal 15 at step 5608; last.pt saved: rerun the same command to resume\n")
    return run


def test_rows_come_from_each_models_own_files_and_a_lease_is_appended_once(run_dir: Path, tmp_path: Path) -> None:
    rows = {r["variant"]: r for r in _record().model_rows(run_dir)}
    assert rows["atr-rnnsearch-atr"] == {
        "variant": "atr-rnnsearch-atr", "steps": 6000, "finished": True, "train_seconds": 177.9,
        "tgt_tokens_per_s": 32909, "best_greedy_dev_bleu": 38.21, "kept_step": 5000, "test_bleu_beam": 32.64,
        "beam": 10, "test_decode_seconds": 13.32, "test_sentences": 2461, "bf16_autocast": True,
        "gpu": "NVIDIA H200", "torch": "2.11.0+cu130", "stopped_by": "max_steps", "jobs_on_the_gpu": 4}
    assert rows["atr-rnnsearch-lstm"]["steps"] == 500 and not rows["atr-rnnsearch-lstm"]["finished"]
    assert rows["atr-rnnsearch-lstm"]["stopped_by"] == \
        "AcceleratorError: CUDA error: an illegal memory access was encountered"
    assert rows["atr-transformer"]["stopped_by"] == "max_steps; not scored on the test set"
    assert "test_bleu_beam" not in rows["atr-transformer"] and rows["atr-transformer"]["finished"]
    assert rows["atr-deep-rnnsearch-gru"]["steps"] == 5608
    assert rows["atr-deep-rnnsearch-gru"]["stopped_by"] == "interrupted: signal 15 at step 5608"

    csv = tmp_path / "rows.csv"
    pd.DataFrame([{"session": "2026-11-27", "run": "a", "variant": "x", "steps": 400}]).to_csv(csv, index=False)
    cmd = [sys.executable, str(SCRIPT), "rows", str(run_dir), "--session", "2026-11-28b", "--run", "b",
           "--csv", str(csv), "--env", str(_env(tmp_path, "NVIDIA H200"))]
    first = subprocess.run(cmd, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    again = subprocess.run(cmd, capture_output=True, text=True)
    assert again.returncode != 0 and "already holds session 2026-11-28b run b" in again.stderr
    table = pd.read_csv(csv, dtype=str, keep_default_na=False)
    assert len(table) == 5 and list(table.columns[:4]) == ["session", "run", "variant", "steps"]
    assert table.set_index("variant").loc["atr-rnnsearch-atr", "tgt_tokens_per_s"] == "32909"   # no "32909.0"
    # every new row names its card: its train.json's name where it has one, the lease's env.txt's otherwise
    assert table["gpu"].tolist() == ["", "NVIDIA H200", "NVIDIA H200", "NVIDIA H200", "NVIDIA H200"]


def test_a_bench_csv_is_appended_as_it_is_to_a_results_csv_without_runs(tmp_path: Path) -> None:
    """`record.py bench`: a lease's `rnmt bench decode` rows go into the committed CSV under their session and
    run, the earlier rows keep theirs (run ""), and the same lease twice is refused."""
    committed = tmp_path / "results-h200-paper-decode-graphs.csv"
    pd.DataFrame([{"session": "2026-11-28", "model": "RNNSearch+ATR", "beam": 10,
                   "graph_sentences_per_s": "225.39"}]).to_csv(committed, index=False)
    lease = tmp_path / "decode.csv"
    pd.DataFrame([{"model": "RNNSearch+ATR", "beam": 10, "mode": "batched", "graph_sentences_per_s": "612.5"},
                  {"model": "RNNSearch+ATR", "beam": 1, "mode": "batched", "graph_sentences_per_s": "900.1"}]
                 ).to_csv(lease, index=False)
    cmd = [sys.executable, str(SCRIPT), "bench", str(lease), "--session", "2026-12-05", "--run", "2",
           "--env", str(_env(tmp_path, "NVIDIA H200")), "--csv", str(committed)]
    assert subprocess.run(cmd, capture_output=True, text=True).returncode == 0
    again = subprocess.run(cmd, capture_output=True, text=True)
    assert again.returncode != 0 and "already holds session 2026-12-05 run 2" in again.stderr
    table = pd.read_csv(committed, dtype=str, keep_default_na=False)
    assert table["session"].tolist() == ["2026-11-28", "2026-12-05", "2026-12-05"]
    assert table["run"].tolist() == ["", "2", "2"] and table["mode"].tolist() == ["", "batched", "batched"]
    assert table["graph_sentences_per_s"].tolist() == ["225.39", "612.5", "900.1"]
    no_csv = subprocess.run(cmd[:-2], capture_output=True, text=True)
    assert no_csv.returncode != 0 and "give --csv" in no_csv.stderr


def test_a_lease_is_recorded_only_in_its_own_cards_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The card comes from the lease's env.txt: an H100's decode rows are refused by the H200's results CSV
    (its numbers would read as the H200's), the tests go to the H100's own CSV by default, and a committed CSV
    written before sessions were recorded (no `session` column) takes the lease's rows, its own under ""."""
    h100 = _env(tmp_path, "NVIDIA H100 80GB HBM3")
    lease = tmp_path / "decode.csv"
    pd.DataFrame([{"model": "RNNSearch+ATR", "beam": 10, "graph_sentences_per_s": "612.5"}]).to_csv(lease, index=False)
    h200_csv = tmp_path / "results-h200-paper-decode-graphs.csv"
    pd.DataFrame([{"session": "2026-11-28", "model": "RNNSearch+ATR", "beam": 10}]).to_csv(h200_csv, index=False)
    before = h200_csv.read_text()
    wrong = subprocess.run([sys.executable, str(SCRIPT), "bench", str(lease), "--session", "2026-12-05", "--run",
                            "2", "--env", str(h100), "--csv", str(h200_csv)], capture_output=True, text=True)
    assert wrong.returncode != 0 and "named for h200, but the lease ran on h100" in wrong.stderr
    assert "results-h100-paper-decode-graphs.csv" in wrong.stderr and h200_csv.read_text() == before

    h100_csv = tmp_path / "results-h100-decoder.csv"                     # committed without a session column
    pd.DataFrame([{"model": "RNNSearch+ATR", "hidden": 256}]).to_csv(h100_csv, index=False)
    done = subprocess.run([sys.executable, str(SCRIPT), "bench", str(lease), "--session", "2026-12-05", "--run",
                           "2", "--env", str(h100), "--csv", str(h100_csv)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    table = pd.read_csv(h100_csv, dtype=str, keep_default_na=False)
    assert table["session"].tolist() == ["", "2026-12-05"] and table["hidden"].tolist() == ["256", ""]
    assert table["gpu"].tolist() == ["", "NVIDIA H100 80GB HBM3"]

    # rows that say they ran on another card than the env.txt given (another call's) are refused
    other = tmp_path / "decode-h200.csv"
    pd.DataFrame([{"model": "RNNSearch+ATR", "device": "NVIDIA H200"}]).to_csv(other, index=False)
    mixed = subprocess.run([sys.executable, str(SCRIPT), "bench", str(other), "--session", "2026-12-05", "--run",
                            "3", "--env", str(h100), "--csv", str(h100_csv)], capture_output=True, text=True)
    assert mixed.returncode != 0 and "its rows ran on NVIDIA H200" in mixed.stderr

    record = _record()
    jsonl = tmp_path / "cuda-tests.jsonl"
    jsonl.write_text(json.dumps({"test": "float32", "cell": "atr", "max_relative_error": 1e-7}) + "\n")
    here = tmp_path / "gpu"
    here.mkdir()
    monkeypatch.setattr(record, "HERE", here)             # the tests' default CSV, here rather than committed
    monkeypatch.setattr(sys, "argv", ["record.py", "tests", str(jsonl), "--env", str(h100), "--session",
                                      "2026-12-05", "--run", "1"])
    record.main()
    tests = pd.read_csv(here / "cuda-tests-h100.csv", dtype=str, keep_default_na=False)
    assert tests[["session", "run", "cell", "gpu"]].values.tolist() == [["2026-12-05", "1", "atr",
                                                                           "NVIDIA H100 80GB HBM3"]]
    not_env = tmp_path / "env.txt"
    not_env.write_text("torch 2.11\n")
    bad = subprocess.run([sys.executable, str(SCRIPT), "tests", str(jsonl), "--env", str(not_env), "--session",
                          "x", "--run", "1", "--csv", str(tmp_path / "t.csv")], capture_output=True, text=True)
    assert bad.returncode != 0 and "not a lease's env.txt" in bad.stderr
