"""BLEU and chrF with sacrebleu.

- `bleu`: detokenized, case-sensitive sacrebleu BLEU (13a tokenization) with its signature, the
  comparable number;
- `tok_bleu`: BLEU on Moses-tokenized hypothesis and reference with no further tokenization, which
  is what multi-bleu.perl computed for the papers' "tokenized BLEU" columns;
- `chrf`: sacrebleu chrF.
"""

from __future__ import annotations

from typing import Any

from sacrebleu.metrics import BLEU, CHRF

from rnmt.io import InputError


def _check(hyps: list[str], refs: list[str], what: str) -> None:
    if len(hyps) != len(refs):
        raise InputError(f"{what}: {len(hyps)} hypotheses but {len(refs)} references; "
                         "the translation is incomplete or belongs to another test set")


def score(hyps: list[str], refs: list[str], hyps_tok: list[str] | None = None,
          refs_tok: list[str] | None = None) -> dict[str, Any]:
    _check(hyps, refs, "detokenized scoring")
    bleu = BLEU()
    b = bleu.corpus_score(hyps, [refs])
    chrf = CHRF()
    c = chrf.corpus_score(hyps, [refs])
    out: dict[str, Any] = {
        "bleu": b.score,
        "bleu_signature": str(bleu.get_signature()),
        "bleu_bp": b.bp,
        "chrf": c.score,
        "chrf_signature": str(chrf.get_signature()),
        "sentences": len(hyps),
    }
    if hyps_tok is not None and refs_tok is not None:
        _check(hyps_tok, refs_tok, "tokenized scoring")
        tok = BLEU(tokenize="none", force=True)
        out["tok_bleu"] = tok.corpus_score(hyps_tok, [refs_tok]).score
    return out
