"""`rnmt train` (one training job) and `rnmt average-checkpoints`: the command line of training."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from rnmt.io import InputError
from rnmt.settings import count, json_object

log = logging.getLogger("rnmt")
TRAIN_FILES = ("train-src", "train-tgt", "dev-src", "dev-tgt", "src-vocab", "tgt-vocab", "out-dir")
LABEL_FILES = ("train-src-labels", "dev-src-labels", "src-label-vocab")     # the factored models' (optional)
OPTIONAL_FILES = (*LABEL_FILES, "dev-ref")


def cmd_train(a: argparse.Namespace) -> None:
    from rnmt.cluster import launch

    lease = None if launch.is_worker() else launch.lease_gpus(a.gpus)     # held until this process exits
    if a.gpus > 1 and not launch.is_worker():
        args = [*(["-q"] if a.quiet else []), "train", "--model", json.dumps(a.model), "--settings",
                json.dumps(a.settings)]
        for name in TRAIN_FILES:
            args += [f"--{name}", getattr(a, name.replace("-", "_"))]
        for name in OPTIONAL_FILES:
            if getattr(a, name.replace("-", "_")):
                args += [f"--{name}", getattr(a, name.replace("-", "_"))]
        sys.exit(launch.run_distributed(a.gpus, args))
    _train(a)
    del lease
    if launch.is_worker():
        launch.exit_worker(0)


def _train(a: argparse.Namespace) -> None:
    from rnmt.train.trainer import Trainer, TrainingDiverged, TrainingInterrupted, TrainSettings

    settings = TrainSettings.from_dict(a.settings)
    model_config = a.model
    opt = {k: Path(v) if v else None for k, v in
           {"train_src_labels": a.train_src_labels, "dev_src_labels": a.dev_src_labels,
            "src_label_vocab": a.src_label_vocab, "dev_ref": a.dev_ref}.items()}
    trainer = Trainer(model_config, settings, Path(a.train_src), Path(a.train_tgt), Path(a.dev_src),
                      Path(a.dev_tgt), Path(a.src_vocab), Path(a.tgt_vocab), Path(a.out_dir), **opt)
    try:
        m = trainer.run()
    except TrainingInterrupted as e:
        from rnmt.cluster.launch import EXIT_INTERRUPTED

        log.warning("interrupted: %s", e)
        sys.exit(EXIT_INTERRUPTED)
    except TrainingDiverged as e:
        raise InputError(str(e)) from None
    log.info("trained %d steps in %.0f s (%s); %.0f target words/s; best dev ppl %.3f at step %s",
             m["steps"], m["train_seconds"], m["stop_reason"], m["train_tgt_words_per_s"], m["best_dev_ppl"],
             m["best_step"])


def cmd_average_checkpoints(a: argparse.Namespace) -> None:
    from rnmt.models import checkpoint

    paths = []
    for given in map(Path, a.inputs):
        found = checkpoint.validation_checkpoints(given) if given.is_dir() else [given]
        if not found:
            raise InputError(f"{given}: a folder without validation checkpoints (checkpoints/step<K>.pt): give "
                             "checkpoint files, or a model folder whose training kept some (train setting "
                             "keep_checkpoints: k)")
        paths += found
    if a.last:
        paths = paths[-a.last:]
    payload = checkpoint.average(paths, a.output)
    log.info("averaged %d checkpoints (steps %s) → %s", len(paths),
             ", ".join(str(s) for s in payload["averaged_steps"]), a.output)


def add_parsers(sub: Any) -> None:
    s = sub.add_parser("train", help="train one model")
    s.add_argument("--model", required=True, type=json_object, help="model settings as JSON (arch, cell, sizes)")
    s.add_argument("--settings", required=True, type=json_object, help="training settings as JSON")
    meaning = {"train-src": "the segmented (BPE) training source", "train-tgt": "the segmented training target",
               "dev-src": "the segmented dev source", "dev-tgt": "the segmented dev target",
               "src-vocab": "the source vocabulary (rnmt vocab)", "tgt-vocab": "the target vocabulary",
               "out-dir": "the model folder (model.pt, last.pt, train.jsonl, train.json)"}
    for name in TRAIN_FILES:
        s.add_argument(f"--{name}", required=True, help=meaning[name])
    s.add_argument("--train-src-labels", help="source dependency labels, one per subword of --train-src")
    s.add_argument("--dev-src-labels", help="source dependency labels, one per subword of --dev-src")
    s.add_argument("--src-label-vocab", help="the label vocabulary (labels/<source>/vocab.lab)")
    s.add_argument("--dev-ref", help="the tokenized dev reference: its extra references <FILE>.ref1, .ref2, ... "
                                     "(a multi-reference dev set, NIST MT06's 4) join --dev-tgt in the dev BLEU")
    s.add_argument("--gpus", type=count(0), default=0,
                   help="GPUs for this job (the rule's gpu resource): leased from the local slot pool outside "
                        "SLURM; more than 1 trains with that many torch.distributed processes (gloo on a CPU)")
    s.set_defaults(func=cmd_train)

    s = sub.add_parser("average-checkpoints", help="average the weights of checkpoints of one model (e.g. a run's "
                                                   "last validations, train setting keep_checkpoints)")
    s.add_argument("inputs", nargs="+", metavar="CHECKPOINT|MODEL_DIR",
                   help="checkpoint files, or a model folder (its checkpoints/step<N>.pt, oldest first)")
    s.add_argument("--last", type=count(0), default=0, help="only the last k of them (0: all)")
    s.add_argument("--output", required=True, help="the averaged checkpoint, read by rnmt translate like a model.pt")
    s.set_defaults(func=cmd_average_checkpoints)
