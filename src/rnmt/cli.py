"""The `rnmt` command: one subcommand per pipeline stage, each what one Snakemake rule runs. Each package
holds its commands (`<package>/commands.py`: `cmd_*` functions calling the library and `add_parsers`);
this module assembles them and runs one."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from rnmt.io import InputError, os_error_message, report_error, separate_streams
from rnmt.machine import allocator
from rnmt.machine.switches import switch

log = logging.getLogger("rnmt")
# the packages whose commands.py add subcommands, in the order `rnmt --help` lists them
COMMANDS = ("data.commands", "parse.commands", "train.commands", "decode.commands", "evaluate.commands",
            "report.commands", "bench.commands")


def cmd_check_config(a: argparse.Namespace) -> None:
    from snakemake.utils import update_config

    from rnmt.config import load_yaml
    from rnmt.data.registry import check_local_files
    from rnmt.planning.plan import Plan

    config = load_yaml(a.config)
    for extra in a.configfile:
        update_config(config, load_yaml(extra))     # nested keys merge, as with snakemake --configfile
    plan = Plan(config, Path(a.root))
    plan.check_models()
    # the corpora this run trains on: a local one's folder and files must be there before any job starts
    check_local_files({**config, "corpora": plan.corpora_config}, plan.root, {c for c, _ in plan.variants})
    variants = ", ".join(f"{c}/{v}" for c, v in plan.variants)
    print(f"config OK: run {plan.run}, scale {plan.scale}, tables {', '.join(plan.tables)}, variants {variants}")


def cmd_explain(a: argparse.Namespace) -> None:
    from rnmt.planning.explain import explain_run

    print(explain_run(Path(a.root), a.run, a.variant, a.settings, a.corpus, a.scale, a.config, a.configfile, a.all))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rnmt", description="rnmt: recurrent NMT papers from raw corpora to their "
                                "tables. Each subcommand is one stage of the pipeline; `rnmt <command> -h` "
                                "says what it takes.")
    p.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    p.add_argument("--version", action=_Version, nargs=0, help="rnmt's version and, in a checkout, its git commit")
    sub = p.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        importlib.import_module(f"rnmt.{module}").add_parsers(sub)

    s = sub.add_parser("check-config", help="validate a config, its experiment files and every variant's model")
    s.add_argument("config", nargs="?", default="config.yaml", help="the config file (default: config.yaml)")
    s.add_argument("--configfile", action="append", default=[], help="overrides, as snakemake --configfile")
    s.add_argument("--root", default=".", help="the repository root (holds workflow/)")
    s.set_defaults(func=cmd_check_config)

    s = sub.add_parser("explain", help="where each setting of a run's variant comes from (file and key, weakest first)")
    s.add_argument("run", metavar="RUN", help="the run: its record results/RUN/config.yaml where built, else "
                                              "config.yaml with run RUN (and scale RUN where RUN names a scale)")
    s.add_argument("variant", metavar="VARIANT", help="a variant the run trains (a table row's `variant`)")
    s.add_argument("settings", metavar="SETTING", nargs="*", help="only these settings (e.g. lr batch_size)")
    s.add_argument("--corpus", default="", help="only the variant's models on this corpus (default: every corpus "
                                                "the run trains it on)")
    s.add_argument("--scale", default="", help="the scale, for a run not built yet (default: RUN if it names one, "
                                               "else config.yaml's)")
    s.add_argument("--config", default="config.yaml", help="the config file of a run not built yet")
    s.add_argument("--configfile", action="append", default=[], help="overrides, as snakemake --configfile")
    s.add_argument("--all", action="store_true", help="also the settings left at their defaults")
    s.add_argument("--root", default=".", help="the repository root (holds workflow/)")
    s.set_defaults(func=cmd_explain)
    for leaf in _leaves(p):                 # -q also after the subcommand, where a person types it
        leaf.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                          help="only warnings and errors")
    return p


class _Version(argparse.Action):
    """--version: the version and commit every metrics file records (read only when asked: git runs)."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from rnmt.provenance import provenance

        code = provenance()
        commit = (f" (git {code['git_commit'][:10]}{', with uncommitted changes' if code['git_dirty'] else ''})"
                  if code["git_commit"] else "")
        print(f"rnmt {code['rnmt_version']}{commit}")
        parser.exit()


def _lines_above_the_bar() -> contextlib.AbstractContextManager[object]:
    """On a terminal, log lines go above a progress bar instead of through it (tqdm's logging redirect)."""
    if sys.stderr.isatty():
        from tqdm.contrib.logging import logging_redirect_tqdm

        return logging_redirect_tqdm()
    return contextlib.nullcontext()


def _leaves(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    if sub is None:
        return [parser]
    return [leaf for p in dict.fromkeys(sub.choices.values()) for leaf in _leaves(p)]


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s: %(message)s", stream=sys.stderr)
    # sacrebleu logs at INFO what every score repeats (its signature); rnmt's paths taken are in the metrics
    # files (hardware.fast_paths) rather than in every job's log
    logging.getLogger("sacrebleu").setLevel(logging.WARNING)
    if not sys.stderr.isatty():
        # in a job's log file the libraries' progress bars (subword-nmt, stanza, mtdata) would be one line
        # of carriage-return fragments; rnmt logs its own progress as lines there instead
        os.environ.setdefault("TQDM_DISABLE", "1")
    allocator.keep_freed_memory()
    name = " ".join(a for a in (args.command, getattr(args, f"{args.command}_command", None)) if a)
    if switch("job") and separate_streams():
        # a workflow job: standard error is its log file, standard output Snakemake's console, where a
        # warning (test sentences in the training data, repeated pairs, vectors matching no word) is read
        console = logging.StreamHandler(sys.stdout)
        console.setLevel(logging.WARNING)
        console.setFormatter(logging.Formatter(f"rnmt {name}: warning: %(message)s"))
        logging.getLogger().addHandler(console)
    try:
        with _lines_above_the_bar():
            args.func(args)
    except InputError as e:
        report_error(f"rnmt {name}: error: {e}")
        return 2
    # What no reader of a file can foresee for every file it opens: a missing file, a folder, no permission,
    # a full disk, bytes that are not UTF-8. Each is the input's or the machine's, so it is reported as such.
    except OSError as e:
        report_error(f"rnmt {name}: error: {os_error_message(e)}")
        return 2
    except UnicodeDecodeError as e:
        files = [a for a in (argv if argv is not None else sys.argv[1:]) if os.path.isfile(a)]
        given = f"; the files given: {', '.join(files)}" if files else ""
        report_error(f"rnmt {name}: error: an input is not UTF-8 text ({e.reason} at byte {e.start}); convert "
                     f"it (iconv -f <its encoding> -t utf-8){given}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
