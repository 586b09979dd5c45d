"""The data commands: `rnmt synth`, `tokenize`, `bpe learn|apply` and `vocab`, and `rnmt corpus ...`, the
subcommands of the corpus rules (download, fetch, assemble, chunk, clean, merge, prepare dev/test text,
truecase, BPE on the training pairs) and `rnmt corpus list`."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from rnmt.data.settings import BPESettings, PreprocessSettings, VocabSettings
from rnmt.io import InputError
from rnmt.settings import count, json_object

log = logging.getLogger("rnmt")
ROOT = Path(__file__).resolve().parents[3]


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


def _registry(a: argparse.Namespace) -> Any:
    from rnmt.data.registry import Registry, registry_file

    return Registry(a.registry or registry_file(ROOT))


def cmd_download(a: argparse.Namespace) -> None:
    from rnmt.data.download import download

    url, sha = a.url, a.sha256
    if not (url and sha):            # the registry's URL and pin (in the registry or its pin file) for this name
        reg = _registry(a)
        name = Path(a.output).name
        if url is None or name in reg.download_names():
            reg_url, reg_sha = reg.download(name)
            url, sha = url or reg_url, sha or (reg_sha if url in (None, reg_url) else None)
    download(url or "", a.output, sha, retries=a.retries, backoff=a.backoff, timeout=a.timeout)


def cmd_pin(a: argparse.Namespace) -> None:
    """Record the sha256 of downloaded files in the registry's pin file (downloading them first if needed)."""
    from rnmt.data.download import download, sha256_of
    from rnmt.data.pins import read_pins, write_pins

    reg = _registry(a)
    names = reg.download_names() if a.all else a.names
    unknown = [n for n in names if n not in reg.download_names()]
    if unknown:
        raise InputError(f"{reg.path} downloads no file named {', '.join(unknown)}; its downloads: "
                         f"{', '.join(reg.download_names())}")
    pins = read_pins(reg.pin_file)
    bad = []
    for name in names:
        url, sha = reg.download(name)
        dest = Path(a.download_dir) / name
        if sha:
            if dest.is_file() and sha256_of(dest) != sha:
                bad.append(f"{dest} does not match its pin {sha}: delete it and rerun")
            print(f"{name}: already pinned ({sha}){', the file matches' if dest.is_file() and not bad else ''}")
            continue
        if not dest.is_file():       # a file put there by hand (downloaded elsewhere) is pinned as it is
            download(url, dest, None, retries=a.retries, backoff=a.backoff, timeout=a.timeout, allow_unpinned=True)
        pins[name] = sha256_of(dest)
        write_pins(reg.pin_file, pins)           # after each file: an interrupted run keeps what it pinned
        print(f"{name}: pinned {pins[name]} ({url}) in {reg.pin_file}")
    unpinned = [n for n in reg.download_names() if not reg.download(n)[1] and n not in pins]
    print(f"{len(reg.download_names()) - len(unpinned)} of {len(reg.download_names())} downloads pinned"
          + (f"; not pinned: {', '.join(unpinned)} (rnmt corpus pin --all pins them)" if unpinned else ""))
    if bad:
        raise InputError("; ".join(bad))


def cmd_fetch(a: argparse.Namespace) -> None:
    from rnmt.data.fetch import fetch

    src = _registry(a).source(a.source)
    fetch(src, Path(a.out_dir), Path(a.download_dir), Path(a.manual_dir), a.corpus)


def cmd_assemble(a: argparse.Namespace) -> None:
    from rnmt.data.prepare import assemble

    if len(a.src) != len(a.tgt):
        raise InputError("give as many --src as --tgt files")
    holdout = a.holdout or None
    info = assemble(list(zip(a.src, a.tgt, strict=True)), a.split, Path(a.out_src), Path(a.out_tgt),
                    Path(a.manifest), holdout if a.holdout_slice else None)
    log.info("%s: %d lines from %d part(s) → %s", a.split, info["lines"], len(info["parts"]), a.out_src)


