"""Model files (checkpoints): model weights plus everything needed to rebuild the model and check its
vocabularies, as training writes them and decoding, ensembles, bundles and analyses read them.

Saved atomically (a killed job leaves the previous checkpoint intact) and loaded with
`torch.load(weights_only=True)`, so a checkpoint file cannot run code. Training keeps a copy of each
finished model file beside it (`keep_path`), from which a damaged one is restored.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from rnmt.data.vocab import Vocab
from rnmt.io import DiskFullError, InputError, atomic_writer
from rnmt.models.base import Seq2Seq
from rnmt.models.registry import build_model


def keep_path(path: Path) -> Path:
    """Where training keeps the copy of model file `path` (rnmt.train.outputs)."""
    return path.with_name(f".{path.name}.keep")


def save(path: str | Path, model: Seq2Seq, model_config: dict[str, Any], src_vocab: Vocab,
         tgt_vocab: Vocab, extra: dict[str, Any] | None = None, src_label_vocab: Vocab | None = None) -> None:
    """Write the checkpoint to a temporary file, fsync it and rename it over `path`.

    `src_label_vocab`: a factored model's label vocabulary; its presence marks that the model needs labels.

    When the disk fills (or anything else fails) the temporary file is removed and the previous
    checkpoint under `path` stays as it was, so rerunning resumes from it.
    """
    payload = {"model_config": model_config, "state_dict": model.state_dict(),
               "src_vocab": src_vocab.itos, "tgt_vocab": tgt_vocab.itos,
               "src_label_vocab": src_label_vocab.itos if src_label_vocab is not None else None, **(extra or {})}
    write(path, payload)


def write(path: str | Path, payload: dict[str, Any]) -> None:
    """`save`'s atomic write of a checkpoint's contents."""
    try:
        with atomic_writer(path, "wb") as f:
            out = _KeepWriteError(f)
            try:
                torch.save(payload, out)
            except RuntimeError:        # torch.save reports a failed write as "unexpected pos": raise the cause
                if out.error is not None:
                    raise out.error from None
                raise
    except DiskFullError as e:
        raise DiskFullError(f"{e}; the previous checkpoint is still valid and rerunning the same command "
                            "resumes from it") from e.__cause__


class _KeepWriteError:
    """A file that remembers the OSError of a failed write (e.g. ENOSPC), which torch.save hides."""

    def __init__(self, f: Any) -> None:
        self.f, self.error = f, None

    def write(self, b: bytes) -> int:
        try:
            return self.f.write(b)
        except OSError as e:
            self.error = e
            raise

    def flush(self) -> None:
        self.f.flush()


def check_copy(path: Path) -> None:
    """A model.pt copy (train.outputs) that loads as a checkpoint with weights."""
    if "state_dict" not in load(path):
        raise InputError(f"{path}: no weights in it")


def load(path: str | Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """A checkpoint's contents, checked to be a mapping whose weights hold the data they claim (a checkpoint
    or a bundle is untrusted input: a tensor made to look huge from a small file would make averaging or
    loading allocate without bound)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: checkpoint not found")
    try:
        ckpt = torch.load(path, map_location=device, weights_only=True)
    except Exception as e:  # truncated or foreign files raise many different errors
        copy = keep_path(path)
        fix = (f"delete it and rerun its training job, which restores it from its copy {copy.name} if that is "
               "sound, or names the files to delete to retrain" if copy.is_file() else "delete it and retrain")
        raise InputError(f"{path}: not a readable rnmt checkpoint ({type(e).__name__}: {e}); {fix}") from None
    if not isinstance(ckpt, dict):
        raise InputError(f"{path}: not an rnmt checkpoint (it holds a {type(ckpt).__name__}, not the mapping "
                         "`rnmt train` writes); give a model.pt written by `rnmt train`")
    state = ckpt.get("state_dict", {})
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise InputError(f"{path}: its state_dict is not a mapping of weight tensors; give a model.pt written by "
                         "`rnmt train`")
    for name, t in state.items():
        if t.numel() * t.element_size() > t.untyped_storage().nbytes():
            raise InputError(f"{path}: weight {name} claims {tuple(t.shape)} values but the file holds "
                             f"{t.untyped_storage().nbytes()} bytes for it (a tensor repeated by its strides); "
                             "not a checkpoint rnmt wrote")
    return ckpt


STEP_FILE = re.compile(r"^step(\d+)\.pt$")


def validation_checkpoints(folder: str | Path) -> list[Path]:
    """The validation checkpoints a run kept (`keep_checkpoints`), oldest first: <folder>/checkpoints/step<N>.pt."""
    d = Path(folder) / "checkpoints"
    found = [(int(m.group(1)), p) for p in d.glob("step*.pt") if (m := STEP_FILE.match(p.name))] if d.is_dir() else []
    return [p for _, p in sorted(found)]


