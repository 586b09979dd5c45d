"""The tiny training model of the training and fault tests, a short run of it, and a check that two runs
ended alike."""

from __future__ import annotations

from pathlib import Path

import torch

from rnmt.models import checkpoint
from rnmt.train.trainer import Trainer, TrainSettings

MODEL = {"arch": "rnnsearch", "cell": "gru", "emb": 16, "hidden": 24, "dropout": 0.3}


def assert_same_weights(a: Path, b: Path) -> None:
    """Two checkpoints hold bit-identical weights."""
    wa, wb = checkpoint.load(a)["state_dict"], checkpoint.load(b)["state_dict"]
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k


def train_tiny(corpus: dict[str, Path], folder: Path, **settings: object) -> Path:
    """MODEL trained on the tests' corpus (conftest `corpus`) into `folder`, `settings` over a short run's;
    → its model.pt."""
    s = TrainSettings.from_dict({"batch_size": 8, "lr": 0.003, "max_steps": 40, "valid_every": 20,
                                 "valid_bleu": False, "threads": 1, **settings})
    c = corpus
    Trainer(MODEL, s, c["train_src"], c["train_tgt"], c["dev_src"], c["dev_tgt"], c["src_vocab"], c["tgt_vocab"],
            folder).run()
    return folder / "model.pt"
