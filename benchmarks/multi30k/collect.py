"""Mini-scale tables on Multi30k with each row's BLEU on the validation set, as a measured result.

    snakemake --cores 2 results/mini/tables/atr-table4.csv --config scale=mini run=mini
    python benchmarks/multi30k/collect.py --table atr-table4

The table's rows are decoded a second time, on the 1,014 validation pairs with the row's own beam search
(Snakemake makes `results/mini/metrics/<corpus>/<variant>/<member>/dev.json`; the script asks for them),
and the script writes `benchmarks/multi30k/<table>.csv` (the table's tidy CSV), `<table>.md` (its
Markdown), `<table>.claims.csv` (the paper's claims, checked), `<table>.png` (a figure's plot) and
`<table>-bleu.csv`: per row, training steps, why training stopped, the kept step, greedy dev BLEU at that
step, and detokenized BLEU with beam search on the validation set and on each test set. `--seeds N` is
the run's seeds a row (its `scales={mini: {seeds: N, max_seeds: N}}`); `--partial` collects a run that
ended early: the rows that finished, from Snakemake's partial table (results/<run>/tables/partial/), the
others marked.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", action="append", help="a table to collect (again for several; default atr-table4)")
    ap.add_argument("--run", default="mini")
    ap.add_argument("--cores", default="2")
    ap.add_argument("--seeds", type=int, default=0, help="the run's seeds a row (default: the scale's)")
    ap.add_argument("--partial", action="store_true", help="the rows that finished, the others marked")
    a = ap.parse_args()
    for table in a.table or ["atr-table4"]:
        collect(table, a.run, a.cores, a.seeds, a.partial)


def collect(name: str, run: str, cores: str, seeds: int, partial: bool) -> None:
    sys.path.insert(0, str(ROOT / "src"))
    import yaml

    from rnmt.planning.plan import Plan

    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    override = []
    if seeds:
        config["scales"]["mini"] = {**config["scales"]["mini"], "seeds": seeds, "max_seeds": seeds}
        override = [f"scales={{mini: {{seeds: {seeds}, max_seeds: {seeds}}}}}"]
    plan = Plan({**config, "scale": "mini", "run": run, "tables": [name]}, ROOT)
    table = plan.table(name)
    results = ROOT / plan.results
    tables = results / "tables" / ("partial" if partial else "")
    metrics = f"{plan.results}/metrics/{table.corpus}"
    members = [(r, m) for r in table.trained_rows for m in r.members()
               if not partial or (ROOT / f"{metrics}/{r.variant}/{m}/test.json").is_file()]
    config_args = ["--config", "scale=mini", f"run={run}", *override]
    targets = [f"{metrics}/{r.variant}/{m}/dev.json" for r, m in members]
    targets.append(str((tables / f"{name}.md").relative_to(ROOT)))
    figure = results / "figures" / f"{name}.png" if table.figure and not partial else None
    if figure:                                  # ATR Figure 3's gates, UD Figure 2's cost, ...
        targets.append(str(figure.relative_to(ROOT)))
    subprocess.run([sys.executable, "-m", "snakemake", "--cores", cores, *targets, *config_args], cwd=ROOT,
                   check=True)
    rows = []
    for r, m in members:
        d = json.loads((ROOT / f"{metrics}/{r.variant}/{m}/dev.json").read_text())
        t = json.loads((ROOT / f"{metrics}/{r.variant}/{m}/test.json").read_text())
        train = d["train"]
        rows.append({"system": r.system, "variant": r.variant, "member": m, "params_m": train["params"] / 1e6,
                     "steps": train["steps"], "stop_reason": train["stop_reason"],
                     "train_minutes": train["train_seconds"] / 60, "kept_step": train["best_step"],
                     "greedy_dev_bleu": train.get("best_dev_bleu_greedy"), "dev_bleu": d["scores"]["bleu"],
                     "test_bleu": t["scores"]["bleu"],
                     **{f"test_{k}": v for k, v in (t["scores"].get("bleu_by_part") or {}).items()},
                     "beam": d["decode"].get("beam"), "device": train["hardware"]["device"],
                     "cpu": train["hardware"]["cpu"], "threads": train["hardware"]["torch_threads"]})
    out = pd.DataFrame(rows).round(3)
    out.to_csv(HERE / f"{name}-bleu.csv", index=False)
    for ext in ("csv", "md", "claims.csv"):
        shutil.copy(tables / f"{name}.{ext}", HERE / f"{name}.{ext}")
    if figure:
        shutil.copy(figure, HERE / figure.name)
    print(out.to_string(index=False))


if __name__ == "__main__":
    main()
