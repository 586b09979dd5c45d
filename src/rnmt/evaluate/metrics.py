"""A decoding's metrics file: its scores against the references, beside the metrics of the training
runs and the decoding that produced it; tables and runs.csv are built from these files."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sacrebleu.metrics import BLEU

from rnmt.evaluate.metric_names import TOKENIZED
from rnmt.evaluate.score import detok_scorer, score, split_compounds, tok_scorer
from rnmt.io import InputError, read_json, read_lines, sha256_of, with_extra_references, write_json

log = logging.getLogger(__name__)


def source_lengths(src: str | Path) -> list[int]:
    """Each test sentence's source length in words (its tokenized source's line split on spaces): what
    BLEU by source length (DTMT Figure 3) groups the sentences by."""
    return [len(line.split()) for line in read_lines(src)]


def scored_files(output: str, hyp: str, refs: Sequence[str], lowercase: bool, hyp_tok: str | None = None,
                 refs_tok: Sequence[str] = (), parts: Sequence[tuple[str, int, int]] | None = None,
                 src: str | None = None) -> dict[str, Any]:
    """What was scored, for `rnmt compare`, the tables' significance tests and the checks of
    `verify_scored`: the translation and every reference, as paths relative to the metrics file's folder
    (so a run's folder can be moved or copied whole), their tokenized twins (`tok`), the test sets of a
    merged split (`parts`: name, first line, lines), the source whose lengths grouped the sentences
    (`src`), the casing, and the sha256 of each file scored."""
    here = Path(output).absolute().parent

    def rel(p: str) -> str:
        return os.path.relpath(Path(p).absolute(), here)

    out: dict[str, Any] = {"hyp": rel(hyp), "refs": [rel(r) for r in refs], "lowercase": lowercase}
    if hyp_tok and refs_tok:
        out["tok"] = {"hyp": rel(hyp_tok), "refs": [rel(r) for r in refs_tok]}
    if parts:
        out["parts"] = [list(p) for p in parts]
    if src:
        out["src"] = rel(src)
    out["sha256"] = {rel(f): sha256_of(f) for f in dict.fromkeys([hyp, *refs, *([hyp_tok] if hyp_tok else []),
                                                                  *refs_tok, *([src] if src else [])])}
    return out


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


RESCORE = "rerun the run's score jobs, `snakemake --cores all --forcerun score` with the run's config"


@dataclass(frozen=True)
class Scored:
    """One metrics file of a run: what it scored (the detokenized and tokenized sides, the test sets of a
    merged split) and the scores it wrote."""

    metrics_file: Path
    hyp: Path
    refs: tuple[Path, ...]
    lowercase: bool
    scores: dict[str, Any]
    hyp_tok: Path | None = None
    refs_tok: tuple[Path, ...] = ()
    parts: tuple[tuple[str, int, int], ...] = ()
    src: Path | None = None

    def source_lengths(self) -> list[int]:
        """The scored sentences' source lengths in words, as BLEU by source length counted them."""
        if self.src is None:
            raise InputError(f"{self.metrics_file}: the metrics file does not name the source whose lengths its BLEU "
                             f"by source length grouped the sentences by (an older rnmt wrote it): {RESCORE}")
        return source_lengths(self.src)

    def bleu_side(self, metric: str) -> tuple[BLEU, list[str], list[list[str]]]:
        """The scorer, hypotheses and references behind a whole-split BLEU of this file: `bleu` (13a on
        the detokenized side), `tok_bleu` (multi-bleu on the tokenized side) or `tok_bleu_compound` (the
        same after compound splitting), as `rnmt score` computed them."""
        if not metric.startswith(TOKENIZED):
            return detok_scorer(self.lowercase), read_lines(self.hyp), [read_lines(r) for r in self.refs]
        if self.hyp_tok is None:
            raise InputError(f"{self.metrics_file}: the metrics file does not name the tokenized files it scored "
                             f"(an older rnmt wrote it), which {metric} is tested on: {RESCORE}")
        hyps, refs = read_lines(self.hyp_tok), [read_lines(r) for r in self.refs_tok]
        if metric.endswith("_compound"):
            hyps, refs = [split_compounds(h) for h in hyps], [[split_compounds(x) for x in r] for r in refs]
        return tok_scorer(self.lowercase), hyps, refs


def scored_file(f: Path, m: dict[str, Any] | None = None) -> Scored:
    """What metrics file `f` scored, checked to hold still what it scored (`verify_scored`)."""
    m = read_json(f) if m is None else m
    files = m.get("files")
    if not files:
        raise InputError(f"{f}: the metrics file does not name the files it scored (written by an older "
                         f"rnmt): {RESCORE}")
    verify_scored(f, m)
    here, recorded = Path(f).parent, files["sha256"]

    def path(rel: str) -> Path:             # a file read is one whose sha256 was checked above
        if rel not in recorded:
            raise InputError(f"{f} names {rel!r} as scored but records no sha256 of it, so what it holds now "
                             f"cannot be checked: not a metrics file rnmt wrote; {RESCORE}")
        return (here / rel).resolve()

    tok = files.get("tok") or {}
    return Scored(Path(f), path(files["hyp"]), tuple(map(path, files["refs"])), bool(files.get("lowercase")),
                  m.get("scores", {}), path(tok["hyp"]) if tok else None, tuple(map(path, tok.get("refs", []))),
                  tuple((str(n), int(a), int(k)) for n, a, k in files.get("parts", [])),
                  path(files["src"]) if files.get("src") else None)


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
    from rnmt.planning.table import member_seeds

    refs = with_extra_references(refs)
    refs_tok = with_extra_references(refs_tok) if refs_tok else None
    hyps = read_lines(hyp)
    parts = test_parts(read_json(manifest)) if manifest else None
    scores = score(hyps, [read_lines(r) for r in refs], read_lines(hyp_tok) if hyp_tok else None,
                   [read_lines(r) for r in refs_tok] if refs_tok else None, lowercase=lowercase,
                   src_lengths=source_lengths(src) if src else None,
                   parts=parts, hyp_file=hyp, ref_files=refs, ref_tok_files=refs_tok or ())
    meta = dict(meta or {})
    if "member" in meta:
        meta["seeds"] = member_seeds(meta["member"])
    from rnmt.provenance import provenance

    out = {**meta, "scores": scores, "train": train_metrics(train), "decode": read_json(decode) if decode else {},
           "files": scored_files(output, hyp, refs, lowercase, hyp_tok, refs_tok or (), parts, src),
           **provenance()}
    write_json(output, out)
    if "empty_output" in scores:
        log.warning("%s: not scored: %s (%d lines of %s)", output, scores["empty_output"], len(hyps), hyp)
    else:
        tok = f" (tokenized {scores['tok_bleu']:.2f})" if "tok_bleu" in scores else ""
        log.info("%s: BLEU %.2f%s, chrF %.2f", output, scores["bleu"], tok, scores["chrf"])
    return out
