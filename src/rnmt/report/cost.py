"""Training cost per minibatch of several runs in one plot (UD paper, Figure 2: "Training cost of the
model according to minibatch (slightly smoothed for readability)").

The cost is each logged minibatch's training loss from train.jsonl (cross-entropy per target token);
with `log_every: 1` every minibatch is logged. Smoothing is the trailing moving average of the
tables' cost figure (rnmt.report.figures), over `window` logged minibatches. This command draws any
runs' logs, outside a table.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rnmt.io import InputError
from rnmt.report.curves import read_log, train_loss
from rnmt.report.figures import smooth
from rnmt.report.plotting import save


def cost_series(log_path: str | Path) -> tuple[list[int], list[float]]:
    train = [r for r in read_log(log_path) if r.get("kind") == "train"]
    if not train:
        raise InputError(f"{log_path}: no training records (kind: train) to plot")
    return [r["step"] for r in train], [train_loss(r) for r in train]


def plot_cost(logs: Sequence[str | Path], out_png: str | Path, names: Sequence[str] | None = None,
              window: int = 5, title: str = "") -> None:
    if window < 1:
        raise InputError(f"plot-cost: --smooth is a window of logged minibatches, at least 1 (got {window})")
    if names and len(names) != len(logs):
        raise InputError(f"plot-cost: {len(names)} --name for {len(logs)} logs; give one name per log or none")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(names) if names else [Path(p).parent.name or str(p) for p in logs]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for path, name in zip(logs, names, strict=True):
        steps, cost = cost_series(path)
        ax.plot(steps, smooth(cost, window), lw=1.2, label=name)
    ax.set_xlabel("minibatch")
    ax.set_ylabel("training cost (cross-entropy per token)")
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(title)
    save(fig, out_png, dpi=110)
