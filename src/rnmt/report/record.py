"""A run's recorded numbers, and whether another run gives them.

The README quotes the demo's numbers; they must be ones a fresh clone gives. `write` keeps a finished
run's table numbers (every metric that does not measure time: BLEU, chrF, parameters, gate
correlations; speeds vary with the machine and its load) in a CSV, with the machine that made them in a
JSON file beside it. `differences` compares a run with such a record: the same code on the same CPU type
must give every number again (budgets are steps and the demo measures no fast paths), so a difference
there is a defect; on another CPU type the products round differently and the numbers may move.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from rnmt.evaluate.metric_names import timed
from rnmt.io import InputError, atomic_writer, read_json, write_json

COLUMNS = ["table", "row", "system", "variant", "members", "metric", "ours", "n_seeds"]
DECIMALS = 4


def machine_path(record: str | Path) -> Path:
    return Path(record).with_suffix(".machine.json")


def numbers(run_dir: str | Path) -> pd.DataFrame:
    """Every table's numbers of a finished run that do not measure time, to DECIMALS places."""
    # a table's CSV, not the claims checked beside it (<table>.claims.csv, one verdict a row)
    tables = sorted(p for p in Path(run_dir, "tables").glob("*.csv") if not p.name.endswith(".claims.csv"))
    if not tables:
        raise InputError(f"{run_dir}: no tables/*.csv; run the pipeline first (make demo, or snakemake "
                         f"--cores all with the run's config)")
    frames = []
    for path in tables:
        try:
            df = pd.read_csv(path)
        except (OSError, ValueError) as e:
            raise InputError(f"{path}: not a table's CSV ({e}); rebuild it with snakemake") from None
        if not set(COLUMNS) <= set(df.columns):
            raise InputError(f"{path}: not a table's CSV (no {', '.join(sorted(set(COLUMNS) - set(df.columns)))} "
                             "column); rebuild it with snakemake")
        frames.append(df[COLUMNS])
    df = pd.concat(frames, ignore_index=True)
    df = df[~df.metric.map(timed) & df.ours.map(math.isfinite)].copy()
    df["ours"] = df.ours.round(DECIMALS)
    return df.sort_values(["table", "row", "metric"]).reset_index(drop=True)


def machine(run_dir: str | Path) -> dict[str, Any]:
    """What made a run's numbers: the code and the machine of its first trained model's metrics."""
    for path in sorted(Path(run_dir, "metrics").glob("*/*/seed*/*.json")):
        m = read_json(path)
        hw = (m.get("train") or {}).get("hardware") or {}
        return {"git_commit": m.get("git_commit"), "git_dirty": m.get("git_dirty"), "cpu": hw.get("cpu"),
                "cpu_isa": hw.get("cpu_isa"), "torch": hw.get("torch"), "torch_threads": hw.get("torch_threads"),
                "device": hw.get("device"), "fast_path_mode": hw.get("fast_path_mode"), "matmul": hw.get("matmul")}
    return {}


def same_machine(made: dict[str, Any], here: dict[str, Any]) -> bool:
    """Whether two runs' products round alike: the same CPU model name, vector instructions and torch (a
    record without `cpu_isa` was made before it was kept, and matches no machine)."""
    keys = ("cpu", "cpu_isa", "torch")
    return all(made.get(k) is not None and made.get(k) == here.get(k) for k in keys)


def write(run_dir: str | Path, record: str | Path) -> pd.DataFrame:
    df = numbers(run_dir)
    with atomic_writer(record) as f:
        df.to_csv(f, index=False)
    write_json(machine_path(record), machine(run_dir))
    return df


def differences(run_dir: str | Path, record: str | Path) -> pd.DataFrame:
    """The record's numbers that the run does not give (changed, or missing from the run), and the run's
    numbers the record lacks: one row each with `recorded` and `now` (NaN where absent)."""
    try:
        want = pd.read_csv(record)
    except (OSError, ValueError) as e:
        raise InputError(f"{record}: cannot read the record ({e}); write one with rnmt record write") from None
    got = numbers(run_dir)
    keys = ["table", "system", "metric"]
    both = want[[*keys, "ours"]].merge(got[[*keys, "ours"]], on=keys, how="outer", suffixes=("_recorded", "_now"),
                                       indicator=True)
    both = both.rename(columns={"ours_recorded": "recorded", "ours_now": "now"})
    changed = (both._merge != "both") | ((both.recorded - both.now).abs() > 10 ** -DECIMALS)
    return both.loc[changed, [*keys, "recorded", "now"]].reset_index(drop=True)


def report(run_dir: str | Path, record: str | Path) -> tuple[bool, str]:
    """Whether the run gives the record's numbers, and what to tell the person who ran it."""
    diff = differences(run_dir, record)
    n = len(pd.read_csv(record))
    recorded = read_json(machine_path(record)) if machine_path(record).is_file() else {}
    here = machine(run_dir)
    if diff.empty:
        return True, f"{run_dir}: all {n} numbers equal the record {record} (made on {recorded.get('cpu', '?')})"
    same_cpu = same_machine(recorded, here)
    lines = [f"{run_dir}: {len(diff)} of {n} numbers differ from the record {record}:"]
    lines += [f"  {r.table} / {r.system} / {r.metric}: recorded {r.recorded}, now {r.now}" for r in diff.itertuples()]
    if same_cpu:
        lines.append(f"The record was made on this CPU type ({here.get('cpu')}) and torch {here.get('torch')}, so "
                     "every number should be the same: if the code is unchanged, please report this as a defect.")
    else:
        lines.append(f"The record was made on {recorded.get('cpu', '?')} ({recorded.get('cpu_isa', '?')}) with torch "
                     f"{recorded.get('torch', '?')}; this run on {here.get('cpu', '?')} ({here.get('cpu_isa', '?')}) "
                     f"with torch {here.get('torch', '?')}. Another CPU type, vector instruction set or "
                     "torch version rounds products differently, so the numbers may move; the findings the README "
                     "states should still hold.")
    return False, "\n".join(lines)
