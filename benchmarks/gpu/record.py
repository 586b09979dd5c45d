"""Append what a GPU lease brought back to the committed CSVs of this folder, from the run's own files.

    python benchmarks/gpu/record.py rows RUN_DIR --env ENV --session S --run NAME [--csv CSV]
    python benchmarks/gpu/record.py tests JSONL --env ENV --session S --run N [--csv CSV]
    python benchmarks/gpu/record.py bench CSV --env ENV --session S --run N --csv RESULTS_CSV

(`rows` into benchmarks/gpu/mini-rows.csv, `tests` into benchmarks/gpu/cuda-tests-<card>.csv, unless --csv
names another; `bench` into the RESULTS_CSV of that benchmark, e.g. benchmarks/results-h100-paper-decode.csv)

`rows`: one row a trained model of RUN_DIR (a `results/<run>` folder out of `mini.tgz`, whose models all
trained on the GPU at once, as `mini-on-one-gpu.sh` runs them): steps, training seconds and target tokens/s
from its train.json, test BLEU (detokenized, beam search) and decode seconds from its metrics where the run
scored it; a model without train.json gets the last step its training log reached and why it stopped (the
log's interruption or error line). `tests`: one row a measurement of `pytest -m cuda`'s report
(RNMT_CUDA_REPORT), a column a field, nested fields as JSON; columns the CSV lacks are added. `bench`: the
rows of a `rnmt bench` CSV the lease wrote (in its bench.tgz) as they are, into the committed results CSV of
that benchmark and card (`--csv`, no default). A session already in the CSV under the same run is refused,
so nothing is appended twice (a CSV without a `run` column holds every earlier session under run "", one
without a `session` column under session "").

ENV is the lease's env.txt (`common.sh` `gpu_start`: nvidia-smi's name of the card first): every row appended
names the card in its `gpu` column, the tests' default CSV is that card's, and a CSV whose name is another
card's (results-h200-… from an H100) is refused, so no card's numbers land among another's.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
ROWS = HERE / "mini-rows.csv"
CARD = re.compile(r"\b([A-Z]\d{2,4})\b")    # "NVIDIA H100 80GB HBM3" -> H100: the tag of the CSVs' names
STEP = re.compile(r"step (\d+)[/;: ]")       # "step 5500/6000 ...", "... at step 5608; ..."
STOPPED = re.compile(r"(interrupted: signal \d+ at step \d+|\w+Error: .*)")


def model_rows(run_dir: Path) -> list[dict[str, object]]:
    """A row for every model of `run_dir` that began training, in the order of their folders."""
    rows = []
    for log in sorted((run_dir / "logs" / "train").glob("*/*.log")):
        corpus, (variant, seed) = log.parent.name, log.stem.rsplit(".", 1)
        model = run_dir / "models" / corpus / variant / seed
        row: dict[str, object] = {"variant": variant}
        if (model / "train.json").is_file():
            t = json.loads((model / "train.json").read_text())
            row |= {"steps": t["steps"], "finished": True, "train_seconds": round(t["train_seconds"], 1),
                    "tgt_tokens_per_s": round(t["train_tgt_tokens_per_s"]),
                    "best_greedy_dev_bleu": round(t["best_dev_bleu_greedy"], 2), "kept_step": t["best_step"],
                    "bf16_autocast": t["train_settings"]["amp"], "gpu": t["hardware"].get("gpu"),
                    "torch": t["hardware"].get("torch"), "stopped_by": t["stop_reason"]}
            scored = run_dir / "metrics" / corpus / variant / seed / "test.json"
            if scored.is_file():
                m = json.loads(scored.read_text())
                row |= {"test_bleu_beam": round(m["scores"]["bleu"], 2), "beam": m["decode"]["beam"],
                        "test_decode_seconds": round(m["decode"]["decode_seconds"], 2),
                        "test_sentences": m["scores"]["sentences"]}
            else:                               # trained, but the run ended before its test set was scored
                row["stopped_by"] = f"{t['stop_reason']}; not scored on the test set"
        else:
            text = log.read_text(encoding="utf-8", errors="replace")
            steps = [int(s) for s in STEP.findall(text)]
            why = STOPPED.findall(text)
            row |= {"steps": max(steps, default=0), "finished": False,
                    "stopped_by": why[-1] if why else "no train.json and no reason in its log"}
        rows.append(row)
    return [{**row, "jobs_on_the_gpu": len(rows)} for row in rows]     # every model trained at once


def card(env: Path) -> tuple[str, str]:
    """The card's name as nvidia-smi gave it in the lease's env.txt and its tag for file names ("h100")."""
    lines = [line for line in env.read_text(errors="replace").splitlines() if line.strip()]
    if len(lines) < 2 or not lines[0].startswith("name"):
        sys.exit(f"{env}: not a lease's env.txt (nvidia-smi's csv, its header line 'name, ...' first)")
    name = lines[1].split(",")[0].strip()
    tag = CARD.search(name.removeprefix("NVIDIA "))
    if tag is None:
        sys.exit(f"{env}: no card model (like H100) in the card's name {name!r}")
    return name, tag.group(1).lower()


def check_card(csv: Path, tag: str) -> None:
    """Refuse a CSV named for another card than the lease's."""
    named = set(re.findall(r"(?:^|[-_])([a-z]\d{2,4})(?=[-_.])", csv.name.lower())) - {tag}
    if named:
        sys.exit(f"{csv.name} is named for {', '.join(sorted(named))}, but the lease ran on {tag}: give the "
                 f"CSV of {tag} (e.g. {re.sub(sorted(named)[0], tag, csv.name)})")


