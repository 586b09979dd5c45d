"""Every `rnmt` subcommand, given malformed arguments and files, ends in `rnmt <command>: error: ...` with
exit status 2 and never in a traceback. The subcommands are read from the command line's own parser, so
a new one is tried as soon as it exists; each of its required arguments gets, in turn, a file that does
not exist, a file of bytes that are not UTF-8, a UTF-8 file that is not what is asked (a truncated
JSON object), and a folder. Outputs go to fresh paths, and the values that are not files (a language, a
count, a choice) are valid, so that the file is what is wrong."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rnmt import cli

# (command, argument) pairs that a command writes rather than reads
OUTPUTS = {"output", "out_dir", "out_src", "out_tgt", "report", "csv", "md", "manifest", "out", "tok_output",
           ("bpe learn", "codes"), ("corpus truecase-train", "model"), ("parse download", "model_dir"),
           ("parse train-models", "model_dir"), ("record", "record")}
# values that are not files: valid, so that the file is what is wrong
PLAIN = {"lang": "en", "src_lang": "en", "tgt_lang": "en", "cell": "atr", "scale": "demo", "run": "r",
         "source": "synthetic:demo", ("record", "run"): None, "names": "no-such-corpus"}
# what a command's required arguments cannot be made malformed in: it reads no file (bench measures this
# machine, params rebuilds the papers' models, corpus list prints the registry, cell-counts counts a cell)
READS_NO_FILE = {"bench", "params", "corpus list", "cell-counts", "synth"}
# commands whose inputs are plain text of any content (a truncated JSON object is a line of text to them),
# and the one that reads bytes (chunks splits a file at line ends; the clean jobs decode it)
ANY_TEXT = {"tokenize", "bpe learn", "bpe apply", "vocab", "corpus assemble", "corpus chunks", "corpus clean",
            "corpus prepare-text", "corpus truecase-train", "corpus segment-train", "parse merge", "labels vocab",
            "postprocess", "score"}
ANY_BYTES = {"corpus chunks"}
# commands whose first complaint is rightly not the file: a registry name given as the file (download,
# pin, fetch), one chunk where three files make one (merge), neither --bundle nor --model (translate), a
# model hub that cannot be reached (parse download reads no file)
NAMES_ANOTHER_FAULT = {"corpus download", "corpus pin", "corpus fetch", "corpus merge", "translate", "parse download"}
# the options that keep a command off the network: a closed port on this machine stands for the hub
OFFLINE = {"parse download": ["--resources-url", "http://127.0.0.1:9/"]}
SCENARIOS = {
    "missing": None,
    "not UTF-8": b"\xff\xfe\x00{ not text\n\x80\x81\n",
    "wrong content": b'{"emb": [1, 2,\n',
    "a folder": "folder",
}


def leaves(parser: argparse.ArgumentParser,
           prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    if sub is None:
        yield " ".join(prefix), parser
        return
    for name, p in sub.choices.items():
        yield from leaves(p, (*prefix, name))


COMMANDS = dict(leaves(cli.parser()))


def argv(name: str, parser: argparse.ArgumentParser, bad: str, out: Path) -> list[str]:
    """The command with every required argument given: inputs `bad`, outputs fresh paths under `out`."""
    args = name.split()
    positional: list[str] = []
    for action in parser._actions:
        if action.dest == "help" or (action.option_strings and not action.required):
            continue
        dest = action.dest
        if action.choices:
            value = next(iter(action.choices))
        elif getattr(action.type, "__name__", "") == "count":
            value = "1"
        elif (name, dest) in PLAIN or (dest in PLAIN and (name, dest) not in OUTPUTS):
            value = PLAIN.get((name, dest), PLAIN.get(dest)) or bad
        elif dest in OUTPUTS or (name, dest) in OUTPUTS:
            value = str(out / dest)
        else:
            value = bad
        if action.option_strings:
            args += [action.option_strings[0], value]
        else:
            positional.append(value)
    return [*args, *(["--"] if positional else []), *positional]


CASES = [(name, scenario) for name in COMMANDS if name not in READS_NO_FILE for scenario in SCENARIOS]


@pytest.mark.parametrize(("name", "scenario"), CASES, ids=[f"{n}-{s}".replace(" ", "_") for n, s in CASES])
def test_every_command_given_a_malformed_file_names_it_without_a_traceback(
        name: str, scenario: str, tmp_path: Path, command: Callable[..., tuple[int, str]], record) -> None:
    record.bad_input(f"rnmt {name} given {scenario}")
    content = SCENARIOS[scenario]
    if content is None:
        bad = tmp_path / "absent" / "input.txt"
    elif content == "folder":
        bad = tmp_path / "a-folder"
        bad.mkdir()
    else:
        bad = tmp_path / "input.txt"
        bad.write_bytes(content)
    args = argv(name, COMMANDS[name], str(bad), tmp_path / "out")
    args[len(name.split()):len(name.split())] = OFFLINE.get(name, [])
    try:
        code, err = command(*args, stdin=b"\xff\xfe not UTF-8\n")
    except SystemExit as e:                 # argparse's own errors exit 2 with the usage
        code, err = e.code, ""
    accepted = (scenario == "wrong content" and name in ANY_TEXT) or (scenario == "not UTF-8" and name in ANY_BYTES)
    if accepted and code == 0:
        return                              # what the command reads: it ran, and no traceback
    assert code == 2, f"rnmt {' '.join(args)}: exit {code}, expected an error naming the input\n{err}"
    if err:
        assert f"rnmt {name}: error:" in err, err
        if scenario != "wrong content" and name not in NAMES_ANOTHER_FAULT:   # it names the file at fault
            assert str(bad) in err or scenario == "not UTF-8" and "not UTF-8" in err, err


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_refuses_an_unknown_option_with_its_usage(
        name: str, command: Callable[..., tuple[int, str]], capsys: pytest.CaptureFixture[str], record) -> None:
    record.bad_input(f"rnmt {name} --no-such-option")
    with pytest.raises(SystemExit) as e:
        command(*name.split(), "--no-such-option")
    assert e.value.code == 2
    assert "unrecognized arguments: --no-such-option" in capsys.readouterr().err or e.value.code == 2


def test_the_error_reaches_the_console_when_the_log_is_on_a_full_disk(small_disk: Path, tmp_path: Path,
                                                                      record) -> None:
    """A job's standard error is its log file; when that file's disk is full the message must still reach
    standard output, which Snakemake shows on the console (it used to show only 'exit status 1')."""
    import subprocess

    from faults.faultlib import ROOT, fill

    record.fault("the job's log file on a full disk while the job fails")
    log = small_disk / "job.log"
    fill(small_disk, leave=0)
    missing = tmp_path / "absent.txt"
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT / "src")}
    with open(log, "w") as err:
        got = subprocess.run([sys.executable, "-m", "rnmt", "tokenize", "--lang", "en", str(missing),
                              str(tmp_path / "out.txt")], stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                             timeout=120)
    assert got.returncode == 2
    assert f"rnmt tokenize: error: {missing}: file not found" in got.stdout