def cmd_chunks(a: argparse.Namespace) -> None:
    from rnmt.data import chunks

    idx = chunks.index(a.src, a.tgt, a.chunks)
    chunks.write_index(a.output, idx, a.src, a.tgt)
    log.info("%d lines in %d chunks → %s", sum(c.lines for c in idx), len(idx), a.output)


def _preprocess(settings: dict[str, Any]) -> PreprocessSettings:
    """A job's --settings JSON as the corpus' checked preprocessing settings."""
    return PreprocessSettings.from_dict(settings)


def cmd_clean(a: argparse.Namespace) -> None:
    from rnmt.data.prepare import clean_chunk

    clean_chunk(Path(a.index), a.chunk, Path(a.src), Path(a.tgt), a.src_lang, a.tgt_lang, _preprocess(a.settings),
                Path(a.out_src), Path(a.out_tgt), Path(a.report))


def cmd_merge(a: argparse.Namespace) -> None:
    from rnmt.data.prepare import merge

    n = len(a.chunks) // 3
    if len(a.chunks) != 3 * n:
        raise InputError("give each chunk as three files: src tgt report")
    parts = [(Path(a.chunks[3 * i]), Path(a.chunks[3 * i + 1]), Path(a.chunks[3 * i + 2])) for i in range(n)]
    merge(parts, Path(a.out_src), Path(a.out_tgt), Path(a.report), a.dedupe, {"corpus": a.corpus},
          max_pairs=a.max_pairs, test_src=Path(a.test_src) if a.test_src else None)


def cmd_prepare_text(a: argparse.Namespace) -> None:
    from rnmt.data.clean import Preparer
    from rnmt.data.prepare import prepare_text

    n = prepare_text(Path(a.input), Path(a.output), Preparer.from_settings(a.lang, _preprocess(a.settings)))
    log.info("prepared %d lines (%s) → %s", n, a.lang, a.output)


def cmd_truecase_train(a: argparse.Namespace) -> None:
    from rnmt.data import truecase

    truecase.train(a.input, a.model)


def cmd_truecase(a: argparse.Namespace) -> None:
    from rnmt.data import truecase

    truecase.apply(a.model, a.input, a.output)


def cmd_segment_train(a: argparse.Namespace) -> None:
    from rnmt.data.segment_pairs import segment_pairs

    segment_pairs(Path(a.src), Path(a.tgt), a.src_codes, a.tgt_codes, Path(a.out_src), Path(a.out_tgt),
                  Path(a.report), a.max_subwords, a.workers)


def cmd_list(a: argparse.Namespace) -> None:
    reg = _registry(a)
    print("corpora (select one with `corpora: {<name>: {registry: <id>}}` in the config):")
    for cid, c in reg.corpora.items():
        splits = "; ".join(f"{k}: {', '.join(v)}" for k, v in (c.get("splits") or {}).items())
        print(f"  {cid:22s} {c['src_lang']}-{c['tgt_lang']}  {splits}")
    print("sources:")
    for s in reg.sources.values():
        print(f"  {s.id:30s} {s.kind}:{s.spec}")


def pair_io(p: argparse.ArgumentParser, inputs: bool = True) -> None:
    """The output pair and report of a command that turns training pairs into training pairs."""
    for name, what in (("--out-src", "the source side written"), ("--out-tgt", "the target side written"),
                       ("--report", "the step's report (JSON: lines kept, dropped and changed)")):
        p.add_argument(name, required=True, help=what)
    if inputs:
        p.add_argument("src", help="the source side read")
        p.add_argument("tgt", help="the target side read, line for line with src")


