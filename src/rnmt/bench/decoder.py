"""`rnmt bench decoder`: forward+backward target tokens/s of the teacher-forced decoders, each step loop beside
its fused function (models/decoder_sequence.py), in the same process: RNNSearch's with the cells the ATR tables
train (GRU with the reset gate inside the product, ATR without biases; ATR paper eqs. 4, 6) and DTMT#1's
(L-GRU + T-GRU transition blocks around its multi-head attention, with its 0.1 candidate dropout).

A measurement runs the decoder over p [batch, length, projection] (the lower cell's projected target
embeddings) with the attention over a random memory [batch, source, 2·hidden] and back-propagates the
sum of its outputs and contexts: the part of a training step between the encoder and the readout,
which the step loop runs step by step through autograd.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from rnmt.bench.timing import Peak, environment, measure
from rnmt.models import build_model, decoder_sequence

log = logging.getLogger(__name__)
BATCH, LENGTH, SOURCE = 80, 28, 30          # ATR Table 4's batch; WMT14 En-De's mean lengths after BPE (assumed)
FULL_HIDDEN, QUICK_HIDDEN = (256, 512, 1000), (256,)
# the ATR tables' options (workflow/systems/atr.yaml); DTMT#1 (workflow/systems/dtmt.yaml) with the paper's 16
# heads where they divide the width, else the most of 8, 4, 2 that do
DECODERS = {"rnnsearch-gru": ("rnnsearch", {"cell": "gru", "cell_options": {"reset": "before"}}),
            "rnnsearch-atr": ("rnnsearch", {"cell": "atr", "cell_options": {"bias": False}}),
            "dtmt-1": ("dtmt", {"cell": "lgru", "depth": 1})}
PATHS = {"loop": "step loop", "sequence": "fused"}


def heads(hidden: int) -> int:
    return next(h for h in (16, 8, 4, 2, 1) if hidden % h == 0)


def measure_decoder(name: str, hidden: int, device: torch.device, batch: int, length: int, source: int,
                    warmup: int, reps: int) -> list[dict[str, Any]]:
    """Both paths of one decoder, each with its ratio to the step loop."""
    arch, settings = DECODERS[name]
    torch.manual_seed(0)
    extra = {"heads": heads(hidden)} if arch == "dtmt" else {}
    model = build_model(arch, 100, 100, emb=hidden, hidden=hidden, dropout=0.0, **settings, **extra).to(device).train()
    p = torch.zeros(batch, 1, model.dec_lower.projection_size, device=device)
    memory = torch.zeros(batch, source, 2 * hidden, device=device)
    params = [w for w in model.parameters() if w.requires_grad]
    runs = decoder_sequence.candidates(model, p, memory, True, params, steps=length)
    rows = []
    for path, fn in runs.items():
        t = measure(fn, device, warmup, reps)
        tokens = batch * length
        log.info("%s hidden %d, %s: %.0f target tokens/s", name, hidden, PATHS[path], tokens / t.median)
        rows.append({"decoder": name, "path": PATHS[path], "hidden": hidden, "heads": model.attention.heads,
                     "batch": batch, "target_length": length, "source_length": source,
                     "seconds": t.median, "tokens_per_s": tokens / t.median, "reps": reps})
    for r in rows:
        r["ratio_to_loop"] = r["tokens_per_s"] / rows[0]["tokens_per_s"]
    return rows


def bench(device: torch.device, quick: bool = False, hidden: tuple[int, ...] | None = None,
          batch: int = BATCH, source: int = SOURCE) -> list[dict[str, Any]]:
    warmup, reps = (1, 2) if quick else (2, 5)
    peak = Peak(device, quick)
    rows = []
    for h in hidden or (QUICK_HIDDEN if quick else FULL_HIDDEN):
        for name in DECODERS:
            rows += measure_decoder(name, h, device, batch, LENGTH, source, warmup, reps)
            peak.sample(quick=True)
    env = environment(device, peak)
    return [{**r, **env} for r in rows]


COLUMNS = ("decoder", "path", "hidden", "heads", "batch", "target_length", "source_length", "tokens_per_s",
           "ratio_to_loop")
