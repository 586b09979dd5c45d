"""`rnmt translate`, `rnmt export` and `rnmt postprocess`: the command line of decoding (one Snakemake
rule each: translate, export, postprocess)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from rnmt.decode.settings import PENALTIES
from rnmt.io import InputError
from rnmt.settings import count

log = logging.getLogger("rnmt")


def cmd_translate(a: argparse.Namespace) -> None:
    import torch

    from rnmt import hardware
    from rnmt.decode.settings import SEARCH_KEYS, DecodeSettings
    from rnmt.decode.translate import translate_file
    from rnmt.io import write_json

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
    given = {k: v for k, v in DecodeSettings.from_dict(settings).search().items() if k in settings}
    given.update({k: getattr(a, k) for k in SEARCH_KEYS if getattr(a, k) is not None and getattr(a, k) is not False})
    if a.bundle:
        _translate_bundle(a, hardware.pick_device(a.device), given)
        return
    if a.input == "-" or a.output == "-":
        raise InputError("with --model, translate reads and writes files (segmented text): give INPUT and OUTPUT; "
                         "for raw text on standard input use --bundle (rnmt export makes one)")
    m = translate_file(a.model, a.input, a.output, hardware.pick_device(a.device), src_labels=a.src_labels,
                       speed_beams=a.speed_beams if a.metrics else (), **given)
    log.info("translated %d sentences in %.1f s (beam %d, %d model(s))", m["sentences"], m["decode_seconds"],
             m["beam"], len(a.model))
    if a.metrics:
        write_json(a.metrics, m)


def _translate_bundle(a: argparse.Namespace, device: Any, decode: dict[str, Any]) -> None:
    from rnmt.bundle import Bundle
    from rnmt.io import decoded_lines, read_lines, write_lines

    bundle = Bundle.load(a.bundle)
    lines = list(decoded_lines(sys.stdin.buffer, "standard input")) if a.input == "-" else read_lines(a.input)
    out = bundle.translate(lines, device, **decode)
    if a.output == "-":
        sys.stdout.write("".join(line + "\n" for line in out))
        sys.stdout.flush()
    else:
        write_lines(a.output, out)
    log.info("translated %d lines with %s", len(out), a.bundle)


def cmd_export(a: argparse.Namespace) -> None:
    from rnmt.bundle import export

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
    s.add_argument("--beam", type=count(1))
    s.add_argument("--batch-size", type=count(1))
    s.add_argument("--length-penalty", choices=PENALTIES)
    s.add_argument("--alpha", type=float)
    s.add_argument("--max-len-ratio", type=float)
    s.add_argument("--max-len-extra", type=count(0))
    s.add_argument("--greedy-floor", action="store_true",
                   help="return greedy search's hypothesis where it scores higher than the beam's (no paper does)")
    s.add_argument("--threads", type=count(0), default=0)
    s.add_argument("--device", default="auto")
    s.add_argument("--metrics", help="write decoding speed here (JSON)")
    s.add_argument("--speed-beams", type=count(1), nargs="*", default=[1],
                   help="also time decoding at these beams for the metrics (default: 1, ATR Table 4's setting)")
    s.add_argument("--src-labels", help="source dependency labels of the input, one per subword (factored models)")
    s.add_argument("input", nargs="?", default="-", help="default: standard input (with --bundle)")
    s.add_argument("output", nargs="?", default="-", help="default: standard output (with --bundle)")
    s.set_defaults(func=cmd_translate)

    s = sub.add_parser("export", help="bundle a model or ensemble with its BPE codes and preprocessing settings")
    s.add_argument("--model", action="append", required=True, help="a checkpoint; repeat for an ensemble")
    s.add_argument("--out", required=True, help="the bundle's folder")
    s.add_argument("--src-lang", required=True)
    s.add_argument("--tgt-lang", required=True)
    s.add_argument("--preprocess", default="{}", help="the corpus' preprocess settings as JSON (config.yaml)")
    s.add_argument("--codes", help="the source's BPE codes (omit at word level)")
    s.add_argument("--truecase-model", help="the source's truecasing model, where the corpus truecases")
    s.add_argument("--detruecase", action="store_true", help="detruecase the output (a truecasing corpus)")
    s.add_argument("--decode", default="{}", help="decoding settings as JSON (beam, length_penalty, ...)")
    s.set_defaults(func=cmd_export)

    s = sub.add_parser("postprocess", help="remove BPE and detokenize")
    s.add_argument("--lang", required=True)
    s.add_argument("--tok-output", required=True, help="BPE removed, still tokenized")
    s.add_argument("--detruecase", action="store_true", help="upper-case sentence-initial words (truecased corpora)")
    s.add_argument("input")
    s.add_argument("output")
    s.set_defaults(func=cmd_postprocess)
