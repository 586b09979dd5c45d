"""`rnmt score`, `rnmt gates`, `rnmt cell-counts` and `rnmt compare`: the command line of evaluation (the
score, gates and cell_counts rules; compare is run by hand on two finished runs)."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from rnmt.settings import count, json_object, key_value

log = logging.getLogger("rnmt")


def cmd_score(a: argparse.Namespace) -> None:
    from rnmt.evaluate.metrics import write_metrics

    write_metrics(a.output, a.hyp, a.ref, a.hyp_tok, a.ref_tok, a.src, a.manifest, a.lowercase,
                  {**dict(a.meta), "override": a.override}, a.train_metrics, a.decode_metrics)


def cmd_gates(a: argparse.Namespace) -> None:
    from rnmt.evaluate.gates import gate_statistics_of_files
    from rnmt.io import write_json

    stats = gate_statistics_of_files(a.model, a.src, a.tgt)
    write_json(a.output, stats)
    for name, st in stats.items():
        log.info("%s: Pearson r of mean input and forget gates %.4f", name, st["pearson_r"])


def cmd_cell_counts(a: argparse.Namespace) -> None:
    from rnmt.evaluate.cellcount import write

    counts = write(a.cell, a.output)
    log.info("%s: %g weight matrices, %g matrix transformations per step", a.cell, counts["weight_matrices"],
             counts["matrix_transformations"])


def cmd_compare(a: argparse.Namespace) -> None:
    from rnmt.evaluate.compare import compare, markdown, write

    df = compare(a.run_a, a.run_b, a.table, a.test, a.samples)
    write(df, a.output, a.md)
    print(markdown(df), end="")


def add_parsers(sub: Any) -> None:
    s = sub.add_parser("score", help="score a translation and write metrics.json")
    s.add_argument("--hyp", required=True, help="the detokenized translation, a line per test sentence")
    s.add_argument("--ref", required=True, nargs="+",
                   help="reference file(s); extra references beside them (<file>.ref1, ...) are used too")
    s.add_argument("--hyp-tok", help="the translation tokenized (BPE removed), for tokenized BLEU")
    s.add_argument("--ref-tok", nargs="+", help="the references tokenized, for tokenized BLEU (multi-bleu)")
    s.add_argument("--src", help="tokenized source, for BLEU by source length (DTMT Figure 3)")
    s.add_argument("--lowercase", action="store_true", help="case-insensitive BLEU (NIST Zh-En)")
    s.add_argument("--manifest", help="the test split's assemble manifest: BLEU per test set it merges")
    s.add_argument("--train-metrics", nargs="*", default=[], help="train.json of the model or of each member")
    s.add_argument("--decode-metrics", help="the translate job's speed JSON (rnmt translate --metrics)")
    s.add_argument("--meta", nargs="*", default=[], type=key_value, help="key=value pairs stored in the metrics")
    s.add_argument("--override", type=json_object, default={},
                   help="the run's config override (JSON), recorded so that tables say what their rows ran with")
    s.add_argument("--output", required=True, help="the metrics JSON to write")
    s.set_defaults(func=cmd_score)

    s = sub.add_parser("gates", help="ATR gate statistics on a test set (ATR section 5.1, Figure 3)")
    s.add_argument("--model", required=True, help="an ATR model's checkpoint (model.pt)")
    s.add_argument("--src", required=True, help="segmented source")
    s.add_argument("--tgt", required=True, help="segmented reference")
    s.add_argument("--output", required=True, help="the gate statistics JSON to write")
    s.set_defaults(func=cmd_gates)

    s = sub.add_parser("cell-counts", help="a cell's weight matrices and matrix transformations per step (ATR Table 1)")
    s.add_argument("--cell", required=True, help="a registered cell (atr, gru, lstm, ...)")
    s.add_argument("--output", required=True, help="the counts JSON to write")
    s.set_defaults(func=cmd_cell_counts)

    s = sub.add_parser("compare", help="two runs' common systems side by side, with paired significance tests "
                                       "of BLEU and chrF (sacrebleu)")
    s.add_argument("run_a", metavar="RUN_A", help="the baseline: results/<run> or a run name")
    s.add_argument("run_b", metavar="RUN_B", help="the run compared with it")
    s.add_argument("--table", help="only this table's rows, named and ordered as in the table")
    s.add_argument("--test", choices=["bs", "ar"], default="bs",
                   help="paired bootstrap resampling (bs, with 95%% CIs) or approximate randomization (ar)")
    s.add_argument("--samples", type=count(0), default=0,
                   help="resamples (bs) or trials (ar); 0: sacrebleu's default, 1000 or 10000")
    s.add_argument("--output", help="CSV, one row per system and metric")
    s.add_argument("--md", help="Markdown (also printed)")
    s.set_defaults(func=cmd_compare)
