"""rnmt against OpenNMT-py 3.5.1 on the same BPE data, threads and training time; one CSV.

    python benchmarks/peer/peer.py --data results/mini/data/multi30k-en-de --minutes 20

The data folder is one the pipeline prepared (`snakemake --cores 2 results/mini/data/multi30k-en-de/vocab.src
--config scale=mini run=mini`): both tools train on its bpe/train.* and decode the first test set of its
bpe/test.src (Multi30k: the 2016 Flickr set). Systems train two at a time, side by side, one thread each:
OpenNMT-py's GRU beside rnmt's `stacked` GRU (the same architecture: bidirectional GRU encoder, input
feeding, MLP attention), then rnmt's RNNSearch+GRU beside RNNSearch+ATR. Every system gets the same
training time (optimisation only: rnmt's `max_minutes`; OpenNMT-py runs without validation and is stopped
after that time, keeping its last checkpoint), the same optimiser (Adam, lr 0.002, batches of 64 sentences,
clipping 5, label smoothing 0.1, dropout 0.3, uniform ±0.08), then decodes alone with beam 5 and no length
penalty. Both outputs go through the same `rnmt postprocess` and the same sacrebleu call.

Each system is scored twice: its last checkpoint (as each tool would leave it) and the average of its last
`--average` checkpoints, 100 steps apart in both tools (OpenNMT-py's `onmt_average_models`, rnmt's
`average-checkpoints` over the dev-loss validations it keeps every 100 steps). At a constant learning rate
a model moves by a BLEU point or more in 100 steps, so the averaged score is the steadier comparison.

rnmt trains with its defaults, bfloat16 autocast included where the CPU multiplies bfloat16 in hardware
(AVX512-BF16 or AMX; the CSV's train_precision column says which); OpenNMT-py 3.5.1 has no CPU mixed
precision and trains in float32. Decoding is float32 for both.

OpenNMT-py lives in its own virtual environment (benchmarks/peer/.venv, made on first use). Its wheel asks
for torch < 2.3, which PyPI serves only as a CUDA build of several GB; the environment takes the same CPU
torch as rnmt's instead and installs OpenNMT-py without its pin (both tools then run on one torch).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
VENV = HERE / ".venv"
ONMT = "OpenNMT-py==3.5.1"
# OpenNMT-py's imports at start-up (its wheel's dependencies, less torch and the ones only its server uses)
ONMT_DEPS = ["configargparse", "pyyaml", "sacrebleu", "six", "pyonmttok<2", "rapidfuzz", "pyahocorasick",
             "fasttext-wheel", "spacy", "tensorboard"]
EMB = HIDDEN = 256
TRAIN = {"optimizer": "adam", "lr": 0.002, "batch_size": 64, "clip": 5.0, "label_smoothing": 0.1,
         "init": "uniform", "init_scale": 0.08, "threads": 1, "device": "cpu", "max_len": 100}
RNMT_SYSTEMS = {
    "rnmt stacked GRU": {"arch": "stacked", "cell": "gru", "layers": 1},
    "rnmt RNNSearch+GRU": {"arch": "rnnsearch", "cell": "gru", "tie_output": True},
    "rnmt RNNSearch+ATR": {"arch": "rnnsearch", "cell": "atr", "tie_output": True},
}
PAIRS = [("OpenNMT-py GRU", "rnmt stacked GRU"), ("rnmt RNNSearch+GRU", "rnmt RNNSearch+ATR")]
BASELINE = "OpenNMT-py GRU"


def sh(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    print("+", " ".join(map(str, cmd)), flush=True)
    return subprocess.run([str(c) for c in cmd], check=True, text=True, **kw)


def onmt_env() -> Path:
    """The OpenNMT-py virtual environment's bin folder, made on first use."""
    bin_ = VENV / "bin"
    if not (bin_ / "onmt_train").is_file():
        sh([sys.executable, "-m", "venv", VENV])
        sh([bin_ / "pip", "install", "--quiet", f"torch=={torch_version()}"])
        sh([bin_ / "pip", "install", "--quiet", "--no-deps", ONMT])
        sh([bin_ / "pip", "install", "--quiet", *ONMT_DEPS])
    return bin_


