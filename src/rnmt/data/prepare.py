"""The prepare stage: assemble a split from its parts, clean chunks, merge them (deduplicating),
and prepare dev/test text the same way without filters. Reports go beside the outputs as JSON."""

from __future__ import annotations

import hashlib
import logging
import random
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from rnmt.data import chunks
from rnmt.data.clean import FIX_WHAT, TEXT_FIXES, Preparer, Report, clean_pairs, fix_text
from rnmt.data.settings import PreprocessSettings
from rnmt.io import InputError, atomic_writer, drop_extra_references, read_json, with_extra_references, write_json

log = logging.getLogger(__name__)


def _decoded(path: Path, start: int, stop: int) -> Iterator[str]:
    """Lines start..stop-1 of a file, decoded; invalid UTF-8 names the file and line."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f):
            if n >= stop:
                break
            if n < start:
                continue
            try:
                yield raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                raise InputError(f"{path}, line {n + 1}: not valid UTF-8 ({e.reason}); convert the file to UTF-8 "
                                 "(e.g. iconv -f latin1 -t utf-8)") from None


EMPTY_EVAL_FIX = ("a dev or test set needs sentences to translate and score: give the corpus non-empty dev and test "
                  "files (`files:` of a local corpus, `splits:` of a registry corpus) or hold lines out of the "
                  "training data (`holdout: {dev: 500, test: 1000}`)")


def holdout_range(split: str, total: int, holdout: dict[str, int]) -> tuple[int, int]:
    """Line range of `split` in the concatenated training parts: test last, dev before it."""
    dev, test = int(holdout.get("dev", 0)), int(holdout.get("test", 0))
    if dev + test >= total:
        raise InputError(f"holdout of {dev} dev + {test} test lines leaves no training data out of {total} lines; "
                         "hold out fewer lines")
    return {"train": (0, total - dev - test), "dev": (total - dev - test, total - test),
            "test": (total - test, total)}[split]


def assemble(parts: Sequence[tuple[str, str]], split: str, out_src: Path, out_tgt: Path, manifest: Path,
             holdout: dict[str, int] | None = None) -> dict[str, Any]:
    """Concatenate line-aligned (src, tgt) parts into one split, checking alignment and UTF-8.

    With `holdout`, the parts are the training data and `split` takes its slice of them.
    """
    drop_extra_references(out_tgt)          # the split's references are those written below, none before
    counts = []
    for s, t in parts:
        n, m = chunks.count_lines(s) if Path(s).is_file() else -1, chunks.count_lines(t) if Path(t).is_file() else -1
        for p, k in ((s, n), (t, m)):
            if k < 0:
                raise InputError(f"{p}: file not found; check the corpus' files in the config")
        if n != m:
            raise InputError(f"parallel files differ in length: {s} has {n} lines, {t} has {m}; the two sides must "
                             "be line-aligned (one sentence pair per line)")
        counts.append(n)
    lo, hi = holdout_range(split, sum(counts), holdout) if holdout else (0, sum(counts))
    info: dict[str, Any] = {"split": split, "lines": hi - lo, "parts": []}
    offset = 0
    sentences = [0, 0]                 # lines with text, per side
    identical = 0                      # pairs with text, the same on both sides
    with atomic_writer(out_src) as fs, atomic_writer(out_tgt) as ft:
        for (s, t), n in zip(parts, counts, strict=True):
            a, b = max(lo - offset, 0), min(hi - offset, n)
            if a < b:
                for x, y in zip(_decoded(Path(s), a, b), _decoded(Path(t), a, b), strict=True):
                    fs.write(x + "\n")
                    ft.write(y + "\n")
                    sentences[0] += bool(x.strip())
                    sentences[1] += bool(y.strip())
                    identical += bool(x.strip()) and x.split() == y.split()
                info["parts"].append({"src": s, "tgt": t, "from_line": a + 1, "lines": b - a})
            offset += n
        if split in ("dev", "test") and min(sentences) == 0:   # raised inside the writers: nothing is left
            files = [p for pair in parts for p in pair]
            side = [s for s, t in parts] if sentences[0] == 0 else [t for s, t in parts]
            raise InputError(f"the {split} split is empty: {', '.join(side)} {'has' if len(side) == 1 else 'have'} "
                             f"no sentences ({hi - lo} lines, none with text; files: {', '.join(files)}); "
                             + EMPTY_EVAL_FIX)
    info["warnings"] = []
    if identical and identical == sentences[0] == sentences[1]:
        srcs, tgts = ", ".join(s for s, _ in parts), ", ".join(t for _, t in parts)
        info["warnings"].append(f"{split}: every one of the {identical} pairs has the same text on both sides ({srcs} "
                                f"and {tgts}): probably the same file was given twice; check the corpus' {split} "
                                "files in the config")
    for w in info["warnings"]:
        log.warning("%s", w)
    if not holdout:
        info["references"] = 1 + concat_refs([Path(t) for _, t in parts], out_tgt)
    write_json(manifest, info)
    return info


def _ref_files(tgt: Path) -> list[Path]:
    return [Path(p) for p in with_extra_references([str(tgt)])[1:]]


def concat_refs(tgt_parts: Sequence[Path], out_tgt: Path) -> int:
    """Concatenate the extra references (`<file>.refN`) of every part beside `out_tgt`; return N.

    Every part must have as many references (NIST sets have 4 each), or none has any.
    """
    refs = [_ref_files(t) for t in tgt_parts]
    counts = {len(r) for r in refs}
    if len(counts) > 1:
        have = ", ".join(f"{t}: {1 + len(r)}" for t, r in zip(tgt_parts, refs, strict=True))
        raise InputError(f"the test sets of one split have different numbers of references ({have}); put sets "
                         "with the same number of references together")
    n = counts.pop() if counts else 0
    for k in range(n):
        with atomic_writer(out_tgt.with_name(f"{out_tgt.name}.ref{k + 1}"), "wb") as out:
            for r in refs:
                out.write(r[k].read_bytes())
    return n


def clean_chunk(index_path: Path, i: int, src: Path, tgt: Path, src_lang: str, tgt_lang: str,
                settings: PreprocessSettings, out_src: Path, out_tgt: Path, out_report: Path) -> Report:
    """Clean chunk `i` of the index into its own files and report."""
    chunk = chunks.read_index(index_path)[i]
    report = Report()
    sp, tp = Preparer.from_settings(src_lang, settings), Preparer.from_settings(tgt_lang, settings)
    last = time.monotonic()
    with atomic_writer(out_src) as fs, atomic_writer(out_tgt) as ft:
        for a, b in clean_pairs(chunks.read_pairs(src, tgt, chunk), sp, tp, settings, report):
            fs.write(a + "\n")
            ft.write(b + "\n")
            if time.monotonic() - last > 30:
                last = time.monotonic()
                log.info("chunk %d: %d of %d lines", i, report.lines_in, chunk.lines)
    write_json(out_report, {"chunk": i, **report.as_dict()})
    for kind, n in report.changes().items():
        log.warning("chunk %d: %d pairs had %s (counted as %r in %s)", i, n, FIX_WHAT[kind], kind, out_report)
    if report.step("non_empty").dropped:
        log.warning("chunk %d: %d pairs with an empty or whitespace-only side dropped (counted in %s)", i,
                    report.step("non_empty").dropped, out_report)
    log.info("chunk %d: %d → %d lines in %.1f s", i, report.lines_in, report.lines_out, report.seconds)
    return report


def _pair_hash(a: str, b: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{a}\t{b}".encode(), digest_size=8).digest(), "little")


def _merged(parts: Sequence[tuple[Path, Path, Path]], dedupe: bool) -> Iterator[tuple[str, str] | None]:
    """The chunks' pairs in order; a repeated pair (with `dedupe`) comes out as None."""
    seen: set[int] = set()
    for s, t, _ in parts:
        for a, b in zip(_decoded(s, 0, 1 << 62), _decoded(t, 0, 1 << 62), strict=True):
            if dedupe:
                h = _pair_hash(a, b)
                if h in seen:
                    yield None
                    continue
                seen.add(h)
            yield a, b


