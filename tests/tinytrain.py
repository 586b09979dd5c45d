"""The tiny training model of the training and fault tests, and a check that two runs ended alike."""

from __future__ import annotations

from pathlib import Path

import torch

from rnmt.models import checkpoint

MODEL = {"arch": "rnnsearch", "cell": "gru", "emb": 16, "hidden": 24, "dropout": 0.3}


def assert_same_weights(a: Path, b: Path) -> None:
    """Two checkpoints hold bit-identical weights."""
    wa, wb = checkpoint.load(a)["state_dict"], checkpoint.load(b)["state_dict"]
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
