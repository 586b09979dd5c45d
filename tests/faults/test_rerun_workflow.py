"""Through Snakemake, as a user meets it: a table built on a misaligned corpus whose test set also sits
in its training data. The warning reaches the console and the table's notes; once the target file is
fixed, the rerun trains a new model, bit-identical to a fresh training on the fixed data, and the table
shows its BLEU, not the misaligned model's."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from conftest import ROOT, run_snakemake
from rnmt.data.synthetic import write_corpus
from rnmt.io import sha256_of
from rnmt.train.trainer import Trainer, TrainSettings

OVERLAP = 10                    # test sentences copied into the training data


def corpus_files(folder: Path) -> Path:
    write_corpus(folder, {"train": 300, "dev": 20, "test": 40}, seed=3, max_words=8)
    for side in ("src", "tgt"):                     # part of the test set inside the training data
        test = (folder / f"test.{side}").read_text().splitlines()[:OVERLAP]
        with open(folder / f"train.{side}", "a") as f:
            f.write("\n".join(test) + "\n")
    return folder


def setup(workdir: Path, data: Path) -> None:
    exp = yaml.safe_load((ROOT / "workflow/experiments/demo-rnnsearch.yaml").read_text())
    exp.update(table="mine", corpus="mine", metrics=["bleu"], rows=exp["rows"][:1])
    (workdir / "experiments").mkdir()
    (workdir / "experiments/mine.yaml").write_text(yaml.safe_dump(exp, sort_keys=False))
    files = {s: [f"{s}.src", f"{s}.tgt"] for s in ("train", "dev", "test")}
    config = {"run": "r", "tables": ["mine"], "experiments_dir": str(workdir / "experiments"),
              "corpora": {"mine": {"source": f"local:{data}", "src_lang": "en", "tgt_lang": "en", "files": files}},
              "bpe": {"merges": 100},
              "scales": {"demo": {"corpus": {"mine": "mine"}}},       # the table's own corpus, not the demo's
              "override": {"model": {"emb": 16, "hidden": 16},
                           "train": {"max_steps": 40, "valid_every": 40, "max_minutes": 0, "batch_size": 32},
                           "decode": {"beam": 2}}}
    (workdir / "c.yaml").write_text(yaml.safe_dump(config))


def build(workdir: Path) -> tuple[float, str, str]:
    r = run_snakemake(["results/r/tables/mine.csv", "--cores", "2", "--configfile", "c.yaml"], workdir,
                      timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    table = workdir / "results/r/tables/mine.csv"
    return float(pd.read_csv(table).ours.iloc[0]), table.with_suffix(".md").read_text(), r.stdout


def weights(workdir: Path) -> dict[str, torch.Tensor]:
    return torch.load(workdir / "results/r/models/mine/rnnsearch-gru/seed1/model.pt", weights_only=True)["state_dict"]


@pytest.mark.workflow
def test_a_table_on_misaligned_data_then_fixed_shows_the_fixed_models_bleu(tmp_path: Path, record) -> None:
    record.fault("a table built on a misaligned training target, the file then fixed and the table rebuilt")
    record.bad_input("a test set part of which is inside the training data, through the workflow")
    data = corpus_files(tmp_path / "data")
    good = (data / "train.tgt").read_text()
    lines = good.splitlines()
    (data / "train.tgt").write_text("\n".join(lines[1:] + lines[:1]) + "\n")      # every pair misaligned
    run = tmp_path / "run"
    run.mkdir()
    setup(run, data)
    bad_bleu, md, console = build(run)
    bad_inputs = json.loads((run / "results/r/models/mine/rnnsearch-gru/seed1/train.json").read_text())["inputs"]

    warning = f"mine: {OVERLAP} of the 40 test sentences (25.0%)"
    assert f"rnmt corpus merge: warning: {warning}" in console        # on the console, not only in a log
    assert f"Warning: {warning}" in md                               # and under the table

    (data / "train.tgt").write_text(good)                            # the file fixed in place
    new_bleu, md, _ = build(run)
    superseded = list((run / "results/r/models/mine/rnnsearch-gru/seed1/superseded").iterdir())
    assert len(superseded) == 1 and "train_tgt changed" in (superseded[0] / "why.txt").read_text()

    assert new_bleu != bad_bleu
    # the rebuilt model is the one a fresh training on the fixed data gives: trained again here from the
    # files its train.json names by sha256 (the run's prepared data, vocabularies), with its settings
    model_dir = run / "results/r/models/mine/rnnsearch-gru/seed1"
    meta = json.loads((model_dir / "train.json").read_text())
    data_dir = run / "results/r/data/mine"
    files = {"train_src": data_dir / "bpe/train.src", "train_tgt": data_dir / "bpe/train.tgt",
             "dev_src": data_dir / "bpe/dev.src", "dev_tgt": data_dir / "bpe/dev.tgt",
             "src_vocab": data_dir / "vocab.src", "tgt_vocab": data_dir / "vocab.tgt"}
    assert {role: sha256_of(path) for role, path in files.items()} == meta["inputs"]
    assert meta["inputs"]["train_tgt"] != bad_inputs["train_tgt"]          # trained on the fixed target
    Trainer(meta["model_config"], TrainSettings.from_dict(meta["train_settings"]), *files.values(),
            tmp_path / "fresh").run()
    got = weights(run)
    want = torch.load(tmp_path / "fresh/model.pt", weights_only=True)["state_dict"]
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