def empty_corpus_message(report: Report, corpus: str, where: Path) -> str:
    """Why no training pair is left: each filter step's drops, and the settings that loosen them."""
    drops = ", ".join(f"{s.name} dropped {s.dropped}" for s in report.steps if s.dropped) or "nothing was dropped"
    return (f"{corpus or where}: the training data is empty after filtering ({report.lines_in} pairs in; {drops}). "
            "Check the input files (empty or whitespace-only lines are dropped) and loosen the corpus' preprocess "
            "settings (min_words, max_words, max_ratio)")


def _test_sources(path: Path) -> list[str]:
    """The test sentences of a prepared source file, whitespace-normalised (empty lines left out)."""
    return [t for line in _decoded(path, 0, 1 << 62) if (t := " ".join(line.split()))]


REPEAT_SAMPLE = 32          # repeats are estimated on one pair in this many (memory: the sample's hashes)
REPEATED_SHARE = 0.10       # warn where about this share of the pairs, or more, repeat another pair
ONE_PAIR_SHARE = 0.01       # or where one pair makes up this share of them


class Repeats:
    """How much of a corpus is repeated pairs, estimated in bounded memory where they are not dropped:
    the pairs whose hash falls in one of REPEAT_SAMPLE classes (all copies of a pair fall in the same
    class, so the repeated share among them is the corpus') and every REPEAT_SAMPLE-th pair (a pair making
    up much of the corpus shows there in proportion, wherever its hash falls)."""

    def __init__(self) -> None:
        self.by_hash: Counter[int] = Counter()
        self.by_position: Counter[int] = Counter()
        self.pairs = 0

    def add(self, a: str, b: str) -> None:
        h = _pair_hash(a, b)
        if h % REPEAT_SAMPLE == 0:
            self.by_hash[h] += 1
        if self.pairs % REPEAT_SAMPLE == 0:
            self.by_position[h] += 1
        self.pairs += 1

    def as_dict(self) -> dict[str, Any]:
        by_hash, by_position = sum(self.by_hash.values()), sum(self.by_position.values())
        top = max(self.by_position.values(), default=0)
        # the hash classes estimate many pairs repeated a little; a few pairs repeated much may all miss
        # them, and show in the positions instead
        share = max(1 - len(self.by_hash) / by_hash if by_hash else 0.0,
                    1 - len(self.by_position) / by_position if by_position else 0.0)
        return {"pairs": self.pairs, "repeated_share": round(share, 4),
                "most_repeated_share": round(top / by_position, 4) if top > 1 else 0.0,
                "sampled_one_in": REPEAT_SAMPLE}


