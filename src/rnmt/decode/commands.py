"""`rnmt translate`, `rnmt export` and `rnmt postprocess`: the command line of decoding (one Snakemake
rule each: translate, export, postprocess)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import logging
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rnmt.decode.settings import PENALTIES, DecodeSettings
from rnmt.io import InputError
from rnmt.settings import count

log = logging.getLogger("rnmt")


def cmd_translate(a: argparse.Namespace) -> None:
    import torch

    from rnmt.decode.settings import SEARCH_KEYS, DecodeSettings
    from rnmt.decode.translate import translate_file
    from rnmt.io import write_json
    from rnmt.machine import hardware

    if a.threads:
        torch.set_num_threads(a.threads)
    if bool(a.bundle) == bool(a.model):
        raise InputError("give either --bundle DIR (raw text in, detokenized text out) or --model M.pt (segmented "
                         "text in and out; repeat --model for an ensemble), not both or neither")
    try:
        settings = json.loads(a.settings) if a.settings else {}
    except json.JSONDecodeError as e:
        raise InputError(f"--settings takes the decoding settings as one JSON object: {e}") from None
    if not isinstance(settings, dict):
        raise InputError("--settings takes the decoding settings as one JSON object ({\"beam\": 5, ...})")
    parsed = DecodeSettings.from_dict(settings)
    given = {k: v for k, v in parsed.search().items() if k in settings}
    given.update({k: getattr(a, k) for k in SEARCH_KEYS if getattr(a, k) is not None and getattr(a, k) is not False})
    average_last = a.average_last if a.average_last is not None else parsed.average_last
    if a.bundle:
        if average_last:
            raise InputError("--average-last is for --model (a model folder's checkpoints); a bundle holds the "
                             "weights it was exported with (average first: rnmt average-checkpoints, then export)")
        _translate_bundle(a, hardware.pick_device(a.device), {**given, "cuda_graphs": parsed.cuda_graphs})
        return
    if a.nbest:
        raise InputError("--nbest needs --bundle (raw text in, n-best lists out); make one from these checkpoints "
                         "with `rnmt export`")
    if a.input == "-" or a.output == "-":
        raise InputError("with --model, translate reads and writes files (segmented text): give INPUT and OUTPUT; "
                         "for raw text on standard input use --bundle (rnmt export makes one)")
    with tempfile.TemporaryDirectory(prefix="rnmt-average-") as tmp:
        models, averaged = a.model, []
        if average_last:
            models, averaged = _averaged(a.model, average_last, Path(tmp))
        m = translate_file(models, a.input, a.output, hardware.pick_device(a.device), src_labels=a.src_labels,
                           speed_beams=a.speed_beams if a.metrics else (), cuda_graphs=parsed.cuda_graphs,
                           **given)
    if average_last:
        m["average_last"], m["averaged_steps"] = average_last, averaged
    m["settings"] = settings            # as asked: what a partial table compares with the run's now
    log.info("translated %d sentences in %.1f s (beam %d, %d model(s))", m["sentences"], m["decode_seconds"],
             m["beam"], len(a.model))
    if a.metrics:
        write_json(a.metrics, m)


def _averaged(models: list[str], last: int, folder: Path) -> tuple[list[str], list[list[int]]]:
    """Each model's last `last` validation checkpoints (checkpoints/ beside its model.pt) averaged into
    `folder`; → the averaged files and, per model, the steps averaged."""
    from rnmt.models import checkpoint

    out, steps = [], []
    for i, model in enumerate(models):
        kept = checkpoint.validation_checkpoints(Path(model).parent)
        if len(kept) < last:
            raise InputError(f"{model}: averaging its last {last} validation checkpoints needs {last}, but its "
                             f"folder keeps {len(kept)} (checkpoints/step<N>.pt); train with keep_checkpoints: "
                             f"{last} or more, or average fewer")
        path = folder / f"average{i}.pt"
        steps.append(checkpoint.average(kept[-last:], path)["averaged_steps"])
        log.info("%s: decoding the average of the checkpoints of steps %s", model, ", ".join(map(str, steps[-1])))
        out.append(str(path))
    return out, steps


def _translate_bundle(a: argparse.Namespace, device: Any, decode: dict[str, Any]) -> None:
    """Raw text in batches as it comes (standard input: what is there, so a pipe gets each answer once
    its line is written), each batch's translations written and flushed before the next is read."""
    from rnmt.decode.bundle import Bundle
    from rnmt.io import atomic_writer, decoded_lines

    translator = Bundle.load(a.bundle).translator(device, nbest=a.nbest, **decode)
    batch = translator.options["batch_size"]
    where = "standard input" if a.input == "-" else a.input
    n = 0
    with contextlib.ExitStack() as stack:
        out = sys.stdout if a.output == "-" else stack.enter_context(atomic_writer(a.output))
        for raw in _input_batches(a.input, batch):
            found = translator(list(decoded_lines(raw, where, n + 1)))
            if a.nbest:
                text = "".join(f"{n + i} ||| {hyp} ||| logp= {logp:.4f} ||| {score:.4f}\n"
                               for i, hyps in enumerate(found) for hyp, score, logp in hyps)
            else:
                text = "".join(line + "\n" for line in found)
            out.write(text)
            out.flush()
            n += len(raw)
    translator.warn_unknown()
    log.info("translated %d lines with %s", n, a.bundle)


def _input_batches(path: str, batch: int) -> Iterator[list[bytes]]:
    from rnmt.io import line_batches

    if path != "-":
        if not Path(path).is_file():
            raise InputError(f"{path}: file not found")
        with open(path, "rb") as f:
            yield from line_batches(f.fileno(), batch)
        return
    try:
        fd = sys.stdin.fileno()
    except (OSError, ValueError):               # standard input replaced by an object without a descriptor
        lines = iter(sys.stdin.buffer)
        while chunk := list(itertools.islice(lines, batch)):
            yield chunk
        return
    yield from line_batches(fd, batch)


