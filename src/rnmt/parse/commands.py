"""`rnmt parse ...` (stanza models and parsing) and `rnmt labels ...` (label files for training)."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from rnmt.parse.settings import ParseSettings
from rnmt.settings import count

log = logging.getLogger("rnmt")


def cmd_download(a: argparse.Namespace) -> None:
    from rnmt.parse.models import download

    download(a.model_dir, a.lang, a.package, a.processors, a.resources_url)
    log.info("stanza %s models (%s) in %s", a.lang, a.package, a.model_dir)


def cmd_train_models(a: argparse.Namespace) -> None:
    from rnmt.parse.train import TinySettings, train_models

    s = TinySettings.sized(a.hidden, steps_pos=a.steps_pos, steps_depparse=a.steps_depparse, seed=a.seed)
    m = train_models(a.train, a.dev, a.model_dir, a.lang, s, a.word_vectors)
    log.info("stanza tagger and parser trained on %s → %s", a.train, m)


def cmd_run(a: argparse.Namespace) -> None:
    from rnmt.parse.run import parse_file

    n = parse_file(a.model_dir, a.lang, a.input, a.output, a.chunk, a.chunks, a.device, a.batch_size)
    log.info("parsed %d lines (chunk %d of %d of %s) → %s", n, a.chunk, a.chunks, a.input, a.output)


def cmd_merge(a: argparse.Namespace) -> None:
    from rnmt.parse.run import merge

    merge(a.parts, a.output)


def cmd_score(a: argparse.Namespace) -> None:
    from rnmt.data import conll
    from rnmt.io import write_json

    scores = conll.attachment_scores(conll.read(a.gold), conll.read(a.pred))
    print(f"UAS {scores['uas']:.4f} LAS {scores['las']:.4f} over {scores['words']} words")
    if a.output:
        write_json(a.output, scores)


def cmd_gold(a: argparse.Namespace) -> None:
    from rnmt.data import labels

    n = labels.write_aligned_conllu(a.output, ((s, x.split()) for s, x in labels.align_files(a.conllu, a.text)))
    log.info("gold trees of %s aligned with the %d lines of %s → %s", ", ".join(a.conllu), n, a.text, a.output)


def cmd_project(a: argparse.Namespace) -> None:
    from rnmt.data import labels

    n = labels.write_bpe_labels(a.output, labels.align_files([a.conllu], a.bpe, labels.unsegment), a.bpe, a.subtypes)
    log.info("labels of %d sentences → %s", n, a.output)


def cmd_label_vocab(a: argparse.Namespace) -> None:
    from rnmt.data.bpe import file_lines
    from rnmt.data.vocab import Vocab

    v = Vocab.build(file_lines([a.input]))
    v.save(a.output)
    log.info("label vocabulary of %d entries → %s", len(v), a.output)


def add_parsers(sub: Any) -> None:
    parse = sub.add_parser("parse", help="stanza models and dependency parsing for the source-label factor")
    ps = parse.add_subparsers(dest="parse_command", required=True)

    p = ps.add_parser("download", help="fetch stanza's models with its own downloader (needs network)")
    p.add_argument("--lang", required=True, help="stanza's language code (en, fr, ...)")
    p.add_argument("--package", default=ParseSettings.package, help="stanza's model package (default, ewt, ...)")
    p.add_argument("--processors", default="tokenize,pos,lemma,depparse",
                   help="what to fetch (pretokenized parsing needs pos, depparse; without lemma, lemmas are the words)")
    p.add_argument("--resources-url", help="a mirror of stanza's model hub (default: stanza's own)")
    p.add_argument("--model-dir", required=True, help="the folder the models go to")
    p.set_defaults(func=cmd_download)

    p = ps.add_parser("train-models", help="train a small stanza tagger and parser offline on CoNLL-U trees")
    p.add_argument("--lang", required=True, help="the language's code, as stanza names its models")
    p.add_argument("--train", required=True, help="CoNLL-U training trees")
    p.add_argument("--dev", required=True, help="CoNLL-U dev trees")
    p.add_argument("--model-dir", required=True, help="the folder the trained models go to")
    p.add_argument("--word-vectors", help="word2vec text file (default: random vectors for the training words)")
    p.add_argument("--steps-pos", type=count(0), default=ParseSettings.train_steps_pos,
                   help="training steps of the tagger")
    p.add_argument("--steps-depparse", type=count(0), default=ParseSettings.train_steps_depparse,
                   help="training steps of the parser")
    p.add_argument("--hidden", type=count(1), default=ParseSettings.train_hidden,
                   help="the models' hidden size")
    p.add_argument("--seed", type=count(0), default=1, help="stanza's training seed")
    p.set_defaults(func=cmd_train_models)

    p = ps.add_parser("run", help="parse one chunk of a tokenized file into CoNLL-U")
    p.add_argument("--lang", required=True, help="the language's code, as stanza names its models")
    p.add_argument("--model-dir", required=True, help="the stanza model folder")
    p.add_argument("--chunk", type=count(0), default=0, help="which chunk of the file, from 0")
    p.add_argument("--chunks", type=count(1), default=1, help="how many chunks the file is parsed in")
    p.add_argument("--device", default=ParseSettings.device, help="cpu or cuda")
    p.add_argument("--batch-size", type=count(1), default=ParseSettings.batch_size,
                   help="stanza's POS and parser batch size")
    p.add_argument("input", help="tokenized text, a sentence a line")
    p.add_argument("output", help="the chunk's CoNLL-U")
    p.set_defaults(func=cmd_run)

    p = ps.add_parser("merge", help="concatenate chunk CoNLL-U files in order")
    p.add_argument("--output", required=True, help="the whole file's CoNLL-U")
    p.add_argument("parts", nargs="+", help="the chunks' CoNLL-U files, in order")
    p.set_defaults(func=cmd_merge)

    p = ps.add_parser("score", help="UAS and LAS of a parse against gold trees")
    p.add_argument("--output", help="also write the scores here (JSON)")
    p.add_argument("gold", help="gold trees (CoNLL-U)")
    p.add_argument("pred", help="the parser's trees for the same sentences")
    p.set_defaults(func=cmd_score)

    lab = sub.add_parser("labels", help="dependency-label files aligned with the corpus text")
    ls = lab.add_subparsers(dest="labels_command", required=True)
    p = ls.add_parser("gold", help="gold trees (CoNLL-U or CoNLL-X) aligned with a tokenized text file")
    p.add_argument("--conllu", required=True, nargs="+", help="the split's tree file(s), in order")
    p.add_argument("--text", required=True, help="the tokenized text (tok/<split>.src)")
    p.add_argument("--output", required=True, help="one label a word, a sentence a line")
    p.set_defaults(func=cmd_gold)

    p = ls.add_parser("project", help="one label per subword of a BPE file (a word's subwords share its label)")
    p.add_argument("--conllu", required=True, help="the split's trees (or gold labels)")
    p.add_argument("--bpe", required=True, help="the split's BPE-segmented text")
    p.add_argument("--subtypes", action="store_true", help="keep relation subtypes (acl:relcl), not just acl")
    p.add_argument("--output", required=True, help="one label a subword, a sentence a line")
    p.set_defaults(func=cmd_project)

    p = ls.add_parser("vocab", help="the label vocabulary of a training label file")
    p.add_argument("input", help="the training split's subword labels")
    p.add_argument("output", help="the label vocabulary")
    p.set_defaults(func=cmd_label_vocab)