def append(csv: Path, new: pd.DataFrame, session: str, run: str) -> None:
    old = pd.read_csv(csv, dtype=str, keep_default_na=False) if csv.is_file() else pd.DataFrame()
    for column in ("session", "run"):
        if column not in old.columns:
            old = old.assign(**{column: ""})
    if ((old["session"] == session) & (old["run"] == run)).any():
        sys.exit(f"{csv} already holds session {session} run {run}: nothing appended")
    new = new.assign(session=session, run=run)
    columns = list(dict.fromkeys([*old.columns, *new.columns]))
    pd.concat([old, new], ignore_index=True).reindex(columns=columns).to_csv(csv, index=False)
    print(f"{csv}: {len(new)} rows of session {session} run {run} appended"
          f"{'' if len(old) else ' (a new file)'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["rows", "tests", "bench"])
    ap.add_argument("source", type=Path, help="rows: the run's folder; tests: the CUDA tests' JSON lines; "
                                              "bench: a `rnmt bench` CSV")
    ap.add_argument("--env", type=Path, required=True, help="the lease's env.txt (it names the card)")
    ap.add_argument("--session", required=True, help="the lease's date, with a letter for a second that day")
    ap.add_argument("--run", required=True)
    ap.add_argument("--csv", type=Path)
    a = ap.parse_args()
    for given in (a.source, a.env):
        if not given.exists():
            sys.exit(f"{given} does not exist")
    name, tag = card(a.env)
    if a.what == "bench":
        if a.csv is None:
            sys.exit(f"bench: give --csv, the committed results CSV of that benchmark and card "
                     f"(e.g. benchmarks/results-{tag}-paper-decode-graphs.csv)")
        new = pd.read_csv(a.source, dtype=str, keep_default_na=False)
        others = sorted(set(new.get("device", pd.Series(dtype=str))) - {"", "cpu", name})
        if others:
            sys.exit(f"{a.source}: its rows ran on {', '.join(others)}, but {a.env} names {name}: give the env.txt "
                     "of the call that wrote it")
    elif a.what == "rows":
        rows = model_rows(a.source)
        if not rows:
            sys.exit(f"{a.source} has no training logs (logs/train/<corpus>/<variant>.<seed>.log)")
        new = pd.DataFrame(rows, dtype=object)
    else:
        records = [json.loads(line) for line in a.source.read_text().splitlines() if line.strip()]
        new = pd.DataFrame([{k: json.dumps(v) if isinstance(v, dict | list) else v for k, v in r.items()}
                            for r in records], dtype=object)
    csv = a.csv or (ROWS if a.what == "rows" else HERE / f"cuda-tests-{tag}.csv")
    check_card(csv, tag)
    # every row names the card; one that names it already (a training's train.json) keeps its name
    named = new["gpu"] if "gpu" in new.columns else [None] * len(new)
    new = new.assign(gpu=[g if isinstance(g, str) and g else name for g in named])
    append(csv, new, a.session, a.run)


if __name__ == "__main__":
    main()
