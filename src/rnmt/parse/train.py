"""Train a small stanza POS tagger and dependency parser offline, with stanza's own training code.

For machines without access to a model hub (and for the demo, whose synthetic language has gold
trees): the models are trained on CoNLL-U trees and written into a model folder with a manifest
(`rnmt-<lang>.json`) that the parse stage reads. stanza needs a pretrained word-vector file; given
none, one is made from the training words with fixed random vectors (the taggers learn their own
word embeddings beside it).
"""

from __future__ import annotations

import logging
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rnmt.data import conll
from rnmt.io import InputError, atomic_writer, write_json
from rnmt.parse.models import manifest_path

log = logging.getLogger(__name__)


@dataclass
class TinySettings:
    """Sizes and steps of the small models (the synthetic grammar needs little)."""

    steps_pos: int = 100
    steps_depparse: int = 80
    hidden: int = 32
    word_dim: int = 16
    char_dim: int = 8
    char_hidden: int = 16
    batch_size: int = 1000         # words a parser batch
    pos_batch_size: int = 1000     # sentences a tagger batch (stanza's tagger counts sentences)
    lr: float = 0.01
    dropout: float = 0.1
    seed: int = 1
    vector_dim: int = 16           # the random pretrain, when no word vectors are given

    @classmethod
    def sized(cls, hidden: int, **kw: int | float) -> TinySettings:
        """Settings whose word, character and vector sizes grow with `hidden` (a real treebank's words need
        more than the synthetic grammar's); at the default hidden 32 they are the defaults above."""
        word = max(16, hidden // 2)
        # the tagger's memory grows with sentences x hidden size (measured: benchmarks/README.md, UD Figure 2)
        return cls(hidden=hidden, word_dim=word, vector_dim=word, char_dim=max(8, hidden // 4),
                   char_hidden=max(16, hidden // 2), pos_batch_size=max(50, 32_000 // hidden),
                   **kw)  # type: ignore[arg-type]


def random_vectors(conllu: str | Path, out: str | Path, dim: int, seed: int) -> int:
    """A word2vec text file with a fixed random vector for each training form (and its lower case)."""
    words = sorted({f for s in conll.read(conllu) for w in s.words for f in (w.form, w.form.lower())})
    rng = random.Random(seed)
    with atomic_writer(out) as f:
        f.write(f"{len(words)} {dim}\n")
        for w in words:
            f.write(w + " " + " ".join(f"{rng.uniform(-1, 1):.4f}" for _ in range(dim)) + "\n")
    return len(words)


def _common(s: TinySettings, lang: str, train: Path, dev: Path, pred: Path, pretrain: Path, save_dir: Path,
            name: str) -> list[str]:
    return ["--train_file", str(train), "--eval_file", str(dev), "--output_file", str(pred),
            "--wordvec_pretrain_file", str(pretrain), "--lang", lang, "--shorthand", f"{lang}_rnmt",
            "--save_dir", str(save_dir), "--save_name", name, "--hidden_dim", str(s.hidden),
            "--char_hidden_dim", str(s.char_hidden), "--char_emb_dim", str(s.char_dim),
            "--word_emb_dim", str(s.word_dim), "--tag_emb_dim", str(s.char_dim),
            "--deep_biaff_hidden_dim", str(s.hidden), "--transformed_dim", str(s.word_dim), "--num_layers", "1",
            "--seed", str(s.seed), "--dropout", str(s.dropout),
            "--word_dropout", "0", "--lr", str(s.lr), "--no_second_optim"]


def train_models(train: str | Path, dev: str | Path, model_dir: str | Path, lang: str,
                 settings: TinySettings | None = None, word_vectors: str | Path | None = None) -> Path:
    """Train the tagger, then the parser; returns the manifest written into `model_dir`."""
    from stanza.models import parser as stanza_parser
    from stanza.models import tagger as stanza_tagger

    s = settings or TinySettings()
    d = Path(model_dir)
    train, dev = Path(train), Path(dev)
    for p in (train, dev):
        if not conll.read(p):
            raise InputError(f"{p}: no sentences to train the stanza models on")
    pos_dir, dep_dir, pre_dir = d / lang / "pos", d / lang / "depparse", d / lang / "pretrain"
    for x in (pos_dir, dep_dir, pre_dir):
        x.mkdir(parents=True, exist_ok=True)
    pretrain = pre_dir / "rnmt.pt"
    with tempfile.TemporaryDirectory(prefix="rnmt-stanza-") as tmp:
        vec = Path(word_vectors) if word_vectors else Path(tmp) / "vectors.txt"
        if not word_vectors:
            n = random_vectors(train, vec, s.vector_dim, s.seed)
            log.info("no word vectors given: %d random %d-d vectors for the training words", n, s.vector_dim)
        elif not vec.is_file():
            raise InputError(f"{vec}: word-vector file not found (word2vec text format)")
        pretrain.unlink(missing_ok=True)             # stanza builds it from the vectors when it is absent
        pos_args = _common(s, lang, train, dev, Path(tmp) / "pos.conllu", pretrain, pos_dir, "rnmt.pt")
        pos_args += ["--batch_size", str(s.pos_batch_size), "--wordvec_file", str(vec), "--max_steps",
                     str(s.steps_pos), "--eval_interval", str(max(s.steps_pos // 2, 1)),
                     "--composite_deep_biaff_hidden_dim", str(s.word_dim)]
        log.info("training the stanza POS tagger (%d steps)", s.steps_pos)
        stanza_tagger.main(pos_args)
        dep_args = _common(s, lang, train, dev, Path(tmp) / "dep.conllu", pretrain, dep_dir, "rnmt.pt")
        dep_args += ["--batch_size", str(s.batch_size), "--max_steps", str(s.steps_depparse), "--eval_interval",
                     str(max(s.steps_depparse // 2, 1)), "--deep_biaff_output_dim", str(s.word_dim), "--optim", "adam",
                     "--no_checkpoint"]
        log.info("training the stanza dependency parser (%d steps)", s.steps_depparse)
        stanza_parser.main(dep_args)
    for p in (pos_dir / "rnmt.pt", dep_dir / "rnmt.pt", pretrain):
        if not p.is_file():
            raise InputError(f"stanza training wrote no {p}; see its log above")
    if not (d / "resources.json").is_file():      # stanza.Pipeline reads one; no language of stanza's is in it
        with atomic_writer(d / "resources.json") as f:
            f.write("{}\n")
    m = manifest_path(d, lang)
    write_json(m, {"layout": "paths", "pos": f"{lang}/pos/rnmt.pt", "depparse": f"{lang}/depparse/rnmt.pt",
                   "pretrain": f"{lang}/pretrain/rnmt.pt", "source": "rnmt parse train-models",
                   "train": str(train), "dev": str(dev), "settings": vars(s)})
    return m
