"""A table row that decodes the average of its model's last k validation checkpoints (decode setting
average_last): planned into the translate job's settings, refused without the checkpoints it needs, and
decoded as `rnmt average-checkpoints` averages them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rnmt.config import ConfigError, load_yaml
from rnmt.planning.plan import Plan
from rnmt.train.trainer import Trainer, TrainSettings
from tinytrain import MODEL

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}


OWN = {"variant": "rnnsearch-gru-avg", "arch": "rnnsearch", "cell": "gru"}     # a system of the row's own


def plan_with_row(tmp_path: Path, **row: object) -> Plan:
    exp = yaml.safe_load((ROOT / "workflow/experiments/demo-rnnsearch.yaml").read_text())
    exp.update(table="mine", rows=[{**exp["rows"][0], **row}])
    (tmp_path / "experiments").mkdir(exist_ok=True)
    (tmp_path / "experiments/mine.yaml").write_text(yaml.safe_dump(exp, sort_keys=False))
    config = {**load_yaml(ROOT / "config.yaml"), "tables": ["mine"], "experiments_dir": str(tmp_path / "experiments")}
    return Plan(config, ROOT)


def test_a_row_asking_for_an_average_gets_it_in_its_translate_settings(tmp_path: Path) -> None:
    plan = plan_with_row(tmp_path, **OWN, decode={"average_last": 3}, train={"keep_checkpoints": 4})
    (variant,) = plan.variants.values()
    assert json.loads(variant.decode_settings())["average_last"] == 3
    # rows without it keep the settings they had before the setting existed (no redecoding of old runs)
    plain = plan_with_row(tmp_path)
    assert "average_last" not in json.loads(next(iter(plain.variants.values())).decode_settings())
    with pytest.raises(ConfigError, match=r"row 'RNNSearch \+ GRU'.*average_last: 3.*keep_checkpoints: 3 or more"):
        plan_with_row(tmp_path, **OWN, decode={"average_last": 3}, train={"keep_checkpoints": 2})


def test_translate_decodes_the_average_of_the_last_checkpoints(corpus: dict[str, Path], tmp_path: Path) -> None:
    c = corpus
    s = TrainSettings.from_dict({"batch_size": 8, "lr": 0.01, "max_steps": 60, "valid_every": 10,
                                 "valid_bleu": False, "threads": 1, "keep_checkpoints": 3})
    Trainer(MODEL, s, c["train_src"], c["train_tgt"], c["dev_src"], c["dev_tgt"], c["src_vocab"], c["tgt_vocab"],
            tmp_path / "m").run()
    rnmt = [sys.executable, "-m", "rnmt", "-q"]
    model, src = str(tmp_path / "m/model.pt"), str(c["dev_src"])

    def run(*args: str) -> None:
        got = subprocess.run([*rnmt, *args], capture_output=True, text=True, env=ENV, timeout=300)
        assert got.returncode == 0, got.stderr

    run("average-checkpoints", str(tmp_path / "m"), "--last", "2", "--output", str(tmp_path / "avg.pt"))
    run("translate", "--model", str(tmp_path / "avg.pt"), "--beam", "2", src, str(tmp_path / "by_hand.txt"))
    run("translate", "--model", model, "--settings", '{"beam": 2, "average_last": 2}', "--metrics",
        str(tmp_path / "m.json"), src, str(tmp_path / "row.txt"))
    run("translate", "--model", model, "--beam", "2", src, str(tmp_path / "best.txt"))
    assert (tmp_path / "row.txt").read_text() == (tmp_path / "by_hand.txt").read_text()
    assert (tmp_path / "row.txt").read_text() != (tmp_path / "best.txt").read_text()
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["average_last"] == 2 and metrics["averaged_steps"] == [[50, 60]]

    got = subprocess.run([*rnmt, "translate", "--model", model, "--average-last", "4", src, str(tmp_path / "x")],
                         capture_output=True, text=True, env=ENV, timeout=300)
    assert got.returncode == 2 and "needs 4, but its folder keeps 3" in got.stderr and "Traceback" not in got.stderr
