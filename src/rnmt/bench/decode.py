"""`rnmt bench decode`: decoding words/s and seconds per sentence at beam 1 (ATR Table 4's speed setting)
and beam 10 (the papers' beam), batched (64 sentences per batch, `rnmt translate`'s default) versus one
sentence at a time, for a single RNNSearch+ATR model and an ensemble of 4.

The models are freshly initialised (no checkpoint needed, so the benchmark runs anywhere); their
outputs are random but their work is the real one: every hypothesis runs until </s> or the length limit
(2·|source| + 10, the translate defaults). Words are output tokens.

`speedup_bound` puts the batched speed-up in proportion: both modes do the same matrix products
(the same hypotheses, one at a time in rows of `beam`), so batched decoding can take no less than its
product FLOPs (counted by FlopCounterMode on one batched run) at the measured matmul peak, and the
speed-up can be no more than the one-at-a-time seconds over that floor. On a CPU, where a beam of 10
already fills its products reasonably, that bound is what limits batching; on a GPU the one-at-a-time
loop is bound by kernel launches instead and the bound is loose.

Every row decodes with eager steps (`cuda_graphs` off). `--graphs` (CUDA) decodes the batched rows again
with each search step replayed as one CUDA graph (rnmt.decode.graphs): its sentences/s after a first pass that
captured the graphs (`graph_first_seconds`: that pass, captures included), and whether it found the eager
search's hypotheses.

`--tf32` (CUDA) decodes the batched rows again with the products torch hands to cuBLAS in TF32 (decode
setting `tf32`), replayed as graphs where `--graphs` is given: its sentences/s, over the same path's in
float32 (`tf32_speedup`), and the share of the sentences whose translation is float32's (`tf32_same_share`;
an untrained model's scores lie close together, so more may differ than a trained model's).

The issue's beam (10) before beam 1 and the single model before the ensemble, and with `progress` (the
command gives it) the rows are handed over after each (model, beam), so a run cut short by its time limit
(a GPU lease's call) leaves the CSV of what finished.

`--profile` runs each batched decode once more under torch's profiler (rnmt.bench.profile): the kernels
(CPU: leaf operators) it launched per sentence, the fraction of its unprofiled wall time the GPU was busy,
and the kinds of work that took most of that time (products, the search's top-k, softmax, ...); with
`--graphs` the same for the replayed decode. A GPU busy most of the time gains from fewer FLOPs, not from
fewer launches.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from rnmt.bench.profile import Trace, busy_fraction, trace
from rnmt.bench.timing import Peak, environment, measure
from rnmt.decode import graphs as decode_graphs
from rnmt.decode.ensemble import Ensemble
from rnmt.decode.translate import translate_ids
from rnmt.io import InputError
from rnmt.machine import matmul
from rnmt.models import build_model
from rnmt.models.base import Seq2Seq
from rnmt.report import paper_params


@dataclass(frozen=True)
class Config:
    emb: int
    hidden: int
    vocab: int
    sentences: int
    max_len: int


FULL = Config(emb=256, hidden=256, vocab=4000, sentences=32, max_len=20)
QUICK = Config(emb=64, hidden=64, vocab=1000, sentences=16, max_len=8)
# `--size paper`: ATR Table 4's RNNSearch+ATR (section 4.2: emb 620, hidden 1000, 40K vocabulary per side)
PAPER = Config(emb=620, hidden=1000, vocab=paper_params.vocabulary("atr"), sentences=32, max_len=30)
BATCH = 64


def models(cfg: Config, device: torch.device) -> dict[str, Seq2Seq]:
    members = []
    for seed in range(4):
        torch.manual_seed(seed)
        members.append(build_model("rnnsearch", cfg.vocab, cfg.vocab, emb=cfg.emb, hidden=cfg.hidden,
                                   cell="atr").to(device).eval())
    return {"RNNSearch+ATR": members[0], "ensemble of 4": Ensemble(members).eval()}


def sources(cfg: Config, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(4, cfg.vocab) for _ in range(rng.randint(cfg.max_len // 2, cfg.max_len))]
            for _ in range(cfg.sentences)]


def bench(device: torch.device, quick: bool = False, cfg: Config | None = None, size: str = "default",
          graphs: bool = False, profile: bool = False, tf32: bool = False,
          progress: Callable[[list[dict[str, Any]]], None] | None = None) -> list[dict[str, Any]]:
    """The rows (module docstring); `progress` is called with the finished rows after each (model, beam)."""
    if size not in ("default", "paper"):
        raise ValueError(f"bench decode: unknown size {size!r}; valid: default, paper")
    for option, on in (("--graphs replays CUDA graphs", graphs), ("--tf32 multiplies on CUDA's tensor cores", tf32)):
        if on and device.type != "cuda":
            raise InputError(f"bench decode {option}, and the device is {device.type}: give --device cuda on a "
                             f"machine with a GPU, or leave out {option.split()[0]}")
    cfg = cfg or (PAPER if size == "paper" else QUICK if quick else FULL)
    reps = 2 if quick else 3
    peak = Peak(device, quick)
    src = sources(cfg)
    rows = []
    for name, model in models(cfg, device).items():
        for beam in (10, 1):
            by_mode, hypotheses = {}, {}
            for mode, batch_size in (("batched", BATCH), ("one at a time", 1)):
                out: list[list[list[int]]] = []

                def decode(model: Seq2Seq = model, beam: int = beam, batch_size: int = batch_size,
                           out: list[list[list[int]]] = out) -> None:
                    out.append(translate_ids(model, src, beam=beam, batch_size=batch_size, device=device,
                                             cuda_graphs=False))

                translate_ids(model, src[:2], beam=beam, batch_size=batch_size, device=device,   # warm-up
                              cuda_graphs=False)
                t = measure(decode, device, warmup=0, reps=reps)
                words = sum(len(h) for h in out[-1])
                hypotheses[mode] = out[-1]
                by_mode[mode] = {"model": name, "beam": beam, "mode": mode, "batch_size": batch_size,
                                 "sentences": len(src), "words": words, "seconds": t.median,
                                 "words_per_s": words / t.median, "sentences_per_s": len(src) / t.median,
                                 "seconds_per_sentence": t.median / len(src), "reps": reps}
                if profile and mode == "batched":
                    by_mode[mode].update(profiled(trace(decode, device), t.median, len(src)))
            if graphs:
                by_mode["batched"].update(graphed(model, src, beam, device, reps, by_mode["batched"],
                                                  hypotheses["batched"], profile))
            if tf32:
                by_mode["batched"].update(in_tf32(model, src, beam, device, reps, by_mode["batched"],
                                                  hypotheses["batched"], graphs))
            speedup = by_mode["batched"]["sentences_per_s"] / by_mode["one at a time"]["sentences_per_s"]
            flops = batched_flops(model, src, beam, device)
            rows += [{**r, "size": size, "batched_speedup": speedup, "batched_gflop": flops / 1e9, "emb": cfg.emb,
                      "hidden": cfg.hidden, "vocab": cfg.vocab} for r in by_mode.values()]
            peak.sample()
            if progress is not None:
                progress(finished(rows, device, peak))
    return finished(rows, device, peak)


def finished(rows: list[dict[str, Any]], device: torch.device, peak: Peak) -> list[dict[str, Any]]:
    """The rows with the floor of batched decoding (its product FLOPs at the peak measured so far), the bound
    it puts on batching's speed-up, and the machine."""
    env = environment(device, peak)
    out = []
    for r in rows:
        floor = r["batched_gflop"] / peak.best
        one = next(o for o in rows if (o["model"], o["beam"], o["mode"]) == (r["model"], r["beam"], "one at a time"))
        out.append({**r, "batched_floor_seconds": floor, "speedup_bound": one["seconds"] / floor, **env})
    return out


