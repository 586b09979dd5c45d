"""Throughput of the prepare stage (assemble → chunk → clean → merge, plus dev/test) on the small real
corpora in DATA, through Snakemake with 1 and with 2 cores. Reported, never asserted.

    .venv/bin/python benchmarks/prepare_corpus.py --data DATA              # both corpora, 1 and 2 cores
    .venv/bin/python benchmarks/prepare_corpus.py --data DATA --corpus enro --cores 2

DATA holds one folder per corpus: `toy-ende/` with OpenNMT-py's toy English-German data, already
Moses-tokenized (src-train.txt, tgt-train.txt, src-val.txt, tgt-val.txt), and `enro-europarl-sample/`
with raw parallel Europarl English-Romanian lines (corpus.en, corpus.ro). A corpus whose folder is
missing is skipped.

Writes results/benchmarks/prepare-<corpus>.json and prints lines kept per step and lines/second.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CORPORA = {
    # already Moses-tokenized and escaped: not tokenized again; ATR's filters
    "toy-ende": {"source": "local:toy-ende", "src_lang": "en", "tgt_lang": "de",
                 "files": {"train": ["src-train.txt", "tgt-train.txt"], "dev": ["src-val.txt", "tgt-val.txt"]},
                 "holdout": {"test": 500},
                 "preprocess": {"tokenized": True, "max_words": 80, "max_ratio": 9, "dedupe": True, "chunks": 2}},
    # raw Europarl En-Ro: normalisation, Romanian letters, Moses tokenization, SR-NMT/Sennrich's filters
    "enro": {"source": "local:enro-europarl-sample", "src_lang": "en", "tgt_lang": "ro",
             "files": {"train": ["corpus.en", "corpus.ro"]}, "holdout": {"dev": 500, "test": 500},
             "preprocess": {"romanian": True, "max_words": 80, "max_ratio": 9, "dedupe": True, "chunks": 2}},
}


def repeated(corpus: dict, times: int, d: str) -> dict:
    """The corpus with its training files concatenated `times` times (a bigger input of the same text)."""
    if times == 1:
        return corpus
    folder = Path(corpus["source"].removeprefix("local:"))
    for name in {f for pair in corpus["files"].values() for f in pair}:
        Path(d, name).write_bytes((folder / name).read_bytes() * (times if name in corpus["files"]["train"] else 1))
    return {**corpus, "source": f"local:{d}"}


def located(corpus: str, data: Path) -> dict:
    """The corpus's entry with its `local:` folder inside `data`."""
    entry = CORPORA[corpus]
    return {**entry, "source": f"local:{data.resolve() / entry['source'].removeprefix('local:')}"}


def run(corpus: str, entry: dict, cores: int, times: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        entry = repeated(entry, times, d)
        Path(d, "c.yaml").write_text(yaml.safe_dump({"run": "bench", "corpora": {corpus: entry}}))
        data = f"results/bench/data/{corpus}"
        targets = [f"{data}/prepare.json"] + [f"{data}/tok/{s}.{x}" for s in ("dev", "test") for x in ("src", "tgt")]
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), *targets, "--cores",
                        str(cores), "--configfile", "c.yaml", "--quiet"], cwd=d, env=env, check=True,
                       capture_output=True)
        wall = time.perf_counter() - t0
        report = json.loads(Path(d, data, "prepare.json").read_text())
        per_job = [json.loads(p.read_text())["lines_per_second"] for p in sorted(Path(d, data, "chunks").glob("*.json"))
                   if p.name != "index.json"]
    return {"cores": cores, "repeat": times, "wall_seconds": round(wall, 2), "lines_in": report["lines_in"],
            "lines_out": report["lines_out"], "lines_per_second_wall": round(report["lines_in"] / wall, 1),
            "clean_seconds_summed_over_jobs": report["seconds"], "clean_lines_per_second_per_job": per_job,
            "steps": report["steps"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, required=True, help="the folder holding the corpora's folders")
    p.add_argument("--corpus", choices=sorted(CORPORA), action="append")
    p.add_argument("--cores", type=int, action="append")
    p.add_argument("--repeat", type=int, default=1, help="concatenate the training files this many times")
    a = p.parse_args()
    for corpus in a.corpus or sorted(CORPORA):
        entry = located(corpus, a.data)
        folder = Path(entry["source"].removeprefix("local:"))
        if not folder.is_dir():
            print(f"{corpus}: {folder} is not on this machine; skipped")
            continue
        results = [run(corpus, entry, c, a.repeat) for c in a.cores or (1, 2)]
        out = ROOT / f"results/benchmarks/prepare-{corpus}-x{a.repeat}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2) + "\n")
        print(f"{corpus}: {results[0]['lines_in']} training pairs in, {results[0]['lines_out']} out")
        for s in results[0]["steps"]:
            print(f"  {s['step']:16s} kept {s['kept']:7d}  dropped {s['dropped']:6d}")
        for r in results:
            print(f"  {r['cores']} core(s): {r['wall_seconds']:6.1f} s wall (whole Snakemake run, all prepare jobs), "
                  f"{r['lines_per_second_wall']:7.1f} training lines/s; inside each clean job: "
                  f"{', '.join(f'{x:.0f}' for x in r['clean_lines_per_second_per_job'])} lines/s")


if __name__ == "__main__":
    main()