def add_parsers(sub: Any) -> None:
    s = sub.add_parser("synth", help="generate the synthetic language pair")
    s.add_argument("--out-dir", required=True, help="the folder for {train,dev,test}.{src,tgt} and the trees")
    s.add_argument("--seed", type=count(0), default=1, help="the sentences drawn")
    s.add_argument("--language-seed", type=count(0), default=None,
                   help="the invented language's lexicon and rules (default: the fixed demo language)")
    s.add_argument("--train", type=count(0), default=20000, help="training pairs")
    s.add_argument("--dev", type=count(0), default=500, help="dev pairs")
    s.add_argument("--test", type=count(0), default=1000, help="test pairs")
    s.add_argument("--max-words", type=count(0), default=None, help="the longest source sentence in words")
    s.set_defaults(func=cmd_synth)

    s = sub.add_parser("tokenize", help="normalise punctuation and Moses-tokenize a file")
    s.add_argument("--lang", required=True, help="the text's language (Moses' rules: en, de, fr, ...)")
    s.add_argument("--no-escape", action="store_true", help="keep & < > ' \" as they are (Moses escapes them)")
    s.add_argument("--no-normalize", action="store_true", help="skip Moses' punctuation normalisation")
    s.add_argument("--lowercase", action="store_true", help="lower-case the tokens")
    s.add_argument("input", help="raw text, a sentence a line")
    s.add_argument("output", help="the tokenized text")
    s.set_defaults(func=cmd_tokenize)

    bpe = sub.add_parser("bpe", help="learn or apply BPE").add_subparsers(dest="bpe_command", required=True)
    s = bpe.add_parser("learn", help="learn BPE merge operations (subword-nmt)")
    s.add_argument("--merges", type=count(0), required=True, help="merge operations to learn")
    s.add_argument("--min-frequency", type=count(0), default=BPESettings.min_frequency,
                   help="stop at pairs seen fewer times")
    s.add_argument("--codes", required=True, help="the codes file to write")
    s.add_argument("inputs", nargs="+", help="tokenized text to learn from (several: one joint model)")
    s.set_defaults(func=cmd_bpe_learn)
    s = bpe.add_parser("apply", help="segment a tokenized file with learned codes")
    s.add_argument("--codes", help="the codes file; omit for word level (lines pass unsegmented)")
    s.add_argument("input", help="tokenized text")
    s.add_argument("output", help="the segmented text")
    s.set_defaults(func=cmd_bpe_apply)

    s = sub.add_parser("vocab", help="build a vocabulary from a segmented file")
    s.add_argument("--max-size", type=count(1), default=VocabSettings.max_size,
                   help="keep the most frequent tokens up to this many (special tokens included)")
    s.add_argument("--min-count", type=count(1), default=VocabSettings.min_count,
                   help="leave out tokens seen fewer times")
    s.add_argument("input", help="segmented training text")
    s.add_argument("output", help="the vocabulary, a token a line")
    s.set_defaults(func=cmd_vocab)

    corpus = sub.add_parser("corpus", help="download, fetch, clean and prepare corpora")
    cs = corpus.add_subparsers(dest="corpus_command", required=True)

    def cmd(name: str, func: Any, help: str) -> argparse.ArgumentParser:
        p = cs.add_parser(name, help=help)
        p.add_argument("--registry",
                       help="the corpus registry (default: $RNMT_REGISTRY, else workflow/corpora.yaml)")
        p.set_defaults(func=func)
        return p

    p = cmd("download", cmd_download, "download a file (retries, resumes, verifies sha256, atomic)")
    p.add_argument("--url", help="default: the registry's URL for the output's file name")
    p.add_argument("--sha256", help="the expected checksum (default: the registry's pin for the output's name)")
    p.add_argument("--retries", type=count(0), default=5, help="tries after the first before giving up")
    p.add_argument("--backoff", type=float, default=2.0, help="seconds before the first retry, doubling")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds without data before a try fails")
    p.add_argument("output", help="the file to write (its name picks the registry entry)")

    p = cmd("pin", cmd_pin, "pin the sha256 of downloads in the registry's pin file (without names: report)")
    p.add_argument("--all", action="store_true", help="every download of the registry")
    p.add_argument("--download-dir", default="results/downloads", help="where the downloads are")
    p.add_argument("--retries", type=count(0), default=5, help="tries after the first before giving up")
    p.add_argument("--backoff", type=float, default=2.0, help="seconds before the first retry, doubling")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds without data before a try fails")
    p.add_argument("names", nargs="*", help="file names under the download folder (rnmt corpus pin lists them)")

    p = cmd("fetch", cmd_fetch, "turn a registry source into one plain text file per language")
    p.add_argument("--source", required=True, help="the registry source id (rnmt corpus list)")
    p.add_argument("--out-dir", required=True, help="the folder for <l1>-<l2>.<l1> and .<l2>")
    p.add_argument("--download-dir", default="results/downloads", help="where the source's downloads are")
    p.add_argument("--manual-dir", default="data/ldc", help="where a user puts files no URL serves (LDC)")
    p.add_argument("--corpus", default="", help="the corpus that needs it (for messages)")

    p = cmd("assemble", cmd_assemble, "concatenate a split's parts (checks alignment and UTF-8)")
    p.add_argument("--split", required=True, choices=("train", "dev", "test"), help="the split assembled")
    p.add_argument("--src", action="append", required=True, help="a part's source file (repeat, in order)")
    p.add_argument("--tgt", action="append", required=True, help="the same part's target file")
    p.add_argument("--holdout", default={}, type=json_object, help='JSON, e.g. {"dev": 2000, "test": 2000}')
    p.add_argument("--holdout-slice", action="store_true", help="the parts are train; take this split's slice")
    p.add_argument("--out-src", required=True, help="the split's source side")
    p.add_argument("--out-tgt", required=True, help="the split's target side")
    p.add_argument("--manifest", required=True, help="the parts and their line ranges (JSON; BLEU per test set)")

    p = cmd("chunks", cmd_chunks, "index a file pair into a fixed number of chunks")
    p.add_argument("--chunks", type=count(1), required=True, help="how many chunks")
    p.add_argument("src", help="the training source")
    p.add_argument("tgt", help="the training target")
    p.add_argument("output", help="the chunk index (JSON: byte offsets)")

    p = cmd("clean", cmd_clean, "clean one chunk (normalise, segment, tokenize, filter) with a report")
    p.add_argument("--index", required=True, help="the chunk index (rnmt corpus chunks)")
    p.add_argument("--chunk", type=count(0), required=True, help="which chunk, from 0")
    p.add_argument("--src-lang", required=True, help="the source language (tokenizer rules)")
    p.add_argument("--tgt-lang", required=True, help="the target language")
    p.add_argument("--settings", required=True, type=json_object, help="the corpus' preprocess settings as JSON")
    pair_io(p)

    p = cmd("merge", cmd_merge, "merge cleaned chunks in order (optionally deduplicating)")
    p.add_argument("--dedupe", action="store_true", help="keep a repeated pair once")
    p.add_argument("--max-pairs", type=count(0), default=None, help="keep a random sample of this many pairs")
    p.add_argument("--corpus", default="", help="the corpus' name (for messages)")
    p.add_argument("--test-src", help="the prepared test source: count its sentences that occur in training")
    pair_io(p, inputs=False)
    p.add_argument("chunks", nargs="+", help="src tgt report of each chunk, in order")

    p = cmd("prepare-text", cmd_prepare_text, "prepare dev/test text as the training text (no filters)")
    p.add_argument("--lang", required=True, help="the text's language (tokenizer rules)")
    p.add_argument("--settings", required=True, type=json_object, help="the corpus' preprocess settings as JSON")
    p.add_argument("input", help="raw dev or test text")
    p.add_argument("output", help="the prepared text")

    p = cmd("truecase-train", cmd_truecase_train, "learn a Moses truecasing model")
    p.add_argument("input", help="tokenized training text")
    p.add_argument("model", help="the truecasing model to write")

    p = cmd("truecase", cmd_truecase, "truecase a tokenized file")
    p.add_argument("--model", required=True, help="the truecasing model (rnmt corpus truecase-train)")
    p.add_argument("input", help="tokenized text")
    p.add_argument("output", help="the truecased text")

    p = cmd("segment-train", cmd_segment_train, "BPE on the training pairs, with a subword length limit")
    p.add_argument("--src-codes", help="omit for word level")
    p.add_argument("--tgt-codes", help="omit for word level")
    p.add_argument("--max-subwords", type=count(1), help="drop pairs with a side longer than this in subwords")
    p.add_argument("--workers", type=count(1), default=1, help="processes segmenting side by side")
    pair_io(p)

    cmd("list", cmd_list, "list the registry's corpora and sources")