def data_warnings(report: Report, name: str, overlap: dict[str, Any] | None,
                  repeats: dict[str, Any] | None = None) -> list[str]:
    """What in the training data would mislead a user: both sides the same text in every pair (the same
    file given twice), test sentences that the model saw in training, many repeated pairs."""
    out = []
    if repeats and repeats["pairs"] >= 100 and (repeats["repeated_share"] >= REPEATED_SHARE
                                                or repeats["most_repeated_share"] >= ONE_PAIR_SHARE):
        out.append(f"{name}: about {repeats['repeated_share']:.0%} of the {repeats['pairs']} training pairs repeat "
                   f"another pair (one pair alone about {repeats['most_repeated_share']:.0%} of them): the model "
                   "learns the repeats more than the rest; check the corpus' files, or drop repeats with the "
                   "corpus setting preprocess: {dedupe: true}")
    pairs = next((s.kept for s in report.steps if s.name == "non_empty"), 0)
    if report.identical and report.identical == pairs:
        out.append(f"{name}: every one of the {pairs} training pairs has the same text on both sides: probably the "
                   "same file was given twice (as source and as target); check the corpus' train files")
    if overlap and overlap["in_training"]:
        out.append(f"{name}: {overlap['in_training']} of the {overlap['sentences']} test sentences "
                   f"({overlap['share']:.1%}) in {overlap['test_src']} occur as sources in the training data: BLEU on "
                   "this test set overstates the model; check that the test files are not part of the training "
                   "files (or take another test set)")
    return out


