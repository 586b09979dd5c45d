"""Runs one benchmark by name: fixes the device and thread count, measures, prints the table and writes
`<out>/<name>.csv`."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any

from rnmt.bench import BENCHMARKS
from rnmt.bench.table import format_table, write_csv
from rnmt.bench.timing import setup
from rnmt.io import InputError


def run_benchmark(name: str, out_dir: str | Path = "results/bench", quick: bool = False, device: str = "auto",
                  threads: int = 0, size: str = "default", profile: bool = False,
                  graphs: bool = False, precision: str = "float32",
                  tf32: bool = False) -> tuple[list[dict[str, Any]], str]:
    """→ (rows, the printed table); the CSV is written to `out_dir/name.csv`. `size`, `profile`, `graphs`,
    `precision` and `tf32` are options of the benchmarks that have them (train, decode: `size`, `profile`,
    `graphs`; cells: `precision`; decode: `tf32`)."""
    if name not in BENCHMARKS:
        raise InputError(f"unknown benchmark {name!r}; valid: {', '.join(BENCHMARKS)}")
    module = importlib.import_module(f"rnmt.bench.{name}")
    options: dict[str, Any] = {}
    params = inspect.signature(module.bench).parameters
    for option, value, default in (("size", size, "default"), ("profile", profile, False), ("graphs", graphs, False),
                                   ("precision", precision, "float32"), ("tf32", tf32, False)):
        if value != default:
            if option not in params:
                raise InputError(f"rnmt bench {name} has no --{option}")
            options[option] = value
    dev = setup(device, threads)
    csv = Path(out_dir) / f"{name}.csv"
    if "progress" in params:            # the CSV of the rows so far, kept where a time limit ends the run
        options["progress"] = lambda rows: write_csv(rows, csv)
    rows = module.bench(dev, quick=quick, **options)
    env = rows[0]
    header = (f"{name} on {env['device']} ({env['cpu']}), {env['threads']} threads, torch {env['torch']}, "
              f"measured matmul peak {env['peak_gflops']} GFLOP/s, "
              f"load average {env['load_1min_start']} at the start, {env['load_1min_end']} at the end"
              f"{', quick run' if quick else ''}")
    columns = (module.COLUMNS + (module.PROFILE_COLUMNS if profile else ()) + (module.GRAPH_COLUMNS if graphs else ())
               + (getattr(module, "GRAPH_PROFILE_COLUMNS", ()) if profile and graphs else ())
               + (getattr(module, "TF32_COLUMNS", ()) if tf32 else ()))
    text = header + "\n" + format_table(rows, columns)
    write_csv(rows, csv)
    return rows, text
