"""runs.csv: every trained model and decoding of a run, one row each, with every metric and setting
flattened to columns (`scores.bleu`, `train.train_settings.lr`, `decode.beam`, ...), for users who
slice the results themselves rather than through the paper tables."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from rnmt.evaluate.metrics import verify_scored
from rnmt.io import atomic_writer, read_json

FIRST = ["run", "scale", "corpus", "variant", "member", "testset", "scores.bleu", "scores.tok_bleu", "scores.chrf",
         "train.params", "train.train_tgt_words_per_s", "decode.decode_words_per_s"]


def write_runs(metrics_files: Sequence[str | Path], out_csv: str | Path) -> pd.DataFrame:
    records = []
    for path in metrics_files:
        m = read_json(path)
        if "files" in m:
            verify_scored(path, m)
        for key in ("bleu_by_length", "tok_bleu_by_length"):       # nested per-bucket dicts stay in the JSON
            m.get("scores", {}).pop(key, None)
        m.pop("seeds", None)
        m.pop("files", None)                                     # what was scored: for rnmt compare
        records.append({**m, "metrics_file": str(path)})
    df = pd.json_normalize(records) if records else pd.DataFrame(columns=FIRST)
    df = df[[c for c in FIRST if c in df.columns] + sorted(c for c in df.columns if c not in FIRST)]
    with atomic_writer(out_csv) as f:
        df.to_csv(f, index=False)
    return df