def merge(parts: Sequence[tuple[Path, Path, Path]], out_src: Path, out_tgt: Path, out_report: Path,
          dedupe: bool, extra: dict[str, Any] | None = None, max_pairs: int | None = None,
          seed: int = 1, test_src: Path | None = None) -> Report:
    """Concatenate cleaned chunks in order, dropping repeated pairs if `dedupe`; sum the reports.

    Duplicates are found by a 64-bit hash per pair (8 bytes of blake2b): memory grows with the
    number of distinct pairs (about 60 bytes each), not with their text. With `max_pairs` (the small
    scale's cap), a uniform random sample of that many pairs (fixed `seed`) is kept, in corpus order.
    With `test_src` (the prepared test source), the test sentences that occur as training sources are
    counted (`test_overlap`). Misleading data is warned about and listed under `warnings`.
    """
    report = Report()
    for _, _, r in parts:
        report.add(Report.from_dict(read_json(r)))
    t0 = time.perf_counter()
    keep: set[int] | None = None
    if max_pairs:
        total = sum(1 for p in _merged(parts, dedupe) if p is not None)
        if total > max_pairs:
            keep = set(random.Random(seed).sample(range(total), max_pairs))
    step = report.step("dedupe") if dedupe else None
    cap = report.step("max_pairs") if keep is not None else None
    tests = _test_sources(test_src) if test_src else []
    repeats = None if dedupe else Repeats()
    probe, seen_tests = set(tests), set()             # the test set is small: its strings are looked up
    i = 0
    with atomic_writer(out_src) as fs, atomic_writer(out_tgt) as ft:
        for pair in _merged(parts, dedupe):
            if pair is None:
                step.dropped += 1                        # type: ignore[union-attr]
                continue
            if step is not None:
                step.kept += 1
            i += 1
            if keep is not None and cap is not None:
                if i - 1 not in keep:
                    cap.dropped += 1
                    continue
                cap.kept += 1
            fs.write(pair[0] + "\n")
            ft.write(pair[1] + "\n")
            if repeats is not None:
                repeats.add(*pair)
            if probe and (t := " ".join(pair[0].split())) in probe:
                seen_tests.add(t)
        if report.lines_out == 0:        # raised inside the writers: no empty training files are left
            raise InputError(empty_corpus_message(report, (extra or {}).get("corpus", ""), out_src))
    report.seconds += time.perf_counter() - t0
    name = (extra or {}).get("corpus") or str(out_src)
    overlap = None
    if test_src:
        found = sum(t in seen_tests for t in tests)
        overlap = {"test_src": str(test_src), "sentences": len(tests), "in_training": found,
                   "share": round(found / len(tests), 4) if tests else 0.0}
    repeated = repeats.as_dict() if repeats else None
    warnings = data_warnings(report, name, overlap, repeated)
    write_json(out_report, {**(extra or {}), "chunks": len(parts), **report.as_dict(), "warnings": warnings,
                            **({"test_overlap": overlap} if overlap else {}),
                            **({"repeats": repeated} if repeated else {})})
    for w in warnings:
        log.warning("%s", w)
    for kind, n in report.changes().items():
        log.warning("%s: %d pairs had %s; counted as %r in %s", name, n, FIX_WHAT[kind], kind, out_report)
    log.info("merged %d chunks: %d → %d lines", len(parts), report.lines_in, report.lines_out)
    return report


def _fixed(path: Path) -> Iterator[str]:
    """The lines of a dev/test file after `fix_text`; once read, a warning counts each kind of change
    (dev/test text has no report file: the log is where it shows)."""
    changed = dict.fromkeys(TEXT_FIXES, 0)
    for line in _decoded(path, 0, 1 << 62):
        line, kinds = fix_text(line)
        for kind in kinds:
            changed[kind] += 1
        yield line
    for kind, n in changed.items():
        if n:
            log.warning("%s: %d lines had %s", path, n, FIX_WHAT[kind])


def prepare_text(inp: Path, out: Path, preparer: Preparer) -> int:
    """Prepare a dev/test file line by line (no filtering: every line is kept). A file without a
    sentence (empty, or every line empty once prepared) is an InputError: nothing could be scored."""
    n = sentences = 0
    drop_extra_references(out)              # the file's references are its input's, none written before
    with atomic_writer(out) as f:
        for line in _fixed(inp):
            prepared = preparer(line)
            f.write(prepared + "\n")
            n += 1
            sentences += bool(prepared.strip())
        if not sentences:                  # raised inside the writer: no empty file is left
            why = "the file is empty" if n == 0 else f"all {n} lines are empty after preparing"
            raise InputError(f"{inp}: no sentences ({why}); " + EMPTY_EVAL_FIX)
    copy_refs_prepared(inp, out, preparer)
    return n


def copy_refs_prepared(inp: Path, out: Path, preparer: Preparer) -> int:
    """Prepare the extra references of a multi-reference set as the first one."""
    refs = _ref_files(inp)
    for k, src in enumerate(refs, 1):
        with atomic_writer(out.with_name(f"{out.name}.ref{k}")) as f:
            f.writelines(preparer(line) + "\n" for line in _fixed(src))
    return len(refs)
