"""The `rnmt` command: one subcommand per pipeline stage, each what one Snakemake rule runs."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from rnmt import allocator
from rnmt.bench import BENCHMARKS
from rnmt.data.commands import add_parsers as add_corpus_parsers
from rnmt.decode.commands import add_parsers as add_decode_parsers
from rnmt.evaluate.commands import add_parsers as add_evaluate_parsers
from rnmt.io import InputError, report_error
from rnmt.parse.commands import add_parsers as add_parse_parsers

log = logging.getLogger("rnmt")
EXIT_INTERRUPTED = 75     # EX_TEMPFAIL: checkpoint saved, rerun to resume


def cmd_synth(a: argparse.Namespace) -> None:
    from rnmt.data.synthetic import LANGUAGE_SEED, write_corpus

    sizes = {"train": a.train, "dev": a.dev, "test": a.test}
    written = write_corpus(Path(a.out_dir), sizes, a.seed, a.language_seed or LANGUAGE_SEED, a.max_words)
    log.info("synthetic corpus in %s: %s", a.out_dir, written)


def cmd_tokenize(a: argparse.Namespace) -> None:
    from rnmt.data.tokenize import tokenize
    from rnmt.io import atomic_writer, read_lines

    lines = read_lines(a.input)
    with atomic_writer(a.output) as f:
        for line in lines:
            f.write(tokenize(line, a.lang, escape=not a.no_escape, normalize=not a.no_normalize,
                             lowercase=a.lowercase) + "\n")
    log.info("tokenized %d lines (%s) → %s", len(lines), a.lang, a.output)


def cmd_bpe_learn(a: argparse.Namespace) -> None:
    from rnmt.data import bpe

    bpe.learn(bpe.file_lines(a.inputs), a.codes, a.merges, a.min_frequency)
    log.info("learned up to %d BPE merges from %s → %s", a.merges, ", ".join(a.inputs), a.codes)


def cmd_bpe_apply(a: argparse.Namespace) -> None:
    from rnmt.data import bpe
    from rnmt.io import read_lines, write_lines

    seg = bpe.Segmenter(a.codes)
    write_lines(a.output, [seg(line) for line in read_lines(a.input)])


def cmd_vocab(a: argparse.Namespace) -> None:
    from rnmt.data.bpe import file_lines
    from rnmt.data.vocab import Vocab

    v = Vocab.build(file_lines([a.input]), max_size=a.max_size, min_count=a.min_count)
    v.save(a.output)
    log.info("vocabulary of %d entries → %s", len(v), a.output)


TRAIN_FILES = ("train-src", "train-tgt", "dev-src", "dev-tgt", "src-vocab", "tgt-vocab", "out-dir")


def cmd_train(a: argparse.Namespace) -> None:
    from rnmt.cluster import launch

    lease = None if launch.is_worker() else launch.lease_gpus(a.gpus)     # held until this process exits
    if a.gpus > 1 and not launch.is_worker():
        args = [*(["-q"] if a.quiet else []), "train", "--model", a.model, "--settings", a.settings]
        for name in TRAIN_FILES:
            args += [f"--{name}", getattr(a, name.replace("-", "_"))]
        sys.exit(launch.run_distributed(a.gpus, args))
    _train(a)
    del lease
    if launch.is_worker():
        launch.exit_worker(0)


def _train(a: argparse.Namespace) -> None:
    from rnmt.train.trainer import Trainer, TrainingDiverged, TrainingInterrupted, TrainSettings

    settings = TrainSettings.from_dict(json.loads(a.settings))
    model_config = json.loads(a.model)
    opt = {k: Path(v) if v else None for k, v in
           {"train_src_labels": a.train_src_labels, "dev_src_labels": a.dev_src_labels,
            "src_label_vocab": a.src_label_vocab}.items()}
    trainer = Trainer(model_config, settings, Path(a.train_src), Path(a.train_tgt), Path(a.dev_src),
                      Path(a.dev_tgt), Path(a.src_vocab), Path(a.tgt_vocab), Path(a.out_dir), **opt)
    try:
        m = trainer.run()
    except TrainingInterrupted as e:
        log.warning("interrupted: %s", e)
        sys.exit(EXIT_INTERRUPTED)
    except TrainingDiverged as e:
        raise InputError(str(e)) from None
    log.info("trained %d steps in %.0f s (%s); %.0f target words/s; best dev ppl %.3f at step %s",
             m["steps"], m["train_seconds"], m["stop_reason"], m["train_tgt_words_per_s"], m["best_dev_ppl"],
             m["best_step"])


def cmd_table(a: argparse.Namespace) -> None:
    from rnmt.plan import load_table
    from rnmt.report.tables import build

    table = load_table(a.experiment, a.corpus or None, a.max_seeds or None, a.scale_note)
    df = build(table, a.metrics, a.run, a.scale, a.csv, a.md, a.tex, a.gates, a.html, a.cells)
    log.info("table %s: %d cells → %s, %s", table.name, len(df), a.csv, a.md)


def cmd_figure(a: argparse.Namespace) -> None:
    from rnmt.plan import load_table
    from rnmt.report.figures import draw

    table = load_table(a.experiment, None, a.max_seeds or None)
    if a.curves:
        from rnmt.report.figures import curves

        curves(table, a.logs, a.output)
    else:
        draw(table, a.output, a.metrics, a.gates, a.logs)
    log.info("figure %s → %s", table.name, a.output)


def cmd_runs(a: argparse.Namespace) -> None:
    from rnmt.report.runs import write_runs

    df = write_runs(a.metrics, a.output)
    log.info("%d runs → %s", len(df), a.output)


def cmd_plot_curve(a: argparse.Namespace) -> None:
    from rnmt.report.curves import plot

    plot(a.log, a.output, a.title)


def cmd_plot_cost(a: argparse.Namespace) -> None:
    from rnmt.report.cost import plot_cost

    plot_cost(a.logs, a.output, a.name or None, a.smooth, a.title)
    log.info("training cost of %d run(s) → %s", len(a.logs), a.output)


def cmd_average_checkpoints(a: argparse.Namespace) -> None:
    from rnmt.train import checkpoint

    paths = []
    for given in map(Path, a.inputs):
        paths += checkpoint.validation_checkpoints(given) if given.is_dir() else [given]
    if a.last:
        paths = paths[-a.last:]
    payload = checkpoint.average(paths, a.output)
    log.info("averaged %d checkpoints (steps %s) → %s", len(paths),
             ", ".join(str(s) for s in payload["averaged_steps"]), a.output)


def cmd_params(a: argparse.Namespace) -> None:
    from rnmt.report.params import evaluate, to_csv

    results = evaluate(root=Path(a.root))
    if a.table:
        results = [r for r in results if r["table"] in a.table]
    sys.stdout.write(to_csv(results))


def cmd_check_config(a: argparse.Namespace) -> None:
    from snakemake.utils import update_config

    from rnmt.config import load_yaml
    from rnmt.data.registry import check_local_files
    from rnmt.plan import Plan

    config = load_yaml(a.config)
    for extra in a.configfile:
        update_config(config, load_yaml(extra))     # nested keys merge, as with snakemake --configfile
    plan = Plan(config, Path(a.root))
    plan.check_models()
    # the corpora this run trains on: a local one's folder and files must be there before any job starts
    check_local_files({**config, "corpora": plan.corpora_config}, plan.root, {c for c, _ in plan.variants})
    variants = ", ".join(f"{c}/{v}" for c, v in plan.variants)
    print(f"config OK: run {plan.run}, scale {plan.scale}, tables {', '.join(plan.tables)}, variants {variants}")


def cmd_bench(a: argparse.Namespace) -> None:
    from rnmt.bench.runner import run_benchmark

    for name in a.names:
        _, text = run_benchmark(name, a.out, a.quick, a.device, a.threads)
        print(text + "\n", flush=True)
        log.info("%s → %s/%s.csv", name, a.out, name)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rnmt", description=__doc__)
    p.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("synth", help="generate the synthetic language pair")
    s.add_argument("--out-dir", required=True)
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--language-seed", type=int, default=None)
    s.add_argument("--train", type=int, default=20000)
    s.add_argument("--dev", type=int, default=500)
    s.add_argument("--test", type=int, default=1000)
    s.add_argument("--max-words", type=int, default=None)
    s.set_defaults(func=cmd_synth)

    s = sub.add_parser("tokenize", help="normalise punctuation and Moses-tokenize a file")
    s.add_argument("--lang", required=True)
    s.add_argument("--no-escape", action="store_true")
    s.add_argument("--no-normalize", action="store_true")
    s.add_argument("--lowercase", action="store_true")
    s.add_argument("input")
    s.add_argument("output")
    s.set_defaults(func=cmd_tokenize)

    bpe = sub.add_parser("bpe", help="learn or apply BPE").add_subparsers(dest="bpe_command", required=True)
    s = bpe.add_parser("learn")
    s.add_argument("--merges", type=int, required=True)
    s.add_argument("--min-frequency", type=int, default=2)
    s.add_argument("--codes", required=True)
    s.add_argument("inputs", nargs="+")
    s.set_defaults(func=cmd_bpe_learn)
    s = bpe.add_parser("apply")
    s.add_argument("--codes", help="the codes file; omit for word level (lines pass unsegmented)")
    s.add_argument("input")
    s.add_argument("output")
    s.set_defaults(func=cmd_bpe_apply)

    s = sub.add_parser("vocab", help="build a vocabulary from a segmented file")
    s.add_argument("--max-size", type=int, default=None)
    s.add_argument("--min-count", type=int, default=1, help="leave out tokens seen fewer times")
    s.add_argument("input")
    s.add_argument("output")
    s.set_defaults(func=cmd_vocab)

    add_corpus_parsers(sub)
    add_parse_parsers(sub)

    s = sub.add_parser("train", help="train one model")
    s.add_argument("--model", required=True, help="model settings as JSON (arch, cell, sizes)")
    s.add_argument("--settings", required=True, help="training settings as JSON")
    for name in TRAIN_FILES:
        s.add_argument(f"--{name}", required=True)
    s.add_argument("--train-src-labels", help="source dependency labels, one per subword of --train-src")
    s.add_argument("--dev-src-labels", help="source dependency labels, one per subword of --dev-src")
    s.add_argument("--src-label-vocab", help="the label vocabulary (labels/<source>/vocab.lab)")
    s.add_argument("--gpus", type=int, default=0,
                   help="GPUs for this job (the rule's gpu resource): leased from the local slot pool outside "
                        "SLURM; more than 1 trains with that many torch.distributed processes (gloo on a CPU)")
    s.set_defaults(func=cmd_train)

    add_decode_parsers(sub)
    add_evaluate_parsers(sub)

    s = sub.add_parser("table", help="build a table's CSV, Markdown and LaTeX from metrics files")
    s.add_argument("--experiment", required=True)
    s.add_argument("--run", required=True)
    s.add_argument("--scale", required=True)
    s.add_argument("--corpus", default="", help="the corpus the table ran on at this scale")
    s.add_argument("--max-seeds", type=int, default=0, help="the scale's cap on seeds per row (0: none)")
    s.add_argument("--scale-note", default="", help="what the scale changes (config scales.<scale>.note)")
    s.add_argument("--csv", required=True)
    s.add_argument("--md", required=True)
    s.add_argument("--tex")
    s.add_argument("--html", help="the table as an HTML page (the report shows it)")
    s.add_argument("--gates", nargs="*", default=[], help="gate statistics (rnmt gates) of the rows' models")
    s.add_argument("--cells", nargs="*", default=[], help="cell counts (rnmt cell-counts) of a table of kind cells")
    s.add_argument("metrics", nargs="*")
    s.set_defaults(func=cmd_table)

    s = sub.add_parser("figure", help="draw a table's figure (gates, BLEU by length, training cost) as PNG")
    s.add_argument("--experiment", required=True)
    s.add_argument("--scale", default="")
    s.add_argument("--max-seeds", type=int, default=0, help="the scale's cap on seeds per row (0: none)")
    s.add_argument("--output", required=True)
    s.add_argument("--metrics", nargs="*", default=[])
    s.add_argument("--gates", nargs="*", default=[])
    s.add_argument("--logs", nargs="*", default=[], help="train.jsonl of the rows' models")
    s.add_argument("--curves", action="store_true", help="the rows' learning curves instead of the paper's figure")
    s.set_defaults(func=cmd_figure)

    s = sub.add_parser("runs", help="one CSV row per run (model + decoding) with every metric and setting")
    s.add_argument("--output", required=True)
    s.add_argument("metrics", nargs="*")
    s.set_defaults(func=cmd_runs)

    s = sub.add_parser("average-checkpoints", help="average the weights of checkpoints of one model (e.g. a run's "
                                                   "last validations, train setting keep_checkpoints)")
    s.add_argument("inputs", nargs="+", metavar="CHECKPOINT|MODEL_DIR",
                   help="checkpoint files, or a model folder (its checkpoints/step<N>.pt, oldest first)")
    s.add_argument("--last", type=int, default=0, help="only the last k of them (0: all)")
    s.add_argument("--output", required=True, help="the averaged checkpoint, read by rnmt translate like a model.pt")
    s.set_defaults(func=cmd_average_checkpoints)

    s = sub.add_parser("plot-curve", help="plot a training log's learning curve")
    s.add_argument("--title", default="")
    s.add_argument("log")
    s.add_argument("output")
    s.set_defaults(func=cmd_plot_curve)

    s = sub.add_parser("plot-cost", help="training cost per minibatch of several runs (UD paper, Figure 2)")
    s.add_argument("--output", required=True, help="the PNG to write")
    s.add_argument("--name", action="append", help="legend name of each log, in order (default: its folder)")
    s.add_argument("--smooth", type=int, default=5, help="moving-average window in logged minibatches (1: none)")
    s.add_argument("--title", default="Training cost per minibatch")
    s.add_argument("logs", nargs="+", help="train.jsonl of each run")
    s.set_defaults(func=cmd_plot_cost)

    s = sub.add_parser("params", help="parameter counts of the papers' rows, rebuilt at the papers' settings")
    s.add_argument("--table", action="append", help="only these tables (e.g. atr-table4)")
    s.add_argument("--root", default=".", help="the checkout whose systems and experiment files to read")
    s.set_defaults(func=cmd_params)

    s = sub.add_parser("bench", help="speed benchmarks: cells, train, decode, data (tables + CSVs)")
    s.add_argument("names", nargs="+", choices=BENCHMARKS, metavar="{" + ",".join(BENCHMARKS) + "}")
    s.add_argument("--quick", action="store_true", help="small sizes, under a minute each")
    s.add_argument("--out", default="results/bench", help="directory for <name>.csv")
    s.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:1, ...")
    s.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default); recorded per row")
    s.set_defaults(func=cmd_bench)

    s = sub.add_parser("check-config", help="validate a config, its experiment files and every variant's model")
    s.add_argument("config", nargs="?", default="config.yaml")
    s.add_argument("--configfile", action="append", default=[], help="overrides, as snakemake --configfile")
    s.add_argument("--root", default=".", help="the repository root (holds workflow/)")
    s.set_defaults(func=cmd_check_config)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s: %(message)s", stream=sys.stderr)
    if not sys.stderr.isatty():
        # in a job's log file the libraries' progress bars (subword-nmt, stanza, mtdata) would be one line
        # of carriage-return fragments; rnmt logs its own progress as lines there instead
        os.environ.setdefault("TQDM_DISABLE", "1")
    allocator.keep_freed_memory()
    try:
        args.func(args)
    except InputError as e:
        report_error(f"rnmt {args.command}: error: {e}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
