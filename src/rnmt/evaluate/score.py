r"""BLEU and chrF with sacrebleu, as the papers computed them.

Each score comes with the sacrebleu signature of the scorer that computed it (`<score>_signature`):

- `bleu`: detokenized sacrebleu BLEU (13a tokenization), the comparable number; case-insensitive and
  against several references for NIST Zh-En (`lowercase=True`, 4 references);
- `tok_bleu`: multi-bleu.perl's BLEU (`tok_scorer`) on the Moses-tokenized hypothesis and references:
  whitespace-split tokens and nothing else, n-gram counts clipped by their most frequent reference,
  the brevity penalty against the reference length closest to each hypothesis (the shorter on a tie),
  no smoothing; `-lc` (case-insensitive) where the corpus is scored lowercased. sacrebleu's BLEU with
  `tokenize="none", smooth_method="none"` is exactly that (it picks the closest reference length as
  multi-bleu.perl does). This is the papers' "tokenized BLEU": ATR Tables 2-3 (case-sensitive), and
  DTMT (its setup: tokenized references, multi-bleu.pl), case-sensitive for WMT (Table 2's caption)
  and case-insensitive for NIST Zh-En (Table 1's caption);
- `tok_bleu_compound`: `tok_bleu` after tensor2tensor's compound splitting (`split_compounds`) of the
  hypothesis and every reference. SR-NMT (Di Gangi & Federico 2018, EAMT), section 5.1, scores WMT14
  En-De cased, Moses-tokenized, with multi-bleu.pl, comparable with other publications through its
  footnote 5, tensor2tensor's utils/get_ende_bleu.sh. That script rewrites every hyphenated compound
  of the tokenized hypothesis and reference, `s{(\S)-(\S)}{$1 ##AT##-##AT## $2}g`, before a
  case-sensitive multi-bleu.perl (for comparison with GNMT and ConvS2S);
- `chrf`: sacrebleu chrF;
- per test set of a merged split (NIST MT02..MT08) and their mean, `bleu_by_part` / `bleu_avg`, and
  per source length, `bleu_by_length` (buckets, with their sentences) / `bleu_longer_than` (DTMT Figure 3's
  thresholds; `sentences_longer_than` their sentences),
  each computed twice: detokenized (the keys as written) and tokenized (`tok_` before the key), since
  DTMT's NIST tables and Figure 3 report case-insensitive multi-bleu.perl on tokenized text against the
  4 references.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from sacrebleu.metrics import BLEU, CHRF

from rnmt.data.tokenize import DASH_SPLIT
from rnmt.evaluate.metric_names import TOKENIZED
from rnmt.io import InputError

LENGTH_BUCKETS = (0, 10, 20, 30, 40, 50)     # (0,10], (10,20], ..., (50, ∞)
LONGER_THAN = (0, 10, 20, 30, 40, 50, 60)    # DTMT Figure 3's x-axis: sources longer than x words

# get_ende_bleu.sh's compound splitting, `s{(\S)-(\S)}{$1 ##AT##-##AT## $2}g`: like Perl's /g, re.sub
# resumes after each match, so "a-b-c" becomes "a ##AT##-##AT## b-c"
_COMPOUND = re.compile(r"(\S)-(\S)")
_COMPOUND_SPLIT = r"\1 ##AT##-##AT## \2"
COMPOUND_SIGNATURE = "compounds:##AT##-##AT##"    # added to the signature of a compound-split score


def detok_scorer(lowercase: bool = False) -> BLEU:
    """sacrebleu's BLEU on detokenized text (13a tokenization), case-insensitive with `lowercase`."""
    return BLEU(lowercase=lowercase)


def chrf_scorer(lowercase: bool = False) -> CHRF:
    """sacrebleu's chrF (character 6-grams, beta 2), case-insensitive with `lowercase`."""
    return CHRF(lowercase=lowercase)


def tok_scorer(lowercase: bool = False) -> BLEU:
    """multi-bleu.perl's BLEU on tokenized text (`-lc` with `lowercase`); see the module docstring."""
    return BLEU(tokenize="none", lowercase=lowercase, smooth_method="none", force=True)


def split_compounds(line: str) -> str:
    """A Moses-tokenized line as get_ende_bleu.sh scores it (SR-NMT, see the module docstring): the
    tokenization of Moses' tokenizer.perl without `-a` (our aggressive dash splits "Test @-@ Fall" joined
    back to "Test-Fall"), then each compound "a-b" written "a ##AT##-##AT## b"."""
    return _COMPOUND.sub(_COMPOUND_SPLIT, line.replace(DASH_SPLIT, "-"))


def _bleu(scorer: BLEU, hyps: Sequence[str], refs: Sequence[Sequence[str]], idx: Sequence[int]) -> float:
    """BLEU of the sentences `idx`."""
    return scorer.corpus_score([hyps[i] for i in idx], [[r[i] for i in idx] for r in refs]).score


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


def of_length(src_lengths: Sequence[int], lo: int, hi: int | None) -> list[int]:
    """The sentences whose source has lo+1..hi words (hi None: more than lo), by index."""
    return [i for i, n in enumerate(src_lengths) if n > lo and (hi is None or n <= hi)]


def bleu_by_length(hyps: Sequence[str], refs: Sequence[Sequence[str]], src_lengths: Sequence[int],
                   scorer: BLEU) -> dict[str, dict[str, float]]:
    """BLEU (by `scorer`) of the sentences whose source length (words) falls in each bucket."""
    out = {}
    edges = [*LENGTH_BUCKETS, None]
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        idx = of_length(src_lengths, lo, hi)
        if idx:
            out[bucket_name(lo, hi)] = {"bleu": _bleu(scorer, hyps, refs, idx), "sentences": len(idx)}
    return out


