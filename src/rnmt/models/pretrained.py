"""Pretrained source word vectors from a word2vec text file (UD paper: GloVe vectors for the words).

Format: an optional header line `<count> <dim>`, then `<token> <v1> ... <vdim>` per line. Vocabulary
entries found in the file (exactly, or else lower-cased) get their vector in the word part of the
source embedding (a factored model's label embeddings stay random); the others keep their
initialisation. Returns how many entries were found.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from rnmt.data.vocab import SPECIALS, Vocab
from rnmt.io import InputError
from rnmt.models.base import Seq2Seq

log = logging.getLogger(__name__)


def read_vectors(path: str | Path, wanted: set[str], dim: int) -> dict[str, list[float]]:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: pretrained word-vector file not found (setting pretrained_src)")
    out: dict[str, list[float]] = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            parts = line.rstrip().split(" ")
            if n == 1 and len(parts) == 2 and all(p.isdigit() for p in parts):
                if int(parts[1]) != dim:
                    raise InputError(f"{path}: {parts[1]}-dimensional vectors, but the model's source word "
                                     f"embedding has {dim} dimensions; set the word size (emb, or factors.dims[0]) "
                                     f"to {parts[1]}")
                continue
            if len(parts) < 2 or parts[0] not in wanted:
                continue
            if len(parts) - 1 != dim:
                raise InputError(f"{path}:{n}: {len(parts) - 1} values for {parts[0]!r}, the model's source word "
                                 f"embedding has {dim}")
            try:
                out[parts[0]] = [float(x) for x in parts[1:]]
            except ValueError:
                raise InputError(f"{path}:{n}: not a word2vec text line (token, then numbers)") from None
    return out


def load_pretrained(model: Seq2Seq, path: str | Path, vocab: Vocab) -> int:
    emb = getattr(model, "src_emb", None)
    weight = getattr(emb, "weight", None)
    if weight is None:
        raise InputError(f"pretrained_src: the model {type(model).__name__} has no source word embedding to fill")
    dim = weight.size(1)
    tokens = [t for t in vocab.itos if t not in SPECIALS]
    vectors = read_vectors(path, set(tokens) | {t.lower() for t in tokens}, dim)
    found = 0
    with torch.no_grad():
        for i, t in enumerate(vocab.itos):
            v = vectors.get(t) if t not in SPECIALS else None
            v = v if v is not None else (vectors.get(t.lower()) if t not in SPECIALS else None)
            if v is not None:
                weight[i] = torch.tensor(v, dtype=weight.dtype)
                found += 1
    return found


def load_source_vectors(model: Seq2Seq, path: str | Path, vocab: Vocab) -> list[str]:
    """`load_pretrained`, logged; a warning (returned, for train.json and the tables) where no word of the
    vectors is in the source vocabulary, so that the embeddings start untrained."""
    found = load_pretrained(model, path, vocab)
    log.info("source word vectors from %s for %d of %d vocabulary entries", path, found, len(vocab))
    if found:
        return []
    warning = (f"pretrained_src {path}: none of its words is in the source vocabulary of {len(vocab)} entries, "
               "so the embeddings start untrained: check that the vectors are of the source language and of the "
               "same tokenization (the vocabulary holds BPE subwords)")
    log.warning("%s", warning)
    return [warning]
