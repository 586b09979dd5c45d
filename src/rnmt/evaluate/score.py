"""BLEU and chrF with sacrebleu, as the papers computed them.

- `bleu`: detokenized sacrebleu BLEU (13a tokenization) with its signature, the comparable number;
  case-insensitive and against several references for NIST Zh-En (`lowercase=True`, 4 references);
- `tok_bleu`: BLEU on Moses-tokenized hypothesis and references with no further tokenization, which
  is what multi-bleu.perl computed for the papers' "tokenized BLEU" columns;
- `chrf`: sacrebleu chrF;
- `bleu_by_length`: BLEU per source-length bucket (DTMT Figure 3).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sacrebleu.metrics import BLEU, CHRF

from rnmt.io import InputError

LENGTH_BUCKETS = (0, 10, 20, 30, 40, 50)     # (0,10], (10,20], ..., (50, ∞)
LONGER_THAN = (0, 10, 20, 30, 40, 50, 60)    # DTMT Figure 3's x-axis: sources longer than x words


def _check(hyps: Sequence[str], refs: Sequence[Sequence[str]], what: str) -> None:
    for k, r in enumerate(refs):
        if len(hyps) != len(r):
            raise InputError(f"{what}: {len(hyps)} hypotheses but reference {k + 1} has {len(r)} lines; "
                             "the translation is incomplete or belongs to another test set")


EMPTY_OUTPUT = "every hypothesis is empty: the model produced no output (did it train? see its train.json)"


def check_scorable(hyps: Sequence[str], refs: Sequence[Sequence[str]], hyp_file: str = "",
                   ref_files: Sequence[str] = ()) -> None:
    """Refuse inputs that cannot be scored: no reference lines (sacrebleu fails on them) or no hypotheses.
    A translation of empty lines only is scored as `EMPTY_OUTPUT` instead (see `score`)."""
    hyp_name = hyp_file or "the translation"
    for k, r in enumerate(refs):
        if not r:
            name = ref_files[k] if k < len(ref_files) else f"reference {k + 1}"
            raise InputError(f"{name}: the reference file is empty: the test set has no sentences. Give the "
                             "corpus a non-empty test set (the data stage refuses an empty one: rerun it) and "
                             "translate again")
    if not hyps:
        raise InputError(f"{hyp_name}: the translation is empty (0 lines for {len(refs[0]) if refs else 0} "
                         "reference lines): the translate job did not finish or wrote nothing. Delete it and rerun "
                         "the translation")


def bucket_name(lo: int, hi: int | None) -> str:
    return f"{lo + 1}-{hi}" if hi is not None else f">{lo}"


def bleu_by_length(hyps: Sequence[str], refs: Sequence[Sequence[str]], src_lengths: Sequence[int],
                   lowercase: bool = False) -> dict[str, dict[str, float]]:
    """BLEU of the sentences whose source length (words) falls in each bucket."""
    out = {}
    edges = [*LENGTH_BUCKETS, None]
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        idx = [i for i, n in enumerate(src_lengths) if n > lo and (hi is None or n <= hi)]
        if idx:
            b = BLEU(lowercase=lowercase).corpus_score([hyps[i] for i in idx], [[r[i] for i in idx] for r in refs])
            out[bucket_name(lo, hi)] = {"bleu": b.score, "sentences": len(idx)}
    return out


def bleu_longer_than(hyps: Sequence[str], refs: Sequence[Sequence[str]], src_lengths: Sequence[int],
                     lowercase: bool = False) -> dict[str, float]:
    """BLEU of the sentences whose source is longer than each threshold (DTMT Figure 3)."""
    out = {}
    for lo in LONGER_THAN:
        idx = [i for i, n in enumerate(src_lengths) if n > lo]
        if idx:
            b = BLEU(lowercase=lowercase).corpus_score([hyps[i] for i in idx], [[r[i] for i in idx] for r in refs])
            out[str(lo)] = b.score
    return out


def score(hyps: Sequence[str], refs: Sequence[Sequence[str]], hyps_tok: Sequence[str] | None = None,
          refs_tok: Sequence[Sequence[str]] | None = None, lowercase: bool = False,
          src_lengths: Sequence[int] | None = None,
          parts: Sequence[tuple[str, int, int]] | None = None, hyp_file: str = "",
          ref_files: Sequence[str] = ()) -> dict[str, Any]:
    """`refs` is a list of reference streams (one for WMT, four for NIST), each aligned with `hyps`;
    `parts` names the test sets a merged test split is made of, as (name, first line, lines), for
    BLEU per test set (NIST MT02..MT08) and their average. Empty inputs are refused (`check_scorable`,
    naming `hyp_file` and `ref_files` where given)."""
    check_scorable(hyps, refs, hyp_file, ref_files)
    _check(hyps, refs, "detokenized scoring")
    if not any(h.strip() for h in hyps):
        # BLEU 0.0 here would read as a result in a table: no scores, and the reason instead
        return {"empty_output": EMPTY_OUTPUT, "sentences": len(hyps), "references": len(refs)}
    bleu = BLEU(lowercase=lowercase)
    b = bleu.corpus_score(list(hyps), [list(r) for r in refs])
    chrf = CHRF(lowercase=lowercase)
    c = chrf.corpus_score(list(hyps), [list(r) for r in refs])
    out: dict[str, Any] = {
        "bleu": b.score,
        "bleu_signature": str(bleu.get_signature()),
        "bleu_bp": b.bp,
        "chrf": c.score,
        "chrf_signature": str(chrf.get_signature()),
        "sentences": len(hyps),
        "references": len(refs),
    }
    if hyps_tok is not None and refs_tok is not None:
        _check(hyps_tok, refs_tok, "tokenized scoring")
        tok = BLEU(tokenize="none", lowercase=lowercase, force=True)
        out["tok_bleu"] = tok.corpus_score(list(hyps_tok), [list(r) for r in refs_tok]).score
    if src_lengths is not None:
        if len(src_lengths) != len(hyps):
            raise InputError(f"{len(src_lengths)} source lines for {len(hyps)} hypotheses")
        out["bleu_by_length"] = bleu_by_length(hyps, refs, src_lengths, lowercase)
        out["bleu_longer_than"] = bleu_longer_than(hyps, refs, src_lengths, lowercase)
    if parts:
        out["bleu_by_part"] = bleu_by_part(hyps, refs, parts, lowercase)
        out["bleu_avg"] = sum(out["bleu_by_part"].values()) / len(out["bleu_by_part"])
    return out


def bleu_by_part(hyps: Sequence[str], refs: Sequence[Sequence[str]], parts: Sequence[tuple[str, int, int]],
                 lowercase: bool = False) -> dict[str, float]:
    """BLEU of each test set of a merged split; `parts` gives (name, first line counting from 1, lines)."""
    end = max(a - 1 + n for _, a, n in parts)
    if end > len(hyps):
        raise InputError(f"the test split's manifest covers {end} lines but there are {len(hyps)} hypotheses")
    out = {}
    for name, first, n in parts:
        lo, hi = first - 1, first - 1 + n
        out[name] = BLEU(lowercase=lowercase).corpus_score(list(hyps[lo:hi]), [list(r[lo:hi]) for r in refs]).score
    return out
