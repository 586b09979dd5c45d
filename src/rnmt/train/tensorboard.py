"""Training curves in TensorBoard (train setting `tensorboard: true`): every record the trainer writes to
train.jsonl also becomes scalars of an event file in the model folder's tensorboard/ (`train/loss`,
`train/lr`, `valid/dev_ppl`, `valid/dev_bleu`, ... at the record's step), so
`tensorboard --logdir results/<run>/models` shows every model of a run live. A resumed run hides the
events its interrupted part wrote after the resumed step (as train.jsonl drops those records); a run that
starts afresh removes the folder's old events. Needs the tensorboard package (`pip install -e '.[tensorboard]'`)."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

from rnmt.io import InputError


class TensorBoard:
    def __init__(self, folder: str | Path, resumed_step: int = 0) -> None:
        """Events of a run that resumes after `resumed_step` (0: a run from scratch) in `folder`."""
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise InputError("train setting tensorboard: true needs the tensorboard package: pip install "
                             "tensorboard (or pip install -e '.[tensorboard]'), or set tensorboard: false") from None
        if not resumed_step:
            shutil.rmtree(folder, ignore_errors=True)
        self.writer = SummaryWriter(str(folder), purge_step=resumed_step + 1 if resumed_step else None)

    def record(self, rec: dict[str, Any]) -> None:
        """A train.jsonl record's numbers as scalars `<kind>/<name>` at its step."""
        for name, value in rec.items():
            if name in ("kind", "step") or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if math.isfinite(value):
                self.writer.add_scalar(f"{rec['kind']}/{name}", value, rec["step"])

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()
