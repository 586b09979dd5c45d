"""A decoding's metrics file: its scores against the references, beside the metrics of the training
runs and the decoding that produced it; tables and runs.csv are built from these files."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rnmt.evaluate.score import score
from rnmt.io import InputError, read_json, read_lines, sha256_of, write_json

log = logging.getLogger(__name__)


def with_extra_references(paths: Sequence[str]) -> list[str]:
    """Each reference file followed by its extra references `<file>.ref1`, `.ref2`, ... (NIST: 4 in all)."""
    out = []
    for p in paths:
        out.append(p)
        k = 1
        while Path(f"{p}.ref{k}").is_file():
            out.append(f"{p}.ref{k}")
            k += 1
    return out


def scored_files(output: str, hyp: str, refs: Sequence[str], lowercase: bool,
                 others: Sequence[str] = ()) -> dict[str, Any]:
    """What was scored, for `rnmt compare` and the checks of `verify_scored`: the translation and every
    reference, as paths relative to the metrics file's folder (so a run's folder can be moved or copied
    whole), the casing, and the sha256 of each file scored (`others`: the tokenized sides too)."""
    here = Path(output).absolute().parent

    def rel(p: str) -> str:
        return os.path.relpath(Path(p).absolute(), here)

    return {"hyp": rel(hyp), "refs": [rel(r) for r in refs], "lowercase": lowercase,
            "sha256": {rel(f): sha256_of(f) for f in dict.fromkeys([hyp, *refs, *others])}}


def verify_scored(metrics_file: str | Path, m: dict[str, Any]) -> None:
    """Every file a metrics file scored still holds what was scored (its sha256), else an error naming the
    file and the fix: a score beside a translation that has changed since is not that translation's score."""
    here = Path(metrics_file).parent
    recorded = (m.get("files") or {}).get("sha256")
    if recorded is None:
        raise InputError(f"{metrics_file}: the metrics file does not record what the files it scored held (an "
                         "older rnmt wrote it): rerun the run's score jobs, `snakemake --cores all --forcerun score` "
                         "with the run's config")
    for rel, sha in recorded.items():
        path = here / rel
        if not path.is_file():
            raise InputError(f"{path}: scored in {metrics_file} but missing now (moved or deleted): rerun the run's "
                             "translate and score jobs")
        if sha256_of(path) != sha:
            raise InputError(f"{path} has changed since {metrics_file} scored it, so its scores are not this file's: "
                             "rerun its score job (snakemake reruns it when the file is newer; or `snakemake "
                             "--cores all --forcerun score` with the run's config)")


def test_parts(manifest: dict[str, Any]) -> list[tuple[str, int, int]] | None:
    """(test set, first line, lines) of a merged split from its assemble manifest; None for one part.
    A part is named by its source's folder (results/sources/<source id>/...)."""
    parts = manifest.get("parts") or []
    if len(parts) < 2:
        return None
    out, first = [], 1
    for p in parts:                             # the parts follow each other in the merged split
        out.append((Path(p["src"]).parent.name, first, int(p["lines"])))
        first += int(p["lines"])
    return out


def train_metrics(paths: Sequence[str]) -> dict[str, Any]:
    """The training metrics of one model, or of an ensemble's members (parameters added up)."""
    members = [read_json(p) for p in paths]
    if len(members) == 1:
        return members[0]
    if not members:
        return {}
    return {"params": sum(m["params"] for m in members), "members": members,
            "train_tgt_words_per_s": sum(m["train_tgt_words_per_s"] for m in members) / len(members)}


def write_metrics(output: str, hyp: str, refs: Sequence[str], hyp_tok: str | None = None,
                  refs_tok: Sequence[str] | None = None, src: str | None = None, manifest: str | None = None,
                  lowercase: bool = False, meta: dict[str, Any] | None = None,
                  train: Sequence[str] = (), decode: str | None = None) -> dict[str, Any]:
    """Score `hyp` against `refs` and `hyp_tok` against `refs_tok` (each with its extra references: NIST's
    4 on both sides) and write the metrics file."""
    from rnmt.plan import member_seeds

    refs = with_extra_references(refs)
    refs_tok = with_extra_references(refs_tok) if refs_tok else None
    hyps = read_lines(hyp)
    scores = score(hyps, [read_lines(r) for r in refs], read_lines(hyp_tok) if hyp_tok else None,
                   [read_lines(r) for r in refs_tok] if refs_tok else None, lowercase=lowercase,
                   src_lengths=[len(line.split()) for line in read_lines(src)] if src else None,
                   parts=test_parts(read_json(manifest)) if manifest else None, hyp_file=hyp, ref_files=refs,
                   ref_tok_files=refs_tok or ())
    meta = dict(meta or {})
    if "member" in meta:
        meta["seeds"] = member_seeds(meta["member"])
    from rnmt.provenance import provenance

    out = {**meta, "scores": scores, "train": train_metrics(train), "decode": read_json(decode) if decode else {},
           "files": scored_files(output, hyp, refs, lowercase, [f for f in (hyp_tok, *(refs_tok or [])) if f]),
           **provenance()}
    write_json(output, out)
    if "empty_output" in scores:
        log.warning("%s: not scored: %s (%d lines of %s)", output, scores["empty_output"], len(hyps), hyp)
    else:
        tok = f" (tokenized {scores['tok_bleu']:.2f})" if "tok_bleu" in scores else ""
        log.info("%s: BLEU %.2f%s, chrF %.2f", output, scores["bleu"], tok, scores["chrf"])
    return out