def cmd_export(a: argparse.Namespace) -> None:
    from rnmt.decode.bundle import export

    try:
        preprocess, decode = json.loads(a.preprocess), json.loads(a.decode)
    except json.JSONDecodeError as e:
        raise InputError(f"--preprocess and --decode take JSON objects: {e}") from None
    if not isinstance(preprocess, dict) or not isinstance(decode, dict):
        raise InputError("--preprocess and --decode take JSON objects ({...}) of settings, e.g. "
                         "--preprocess '{\"lowercase\": false}'")
    path = export(a.out, a.model, a.src_lang, a.tgt_lang, preprocess, a.codes, a.truecase_model, a.detruecase,
                  decode)
    log.info("bundle of %d model(s) in %s", len(a.model), path.parent)


def cmd_postprocess(a: argparse.Namespace) -> None:
    from rnmt.data.tokenize import postprocess
    from rnmt.io import read_lines, write_lines

    done = [postprocess(line, a.lang, a.detruecase) for line in read_lines(a.input)]
    write_lines(a.tok_output, [tok for tok, _ in done])
    write_lines(a.output, [text for _, text in done])


def add_parsers(sub: Any) -> None:
    s = sub.add_parser("translate", help="translate raw text with a bundle, or a segmented file with checkpoints",
                       description="With --bundle (made by `rnmt export`): raw text from INPUT or standard input, "
                                   "detokenized translations to OUTPUT or standard output, decoding as the bundle "
                                   "says unless an option below overrides it. With --model: a BPE-segmented file "
                                   "in, segmented translations out.")
    s.add_argument("--bundle", help="a bundle folder (rnmt export; results/<run>/bundles/...)")
    s.add_argument("--model", action="append", help="a checkpoint; repeat the option for an ensemble")
    # decoding settings: all at once as JSON (what the workflow passes), or one by one (over --settings);
    # left out, the bundle's (--bundle) or DecodeSettings' defaults (--model) apply
    s.add_argument("--settings", help="decoding settings as one JSON object (DecodeSettings: beam, batch_size, ...)")
    doc = {f.name: f.metadata["doc"] for f in dataclasses.fields(DecodeSettings)}   # one meaning, one place
    s.add_argument("--beam", type=count(1), help=doc["beam"])
    s.add_argument("--batch-size", type=count(1), help=doc["batch_size"])
    s.add_argument("--length-penalty", choices=PENALTIES, help=doc["length_penalty"])
    s.add_argument("--alpha", type=float, help=doc["alpha"])
    s.add_argument("--max-len-ratio", type=float, help=doc["max_len_ratio"])
    s.add_argument("--max-len-extra", type=count(0), help="the extra of --max-len-ratio")
    s.add_argument("--average-last", type=count(0),
                   help="with --model: decode the average of each model's last K validation checkpoints "
                        "(its folder's checkpoints/, train setting keep_checkpoints) instead of the model file")
    s.add_argument("--greedy-floor", action="store_true", help=doc["greedy_floor"])
    s.add_argument("--tf32", action="store_true", help=doc["tf32"])
    s.add_argument("--threads", type=count(0), default=0, help=doc["threads"])
    s.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:1, ...")
    s.add_argument("--metrics", help="write decoding speed here (JSON)")
    s.add_argument("--speed-beams", type=count(1), nargs="*", default=[1],
                   help="also time decoding at these beams for the metrics (default: 1, ATR Table 4's setting)")
    s.add_argument("--src-labels", help="source dependency labels of the input, one per subword (factored models)")
    s.add_argument("--nbest", type=count(1), default=0,
                   help="with --bundle: each line's N best translations (N up to the beam), one a line as "
                        "`<line number from 0> ||| <translation> ||| logp= <log-probability> ||| <score>`, best "
                        "first; the score is the length-normalised one the search ranks by")
    s.add_argument("input", nargs="?", default="-", help="default: standard input (with --bundle)")
    s.add_argument("output", nargs="?", default="-", help="default: standard output (with --bundle)")
    s.set_defaults(func=cmd_translate)

    s = sub.add_parser("export", help="bundle a model or ensemble with its BPE codes and preprocessing settings")
    s.add_argument("--model", action="append", required=True, help="a checkpoint; repeat for an ensemble")
    s.add_argument("--out", required=True, help="the bundle's folder")
    s.add_argument("--src-lang", required=True, help="the source language (Moses tokenizer rules: en, de, ...)")
    s.add_argument("--tgt-lang", required=True, help="the target language (detokenizer rules)")
    s.add_argument("--preprocess", default="{}", help="the corpus' preprocess settings as JSON (config.yaml)")
    s.add_argument("--codes", help="the source's BPE codes (omit at word level)")
    s.add_argument("--truecase-model", help="the source's truecasing model, where the corpus truecases")
    s.add_argument("--detruecase", action="store_true", help="detruecase the output (a truecasing corpus)")
    s.add_argument("--decode", default="{}", help="decoding settings as JSON (beam, length_penalty, ...)")
    s.set_defaults(func=cmd_export)

    s = sub.add_parser("postprocess", help="remove BPE and detokenize")
    s.add_argument("--lang", required=True, help="the target language (Moses detokenizer rules)")
    s.add_argument("--tok-output", required=True, help="BPE removed, still tokenized")
    s.add_argument("--detruecase", action="store_true", help="upper-case sentence-initial words (truecased corpora)")
    s.add_argument("input", help="a translation's subword lines (BPE)")
    s.add_argument("output", help="the detokenized text")
    s.set_defaults(func=cmd_postprocess)