def cpu_model() -> str:
    sys.path.insert(0, str(ROOT / "src"))
    from rnmt.machine.hardware import cpu_model as model

    return model()


def torch_version() -> str:
    import torch

    return torch.__version__.split("+")[0]


def one_thread() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}


def first_test_set(data: Path, work: Path, limit: int = 0) -> tuple[Path, Path, int]:
    """The BPE source and raw reference of the first test set of the merged test split (its first `limit`
    sentences where given)."""
    manifest = json.loads((data / "raw/test.json").read_text())
    part = manifest["parts"][0]
    n = min(int(part["lines"]), limit or int(part["lines"]))
    src, ref = work / "test.src", work / "test.ref"
    src.write_text("".join((data / "bpe/test.src").read_text(encoding="utf-8").splitlines(True)[:n]),
                   encoding="utf-8")
    ref.write_text("".join((ROOT / part["tgt"]).read_text(encoding="utf-8").splitlines(True)[:n]), encoding="utf-8")
    return src, ref, n


# ---- OpenNMT-py ------------------------------------------------------------------------------------

def onmt_config(data: Path, work: Path, keep: int) -> Path:
    cfg = {
        "save_data": str(work / "onmt"), "src_vocab": str(work / "onmt.vocab.src"),
        "tgt_vocab": str(work / "onmt.vocab.tgt"), "overwrite": True, "src_vocab_size": 100000,
        "tgt_vocab_size": 100000, "data": {"corpus_1": {"path_src": str(data / "bpe/train.src"),
                                                        "path_tgt": str(data / "bpe/train.tgt")}},
        "transforms": ["filtertoolong"], "src_seq_length": TRAIN["max_len"], "tgt_seq_length": TRAIN["max_len"],
        "encoder_type": "brnn", "decoder_type": "rnn", "rnn_type": "GRU", "layers": 1, "hidden_size": HIDDEN,
        "word_vec_size": EMB, "global_attention": "mlp", "input_feed": 1, "dropout": [0.3],
        "optim": "adam", "learning_rate": TRAIN["lr"], "max_grad_norm": TRAIN["clip"], "param_init": 0.08,
        "label_smoothing": TRAIN["label_smoothing"], "batch_size": TRAIN["batch_size"], "batch_type": "sents",
        "valid_batch_size": 64, "train_steps": 10_000_000, "valid_steps": 10_000_000, "report_every": 50,
        "save_checkpoint_steps": 100, "keep_checkpoint": keep, "save_model": str(work / "onmt-model"), "seed": 1,
        "world_size": 1, "gpu_ranks": [], "num_workers": 0,
        # about one pass of Multi30k a bucket (the default, 262,144 examples, reads the corpus nine times
        # before the first batch)
        "bucket_size": 32768,
    }
    import yaml

    path = work / "onmt.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def start_onmt(data: Path, work: Path, keep: int) -> subprocess.Popen[str]:
    bin_ = onmt_env()
    cfg = onmt_config(data, work, keep)
    sh([bin_ / "onmt_build_vocab", "-config", cfg, "-n_sample", "-1"], env=one_thread(),
       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(work / "onmt-train.log", "w") as log:       # the child keeps its own copy of the file
        return subprocess.Popen([str(bin_ / "onmt_train"), "-config", str(cfg)], env=one_thread(), stdout=log,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)


REPORT = re.compile(r"Step (\d+)/.*?; (\d+)/\s*(\d+) tok/s;\s+(\d+) sec")


def onmt_train_metrics(work: Path) -> dict[str, Any]:
    """Steps, parameters and target tokens/s (time-weighted over its report windows) from its log."""
    text = (work / "onmt-train.log").read_text()
    windows = [(int(s), float(tgt), float(sec)) for s, _, tgt, sec in REPORT.findall(text)]
    params = int(re.search(r"\* number of parameters: (\d+)", text).group(1))
    tokens, secs, last = 0.0, 0.0, 0.0
    for _, rate, sec in windows:
        tokens += rate * (sec - last)
        secs, last = sec, sec
    ckpts = sorted(work.glob("onmt-model_step_*.pt"), key=lambda p: int(p.stem.rsplit("_", 1)[1]))
    if not ckpts:
        sys.exit(f"OpenNMT-py saved no checkpoint in the training time; see {work / 'onmt-train.log'}")
    return {"params": params, "steps": int(ckpts[-1].stem.rsplit("_", 1)[1]),
            "tgt_tokens_per_s": tokens / secs if secs else 0.0, "model": str(ckpts[-1]), "precision": "float32",
            "checkpoints": [str(c) for c in ckpts]}


def onmt_average(checkpoints: list[str], k: int, out: Path) -> str:
    bin_ = onmt_env()
    env = {**one_thread(), "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
    sh([bin_ / "onmt_average_models", "-models", *checkpoints[-k:], "-output", out], env=env,
       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return str(out)


def onmt_translate(model: str, src: Path, out: Path) -> float:
    bin_ = onmt_env()
    # OpenNMT-py 3.5.1 pickles its options into its checkpoints, which torch >= 2.6 refuses to load by default;
    # these are the checkpoints it just wrote
    env = {**one_thread(), "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
    t0 = time.perf_counter()
    sh([bin_ / "onmt_translate", "-model", model, "-src", src, "-output", out, "-beam_size", 5, "-batch_size", 64,
        "-max_length", 100, "-gpu", -1], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


# ---- rnmt ------------------------------------------------------------------------------------------

def start_rnmt(name: str, data: Path, work: Path, minutes: float, keep: int) -> subprocess.Popen[str]:
    model = {**RNMT_SYSTEMS[name], "emb": EMB, "hidden": HIDDEN, "dropout": 0.3}
    # a dev-loss validation every 100 steps keeps the checkpoints to average (OpenNMT-py saves every 100);
    # validation time is not training time
    settings = {**TRAIN, "max_minutes": minutes, "max_steps": 0, "max_epochs": 1000, "valid_every": 100,
                "keep_checkpoints": keep, "valid_bleu": False, "log_every": 50, "resume": False}
    out = work / slug(name)
    cmd = [sys.executable, "-m", "rnmt", "train", "--model", json.dumps(model), "--settings", json.dumps(settings),
           "--train-src", data / "bpe/train.src", "--train-tgt", data / "bpe/train.tgt",
           "--dev-src", data / "bpe/dev.src", "--dev-tgt", data / "bpe/dev.tgt",
           "--src-vocab", data / "vocab.src", "--tgt-vocab", data / "vocab.tgt", "--out-dir", out]
    with open(work / f"{slug(name)}-train.log", "w") as log:
        return subprocess.Popen([str(c) for c in cmd], env=one_thread(), stdout=log, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)


def rnmt_train_metrics(name: str, work: Path) -> dict[str, Any]:
    m = json.loads((work / slug(name) / "train.json").read_text())
    return {"params": m["params"], "steps": m["steps"], "tgt_tokens_per_s": m["train_tgt_tokens_per_s"],
            "model": str(work / slug(name) / "last.pt"),
            "precision": "bfloat16 autocast" if m["hardware"].get("bf16_autocast") else "float32"}


def rnmt_average(name: str, work: Path, k: int) -> str:
    out = work / slug(name) / f"average{k}.pt"
    sh([sys.executable, "-m", "rnmt", "average-checkpoints", work / slug(name), "--last", k, "--output", out],
       env=one_thread(), stderr=subprocess.DEVNULL)
    return str(out)


def rnmt_translate(model: str, src: Path, out: Path) -> float:
    t0 = time.perf_counter()
    sh([sys.executable, "-m", "rnmt", "translate", "--model", model, "--beam", 5, "--batch-size", 64,
        "--length-penalty", "none", "--threads", 1, "--device", "cpu", src, out], env=one_thread(),
       stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


# ---- the comparison --------------------------------------------------------------------------------

def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def train_pair(pair: tuple[str, str], data: Path, work: Path, minutes: float, keep: int) -> None:
    """Two systems side by side for the same training time."""
    procs = {}
    for name in pair:
        procs[name] = (start_onmt(data, work, keep) if name == BASELINE
                       else start_rnmt(name, data, work, minutes, keep))
    t0 = time.monotonic()
    if BASELINE in procs:
        while time.monotonic() - t0 < 60 * minutes and procs[BASELINE].poll() is None:
            time.sleep(5)
        os.killpg(procs[BASELINE].pid, signal.SIGTERM)
    for name, p in procs.items():
        if p.wait() not in (0, -signal.SIGTERM) and name != BASELINE:
            sys.exit(f"{name}: training failed; see {work / slug(name)}-train.log")


def score(hyp_bpe: Path, ref: Path, lang: str, truecased: bool) -> float:
    import sacrebleu

    txt = hyp_bpe.with_suffix(".txt")
    sh([sys.executable, "-m", "rnmt", "postprocess", "--lang", lang, *(["--detruecase"] if truecased else []),
        "--tok-output", hyp_bpe.with_suffix(".tok"), hyp_bpe, txt], env=one_thread(), stderr=subprocess.DEVNULL)
    hyps = txt.read_text(encoding="utf-8").splitlines()
    refs = ref.read_text(encoding="utf-8").splitlines()
    return sacrebleu.corpus_bleu(hyps, [refs]).score


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="a prepared corpus folder, results/<run>/data/<corpus>")
    ap.add_argument("--minutes", type=float, default=20.0, help="training time of every system")
    ap.add_argument("--tgt-lang", default="de")
    ap.add_argument("--sentences", type=int, default=0, help="decode only this many test sentences (0: all)")
    ap.add_argument("--average", type=int, default=5, help="also score the average of the last k checkpoints")
    ap.add_argument("--work", type=Path, default=None, help="default: results/peer/<corpus>")
    ap.add_argument("--out", type=Path, default=None, help="default: benchmarks/peer/results-<corpus>.csv")
    a = ap.parse_args()
    data = a.data.resolve()
    work = (a.work or ROOT / "results/peer" / data.name).resolve()
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    truecased = (data / "truecase.tgt").is_file()
    src, ref, n = first_test_set(data, work, a.sentences)
    for pair in PAIRS:
        train_pair(pair, data, work, a.minutes, max(a.average, 2))
    rows = []
    avg = f"bleu_avg{a.average}"
    for name in [n_ for pair in PAIRS for n_ in pair]:
        onmt = name == BASELINE
        m = onmt_train_metrics(work) if onmt else rnmt_train_metrics(name, work)
        translate = onmt_translate if onmt else rnmt_translate
        hyp = work / f"{slug(name)}.test.bpe"
        secs = translate(m["model"], src, hyp)
        row = {"system": name, "tool": "OpenNMT-py 3.5.1" if onmt else "rnmt",
               "params_m": round(m["params"] / 1e6, 3), "train_minutes": a.minutes, "steps": m["steps"],
               "train_precision": m["precision"], "train_tgt_tokens_per_s": round(m["tgt_tokens_per_s"], 1),
               "decode_sentences": n, "decode_seconds": round(secs, 2),
               "bleu": round(score(hyp, ref, a.tgt_lang, truecased), 2)}
        if a.average > 1:
            averaged = (onmt_average(m["checkpoints"], a.average, work / "onmt-average.pt") if onmt
                        else rnmt_average(name, work, a.average))
            hyp = work / f"{slug(name)}.average.test.bpe"
            translate(averaged, src, hyp)
            row[avg] = round(score(hyp, ref, a.tgt_lang, truecased), 2)
        rows.append(row)
    base = next(r for r in rows if r["system"] == BASELINE)
    for r in rows:
        r["train_speed_ratio"] = round(r["train_tgt_tokens_per_s"] / base["train_tgt_tokens_per_s"], 3)
        r["decode_speed_ratio"] = round(base["decode_seconds"] / r["decode_seconds"], 3)
        r["bleu_minus_baseline"] = round(r["bleu"] - base["bleu"], 2)
        if avg in r:
            r[f"{avg}_minus_baseline"] = round(r[avg] - base[avg], 2)
        r.update(threads=1, beam=5, corpus=data.name, cpu=cpu_model(), torch=torch_version())
    out = a.out or HERE / f"results-{data.name}.csv"
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    cols = ["system", "params_m", "steps", "train_tgt_tokens_per_s", "train_speed_ratio", "decode_seconds",
            "decode_speed_ratio", "bleu", "bleu_minus_baseline", *([avg, f"{avg}_minus_baseline"] if a.average > 1
                                                                   else [])]
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(str(r[c]) for c in cols))
    print(f"→ {out}")


if __name__ == "__main__":
    main()