def profiled(t: Trace, seconds: float, sentences: int, prefix: str = "") -> dict[str, Any]:
    """Profile columns of a decode whose unprofiled wall time was `seconds`."""
    return {f"{prefix}kernels_per_sentence": round(t.launches / sentences, 1),
            f"{prefix}gpu_busy_fraction": busy_fraction(t.busy_seconds, seconds),
            f"{prefix}time_by_kind": t.top()}


def graphed(model: Seq2Seq, src: list[list[int]], beam: int, device: torch.device, reps: int,
            eager: dict[str, Any], eager_hypotheses: list[list[int]], profile: bool = False) -> dict[str, Any]:
    """The batched decode again with its steps replayed as CUDA graphs: a first pass that captures them,
    then `reps` timed passes, against the eager batched row `eager` and its hypotheses (and, with
    `profile`, one profiled pass)."""
    out: list[list[list[int]]] = []

    def decode() -> None:
        out.append(translate_ids(model, src, beam=beam, batch_size=BATCH, device=device, cuda_graphs=True))

    graphed_decoder = decode_graphs.decoder(model, device)     # the one translate_ids will step with
    assert graphed_decoder is not None
    first = measure(decode, device, warmup=0, reps=1).median
    t = measure(decode, device, warmup=0, reps=reps)
    summary = graphed_decoder.summary()
    columns = profiled(trace(decode, device), t.median, len(src), "graph_") if profile else {}
    decode_graphs.release(model)
    return {**columns, "graph_sentences_per_s": len(src) / t.median, "graph_speedup": eager["seconds"] / t.median,
            "graph_first_seconds": first, "graph_captures": summary["graphs"],
            "graph_failed": "; ".join(summary["failed"].values()),
            "graph_same_output": out[-1] == eager_hypotheses}