def average(paths: Sequence[str | Path], out: str | Path) -> dict[str, Any]:
    """Average the weights of checkpoints of one model (same architecture and vocabularies; e.g. the last
    validations of a run) into a checkpoint `rnmt translate` reads like any model.pt. Floating-point
    weights are averaged in float64 and stored in their own type; integer buffers come from the last."""
    if not paths:
        raise InputError("no checkpoints to average: give checkpoint files, or a model folder whose training "
                         "kept some (train setting keep_checkpoints: k)")
    first = ckpt = load(paths[0])
    total = {k: v.double() if v.is_floating_point() else v for k, v in first["state_dict"].items()}
    steps = [first.get("step")]
    for path in paths[1:]:
        ckpt = load(path)
        for key in ("model_config", "src_vocab", "tgt_vocab", "src_label_vocab"):
            if ckpt.get(key) != first.get(key):
                raise InputError(f"{path}: its {key} differs from {paths[0]}'s: only checkpoints of one model "
                                 "(one architecture, one pair of vocabularies) can be averaged")
        for k, v in ckpt["state_dict"].items():
            total[k] = total[k] + v.double() if v.is_floating_point() else v
        steps.append(ckpt.get("step"))
    state = {k: (v / len(paths)).to(first["state_dict"][k].dtype) if v.is_floating_point() else v
             for k, v in total.items()}
    payload = {**ckpt, "state_dict": state, "averaged": [str(p) for p in paths], "averaged_steps": steps}
    write(out, payload)
    return payload


def load_model_with_labels(path: str | Path, device: torch.device | str = "cpu"
                           ) -> tuple[Seq2Seq, Vocab, Vocab, Vocab | None]:
    """The model, its vocabularies and its source-label vocabulary (None: the model takes words only)."""
    ckpt = load(path, device)
    missing = [k for k in ("model_config", "state_dict", "src_vocab", "tgt_vocab") if k not in ckpt]
    if missing:
        raise InputError(f"{path}: not an rnmt checkpoint (no {', '.join(missing)}); give a model.pt written by "
                         "`rnmt train`")
    config = ckpt["model_config"]
    if not isinstance(config, dict) or not isinstance(config.get("arch"), str):
        raise InputError(f"{path}: model_config is not a mapping with the architecture's name ('arch'); give a "
                         "model.pt written by `rnmt train`")
    for key in ("src_vocab", "tgt_vocab", "src_label_vocab"):
        v = ckpt.get(key)
        if not (v is None and key == "src_label_vocab") and not (isinstance(v, list)
                                                                 and all(isinstance(x, str) for x in v)):
            raise InputError(f"{path}: {key} is not a list of tokens; give a model.pt written by `rnmt train`")
    src_vocab, tgt_vocab = Vocab(ckpt["src_vocab"]), Vocab(ckpt["tgt_vocab"])
    labels = ckpt.get("src_label_vocab")
    model = build_checked(path, config, len(src_vocab), len(tgt_vocab), ckpt["state_dict"])
    model.load_state_dict(ckpt["state_dict"])
    return model.to(device).eval(), src_vocab, tgt_vocab, Vocab(labels) if labels else None


def load_model(path: str | Path, device: torch.device | str = "cpu") -> tuple[Seq2Seq, Vocab, Vocab]:
    model, src_vocab, tgt_vocab, _ = load_model_with_labels(path, device)
    return model, src_vocab, tgt_vocab


def build_checked(path: str | Path, config: dict[str, Any], src_vocab: int, tgt_vocab: int,
                  state: dict[str, torch.Tensor]) -> Seq2Seq:
    """The architecture `config` names, built only once its weights' names and shapes are known to be those
    in `state`: it is first built without memory (on torch's meta device), so a checkpoint whose settings ask
    for a larger model than its weights stops here instead of allocating it."""
    cfg = dict(config)
    arch = cfg.pop("arch")
    try:
        with torch.device("meta"):
            shape_only = build_model(arch, src_vocab, tgt_vocab, **cfg)
    except (TypeError, ValueError, KeyError) as e:
        raise InputError(f"{path}: its model_config {config} does not build ({type(e).__name__}: {e}); give a "
                         "model.pt written by `rnmt train`") from None
    check_fits(path, shape_only, state, config)
    return build_model(arch, src_vocab, tgt_vocab, **cfg)


def check_fits(path: str | Path, model: torch.nn.Module, state: dict[str, torch.Tensor],
               model_config: dict[str, Any]) -> None:
    """The weights in `state` have the names and shapes of `model`'s, else an error naming the first
    differences (a checkpoint of another architecture, other sizes or another vocabulary)."""
    own = model.state_dict()
    problems = [f"{k} missing" for k in own if k not in state]
    problems += [f"{k} unexpected" for k in state if k not in own]
    problems += [f"{k} has shape {tuple(state[k].shape)}, the model {tuple(v.shape)}" for k, v in own.items()
                 if k in state and state[k].shape != v.shape]
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise InputError(f"{path}: the weights do not fit the architecture {model_config} with its vocabularies: "
                         f"{'; '.join(problems[:3])}{more}. The checkpoint comes from another architecture, other "
                         "sizes or another vocabulary: retrain, or give the settings it was trained with")
