"""Checkpoints: model weights plus everything needed to rebuild the model and check its vocabularies.

Saved atomically (a killed job leaves the previous checkpoint intact) and loaded with
`torch.load(weights_only=True)`, so a checkpoint file cannot run code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rnmt.data.vocab import Vocab
from rnmt.io import InputError, atomic_writer
from rnmt.models import Seq2Seq, build_model


def save(path: str | Path, model: Seq2Seq, model_config: dict[str, Any], src_vocab: Vocab,
         tgt_vocab: Vocab, extra: dict[str, Any] | None = None, src_label_vocab: Vocab | None = None) -> None:
    """`src_label_vocab`: a factored model's label vocabulary; its presence marks that the model needs labels."""
    payload = {"model_config": model_config, "state_dict": model.state_dict(),
               "src_vocab": src_vocab.itos, "tgt_vocab": tgt_vocab.itos,
               "src_label_vocab": src_label_vocab.itos if src_label_vocab is not None else None, **(extra or {})}
    with atomic_writer(path, "wb") as f:
        torch.save(payload, f)


def load(path: str | Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: checkpoint not found")
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except Exception as e:  # truncated or foreign files raise many different errors
        raise InputError(f"{path}: not a readable rnmt checkpoint ({type(e).__name__}: {e}); "
                         "delete it and retrain") from None


def load_model_with_labels(path: str | Path, device: torch.device | str = "cpu"
                           ) -> tuple[Seq2Seq, Vocab, Vocab, Vocab | None]:
    """The model, its vocabularies and its source-label vocabulary (None: the model takes words only)."""
    ckpt = load(path, device)
    cfg = dict(ckpt["model_config"])
    src_vocab, tgt_vocab = Vocab(ckpt["src_vocab"]), Vocab(ckpt["tgt_vocab"])
    labels = ckpt.get("src_label_vocab")
    model = build_model(cfg.pop("arch"), len(src_vocab), len(tgt_vocab), **cfg)
    model.load_state_dict(ckpt["state_dict"])
    return model.to(device).eval(), src_vocab, tgt_vocab, Vocab(labels) if labels else None


def load_model(path: str | Path, device: torch.device | str = "cpu") -> tuple[Seq2Seq, Vocab, Vocab]:
    model, src_vocab, tgt_vocab, _ = load_model_with_labels(path, device)
    return model, src_vocab, tgt_vocab
