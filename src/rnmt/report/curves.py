"""Learning curves from a training log (train.jsonl): dev BLEU and perplexity against training time."""

from __future__ import annotations

import json
from pathlib import Path

from rnmt.io import InputError, read_lines
from rnmt.report.plotting import save


def read_log(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: training log not found")
    records = []
    for n, line in enumerate(read_lines(path), 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise InputError(f"{path}, line {n}: not a training log record ({e.msg}); give the train.jsonl "
                                 "that rnmt train writes into the model folder") from None
    return records


def train_loss(record: dict) -> float:
    """A training record's loss over its log window (the job log line's), or, in logs written before
    train.jsonl kept it, the loss of the one update at the log step."""
    return record.get("mean_loss", record["loss"])


def plot(log_path: str | Path, out_png: str | Path, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_log(log_path)
    valid = [r for r in records if r["kind"] == "valid"]
    train = [r for r in records if r["kind"] == "train"]
    if not valid:
        raise InputError(f"{log_path}: no validation records to plot")
    fig, (ax_loss, ax_bleu) = plt.subplots(1, 2, figsize=(10, 3.8))
    minutes = [r["train_seconds"] / 60 for r in valid]
    ax_loss.plot([r["train_seconds"] / 60 for r in train], [train_loss(r) for r in train], lw=0.8, alpha=0.6,
                 label="train loss (mean since the last log step)")
    ax_loss.plot(minutes, [r["dev_loss"] for r in valid], "o-", label="dev loss")
    ax_loss.set_xlabel("training minutes")
    ax_loss.set_ylabel("cross-entropy per token")
    ax_loss.set_yscale("log")
    ax_loss.legend()
    if any("dev_bleu" in r for r in valid):
        ax_bleu.plot(minutes, [r.get("dev_bleu") for r in valid], "o-", color="tab:green")
        ax_bleu.set_ylim(0, 100)
    ax_bleu.set_xlabel("training minutes")
    ax_bleu.set_ylabel("dev BLEU (greedy, tokenized)")
    for ax in (ax_loss, ax_bleu):
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    save(fig, out_png, dpi=110)