def bleu_longer_than(hyps: Sequence[str], refs: Sequence[Sequence[str]], src_lengths: Sequence[int],
                     scorer: BLEU) -> dict[str, float]:
    """BLEU (by `scorer`) of the sentences whose source is longer than each threshold (DTMT Figure 3)."""
    out = {}
    for lo in LONGER_THAN:
        idx = of_length(src_lengths, lo, None)
        if idx:
            out[str(lo)] = _bleu(scorer, hyps, refs, idx)
    return out


def bleu_by_part(hyps: Sequence[str], refs: Sequence[Sequence[str]], parts: Sequence[tuple[str, int, int]],
                 scorer: BLEU) -> dict[str, float]:
    """BLEU (by `scorer`) of each test set of a merged split; `parts` gives (name, first line counting
    from 1, lines)."""
    end = max(a - 1 + n for _, a, n in parts)
    if end > len(hyps):
        raise InputError(f"the test split's manifest covers {end} lines but there are {len(hyps)} hypotheses")
    return {name: _bleu(scorer, hyps, refs, range(first - 1, first - 1 + n)) for name, first, n in parts}


def _check_tokenized_references(refs: Sequence[Sequence[str]], refs_tok: Sequence[Sequence[str]],
                                ref_files: Sequence[str], ref_tok_files: Sequence[str]) -> None:
    """The tokenized side must have every reference of the raw side (NIST: 4), else its BLEU would be
    against fewer references than the detokenized one."""
    if len(refs_tok) != len(refs):
        def named(files: Sequence[str]) -> str:
            return f" ({', '.join(files)})" if files else ""

        raise InputError(f"{len(refs)} raw reference(s){named(ref_files)} but {len(refs_tok)} tokenized "
                         f"reference(s){named(ref_tok_files)}: the tokenized test set lacks references or "
                         "belongs to another test set. Prepare it again from the raw one (`rnmt corpus "
                         "prepare-text` writes each extra reference <file>.refN beside the first)")


def score(hyps: Sequence[str], refs: Sequence[Sequence[str]], hyps_tok: Sequence[str] | None = None,
          refs_tok: Sequence[Sequence[str]] | None = None, lowercase: bool = False,
          src_lengths: Sequence[int] | None = None,
          parts: Sequence[tuple[str, int, int]] | None = None, hyp_file: str = "",
          ref_files: Sequence[str] = (), ref_tok_files: Sequence[str] = ()) -> dict[str, Any]:
    """`refs` is a list of reference streams (one for WMT, four for NIST), each aligned with `hyps`, and
    `refs_tok` their tokenized twins (as many); `parts` names the test sets a merged test split is made
    of, as (name, first line, lines), for BLEU per test set (NIST MT02..MT08) and their average. Empty
    inputs are refused (`check_scorable`, naming `hyp_file` and `ref_files` where given)."""
    check_scorable(hyps, refs, hyp_file, ref_files)
    _check(hyps, refs, "detokenized scoring")
    tok_side = None
    if hyps_tok is not None and refs_tok is not None:
        _check_tokenized_references(refs, refs_tok, ref_files, ref_tok_files)
        _check(hyps_tok, refs_tok, "tokenized scoring")
        tok_side = hyps_tok, refs_tok
    if src_lengths is not None and len(src_lengths) != len(hyps):
        raise InputError(f"{len(src_lengths)} source lines for {len(hyps)} hypotheses")
    if not any(h.strip() for h in hyps):
        # BLEU 0.0 here would read as a result in a table: no scores, and the reason instead
        return {"empty_output": EMPTY_OUTPUT, "sentences": len(hyps), "references": len(refs)}
    bleu = detok_scorer(lowercase)
    b = bleu.corpus_score(list(hyps), [list(r) for r in refs])
    chrf = chrf_scorer(lowercase)
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
    sides = [("", hyps, refs, bleu)]
    if tok_side is not None:
        hyps_t, refs_t = tok_side
        tok = tok_scorer(lowercase)
        out["tok_bleu"] = tok.corpus_score(list(hyps_t), [list(r) for r in refs_t]).score
        out["tok_bleu_signature"] = str(tok.get_signature())
        compound = tok_scorer(lowercase)
        out["tok_bleu_compound"] = compound.corpus_score([split_compounds(h) for h in hyps_t],
                                                         [[split_compounds(x) for x in r] for r in refs_t]).score
        out["tok_bleu_compound_signature"] = f"{compound.get_signature()}|{COMPOUND_SIGNATURE}"
        sides.append((TOKENIZED, hyps_t, refs_t, tok))
    if src_lengths is not None:                     # how many sentences each threshold's BLEU rests on
        out["sentences_longer_than"] = {str(lo): n for lo in LONGER_THAN
                                        if (n := sum(1 for x in src_lengths if x > lo))}
    for prefix, h, r, scorer in sides:
        if src_lengths is not None:
            out[f"{prefix}bleu_by_length"] = bleu_by_length(h, r, src_lengths, scorer)
            out[f"{prefix}bleu_longer_than"] = bleu_longer_than(h, r, src_lengths, scorer)
        if parts:
            by_part = out[f"{prefix}bleu_by_part"] = bleu_by_part(h, r, parts, scorer)
            out[f"{prefix}bleu_avg"] = sum(by_part.values()) / len(by_part)
    return out
