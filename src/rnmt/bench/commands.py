"""`rnmt bench`: the command line of the speed benchmarks."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from rnmt.bench import BENCHMARKS
from rnmt.settings import count

log = logging.getLogger("rnmt")


def cmd_bench(a: argparse.Namespace) -> None:
    from rnmt.bench.runner import run_benchmark

    for name in a.names:
        _, text = run_benchmark(name, a.out, a.quick, a.device, a.threads, a.size, a.profile, a.graphs, a.precision,
                                a.tf32)
        print(text + "\n", flush=True)
        log.info("%s → %s/%s.csv", name, a.out, name)


def add_parsers(sub: Any) -> None:
    s = sub.add_parser("bench", help="speed benchmarks: cells, decoder, train, decode, data (tables + CSVs)")
    s.add_argument("names", nargs="+", choices=BENCHMARKS, metavar="{" + ",".join(BENCHMARKS) + "}",
                   help="which benchmarks: cells (one step and a sequence per cell), decoder (RNNSearch's "
                        "and DTMT's decoders, step loop and fused), train (steps per second per row), decode "
                        "(sentences per second by beam), data (preparing and BPE)")
    s.add_argument("--quick", action="store_true", help="small sizes, under a minute each")
    s.add_argument("--size", choices=("default", "paper"), default="default",
                   help="train, decode: paper = each row at its paper's sizes (ATR Table 4: emb 620, hidden "
                        "1000, 40K vocabulary, batch 80; SR-NMT's; DTMT's)")
    s.add_argument("--profile", action="store_true",
                   help="train: kernels per decoder step (forward, backward); decode: kernels per sentence; "
                        "both: the GPU-busy fraction and the kinds of work that took most of the time, from "
                        "torch's profiler")
    s.add_argument("--graphs", action="store_true",
                   help="on CUDA, train: each row's step again as a replayed CUDA graph (rnmt.train.graphs); "
                        "decode: the batched rows again with each search step replayed (rnmt.decode.graphs)")
    s.add_argument("--precision", choices=("float32", "bfloat16"), default="float32",
                   help="cells: float32 (every layer in full float32) or bfloat16 (torch's GRU and LSTM in "
                        "bfloat16, rnmt's cells under bfloat16 autocast as training runs them)")
    s.add_argument("--tf32", action="store_true",
                   help="decode (CUDA): the batched rows again with the products in TF32 (decode setting tf32; "
                        "replayed as graphs with --graphs): sentences/s, over float32's, and the share of the "
                        "sentences translated as in float32")
    s.add_argument("--out", default="results/bench", help="directory for <name>.csv")
    s.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:1, ...")
    s.add_argument("--threads", type=count(0), default=0, help="torch threads (0: torch's default); recorded per row")
    s.set_defaults(func=cmd_bench)