def in_tf32(model: Seq2Seq, src: list[list[int]], beam: int, device: torch.device, reps: int,
            row: dict[str, Any], float32_hypotheses: list[list[int]], graphs: bool) -> dict[str, Any]:
    """The batched decode again with its products in TF32 (replayed as CUDA graphs where `graphs`), against
    the same path in float32 (`row`'s graphed columns where `graphs`, else its eager ones) and its hypotheses."""
    out: list[list[list[int]]] = []

    def decode() -> None:
        out.append(translate_ids(model, src, beam=beam, batch_size=BATCH, device=device, cuda_graphs=graphs,
                                 tf32=True))

    decode()                            # captures its graphs, which are other than float32's
    t = measure(decode, device, warmup=0, reps=reps)
    decode_graphs.release(model)
    same = sum(a == b for a, b in zip(out[-1], float32_hypotheses, strict=True)) / len(src)
    float32 = len(src) / row["graph_sentences_per_s"] if graphs else row["seconds"]
    return {"tf32_sentences_per_s": len(src) / t.median, "tf32_speedup": float32 / t.median,
            "tf32_same_share": same}


def batched_flops(model: Seq2Seq, src: list[list[int]], beam: int, device: torch.device) -> int:
    """Matrix-product FLOPs of one batched decode of `src` (torch's products, which FlopCounterMode sees)."""
    with matmul.backend("blas"), FlopCounterMode(display=False) as counter:
        translate_ids(model, src, beam=beam, batch_size=BATCH, device=device, cuda_graphs=False)
    return counter.get_total_flops()


COLUMNS = ("model", "beam", "mode", "words_per_s", "sentences_per_s", "seconds_per_sentence", "batched_speedup",
           "speedup_bound")
PROFILE_COLUMNS = ("kernels_per_sentence", "gpu_busy_fraction", "time_by_kind")
GRAPH_COLUMNS = ("graph_sentences_per_s", "graph_speedup", "graph_first_seconds", "graph_captures",
                 "graph_same_output", "graph_failed")
TF32_COLUMNS = ("tf32_sentences_per_s", "tf32_speedup", "tf32_same_share")
GRAPH_PROFILE_COLUMNS = ("graph_kernels_per_sentence", "graph_gpu_busy_fraction", "graph_time_by_kind")
