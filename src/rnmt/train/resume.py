"""Whether a checkpoint continues this run: its model, vocabularies, settings and input files must be this
run's (a budget may grow), else the run starts afresh or stops, saying what differs."""

from __future__ import annotations

import os
import random
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from rnmt.data.vocab import Vocab
from rnmt.io import sha256_of
from rnmt.train.settings import BUDGET_FIELDS, TrainSettings


def _comparable(settings: dict[str, Any]) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in settings.items() if k not in BUDGET_FIELDS}


def differences(ckpt: dict[str, Any], model_config: dict[str, Any], src_vocab: Vocab, tgt_vocab: Vocab,
                label_vocab: Vocab | None, settings: dict[str, Any]) -> list[str]:
    """What in a saved state differs from a run (the model, a vocabulary, non-budget settings)."""
    out = []
    if ckpt.get("model_config") != model_config:
        old = ckpt.get("model_config") or {}
        keys = sorted(k for k in set(old) | set(model_config) if old.get(k) != model_config.get(k))
        out.append("model " + ", ".join(f"{k}: {old.get(k)!r} → {model_config.get(k)!r}" for k in keys))
    for side, key, vocab in (("source", "src_vocab", src_vocab), ("target", "tgt_vocab", tgt_vocab)):
        saved = ckpt.get(key)
        if saved != vocab.itos:
            out.append(f"{side} vocabulary ({len(saved or [])} → {len(vocab)} entries)")
    labels = label_vocab.itos if label_vocab else None
    if ckpt.get("src_label_vocab") != labels:
        out.append(f"source labels ({len(ckpt.get('src_label_vocab') or [])} → {len(labels or [])} entries)")
    old_s, new_s = _comparable(ckpt.get("settings", {})), _comparable(settings)
    defaults = _comparable(asdict(TrainSettings()))
    # a setting added since the state was saved counts as unchanged while it keeps its default
    keys = sorted(k for k in set(old_s) | set(new_s) if old_s.get(k) != new_s.get(k)
                  and not (k not in old_s and new_s.get(k) == defaults.get(k)))
    if keys:
        out.append("settings " + ", ".join(f"{k}: {old_s.get(k)!r} → {new_s.get(k)!r}" for k in keys))
    return out


def input_identity(files: dict[str, str | Path | None], folder: str | Path) -> tuple[dict[str, str], dict[str, str]]:
    """The sha256 of each file a model is trained from, by role (train_src, dev_tgt, src_vocab, ...; a role
    without a file is left out), and each file's path relative to the model's `folder`. The sha256 are saved
    in every checkpoint and in train.json (a rerun whose files differ is another run, never a continuation
    of this one), the paths in train.json: a row kept beyond its run is checked against the data of the run
    it is restored into (rnmt.report.kept)."""
    given = {role: Path(path) for role, path in files.items() if path is not None}
    return ({role: sha256_of(path) for role, path in given.items()},
            {role: os.path.relpath(path.absolute(), Path(folder).absolute()) for role, path in given.items()})


def input_differences(saved: dict[str, str] | None, current: dict[str, str]) -> list[str]:
    """Which of a run's input files differ from those a checkpoint was trained from."""
    if saved is None:
        return ["it records no identity of the files it was trained from (an older rnmt wrote it)"]
    changed = sorted(r for r in set(saved) | set(current) if saved.get(r) != current.get(r))
    return [f"{', '.join(changed)} changed since it was trained"] if changed else []


def lowered_budget(progress: dict[str, Any], settings: TrainSettings) -> list[str]:
    """A budget now below what a checkpoint already trained: the shorter run is another run (its model
    would be the longer run's), not a finished one."""
    out = []
    if settings.max_steps and progress.get("step", 0) > settings.max_steps:
        out.append(f"max_steps {settings.max_steps} is below the {progress['step']} steps it trained")
    if progress.get("epoch", 0) > settings.max_epochs:
        out.append(f"max_epochs {settings.max_epochs} is below the {progress['epoch']} epochs it trained")
    return out


def reasons(ckpt: dict[str, Any], model_config: dict[str, Any], src_vocab: Vocab, tgt_vocab: Vocab,
            label_vocab: Vocab | None, settings: TrainSettings, inputs: dict[str, str]) -> list[str]:
    """Why checkpoint `ckpt` does not continue this run: another model, vocabularies, settings or input
    files, or a budget lowered below where it stands; empty where it does."""
    return (differences(ckpt, model_config, src_vocab, tgt_vocab, label_vocab, asdict(settings))
            + input_differences(ckpt.get("inputs"), inputs) + lowered_budget(ckpt.get("progress") or {}, settings))


def rng_state(batches: random.Random, device: torch.device) -> dict[str, Any]:
    """The random streams a resumed run continues: Python's, the batch order's, torch's (and the GPU's)."""
    rng = {"python": random.getstate(), "batches": batches.getstate(), "torch": torch.get_rng_state()}
    if device.type == "cuda":
        rng["cuda"] = torch.cuda.get_rng_state(device)
    return rng


def restore_rng(rng: dict[str, Any], batches: random.Random, device: torch.device) -> None:
    """`rng_state`'s streams back in place."""
    random.setstate(rng["python"])
    batches.setstate(rng["batches"])
    torch.set_rng_state(rng["torch"].cpu())
    if "cuda" in rng and device.type == "cuda":
        torch.cuda.set_rng_state(rng["cuda"].cpu(), device)
