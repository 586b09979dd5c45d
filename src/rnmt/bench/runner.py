"""Runs one benchmark by name: fixes the device and thread count, measures, prints the table and writes
`<out>/<name>.csv`."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from rnmt.bench import BENCHMARKS
from rnmt.bench.table import format_table, write_csv
from rnmt.bench.timing import setup
from rnmt.io import InputError


def run_benchmark(name: str, out_dir: str | Path = "results/bench", quick: bool = False, device: str = "auto",
                  threads: int = 0) -> tuple[list[dict[str, Any]], str]:
    """→ (rows, the printed table); the CSV is written to `out_dir/name.csv`."""
    if name not in BENCHMARKS:
        raise InputError(f"unknown benchmark {name!r}; valid: {', '.join(BENCHMARKS)}")
    module = importlib.import_module(f"rnmt.bench.{name}")
    dev = setup(device, threads)
    rows = module.bench(dev, quick=quick)
    env = rows[0]
    header = (f"{name} on {env['device']} ({env['cpu']}), {env['threads']} threads, torch {env['torch']}, "
              f"measured matmul peak {env['peak_gflops']} GFLOP/s, "
              f"load average {env['load_1min_start']} at the start, {env['load_1min_end']} at the end"
              f"{', quick run' if quick else ''}")
    text = header + "\n" + format_table(rows, module.COLUMNS)
    write_csv(rows, Path(out_dir) / f"{name}.csv")
    return rows, text
