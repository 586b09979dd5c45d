"""A run's training records: train.jsonl (one JSON object per line: train, valid and retrain records) and,
with the train setting `tensorboard: true`, the same records as TensorBoard events. A resumed run keeps the
records up to the step it resumes from and appends to them; the log's content is read back from the open
file, so a copy can be kept even when Snakemake has deleted the file under the trainer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rnmt.io import read_lines, write_lines
from rnmt.train.tensorboard import TensorBoard


class TrainLog:
    def __init__(self, out_dir: Path, resumed_step: int, tensorboard: bool) -> None:
        self.path = out_dir / "train.jsonl"
        kept = [line for line in read_lines(self.path)
                if json.loads(line)["step"] <= resumed_step] if resumed_step and self.path.is_file() else []
        write_lines(self.path, kept)          # trimmed to the resumed step atomically, then appended to
        self.tensorboard = TensorBoard(out_dir / "tensorboard", resumed_step) if tensorboard else None
        self.file = open(self.path, "a+", encoding="utf-8")     # noqa: SIM115 (a long-lived file: close())

    def write(self, rec: dict[str, Any]) -> None:
        self.file.write(json.dumps(rec) + "\n")
        self.file.flush()
        if self.tensorboard is not None:
            self.tensorboard.record(rec)

    def read(self) -> list[dict[str, Any]]:
        """The records written so far (those kept from before a resume first)."""
        return [json.loads(line) for line in self.content().decode("utf-8").splitlines() if line.strip()]

    def content(self) -> bytes:
        """Everything written so far, from the open file."""
        self.file.flush()
        self.file.seek(0)
        return self.file.read().encode("utf-8")

    def close(self) -> None:
        self.file.close()
        if self.tensorboard is not None:
            self.tensorboard.close()
