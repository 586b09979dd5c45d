"""Turning one registry source into plain text: one UTF-8 file per language, line-aligned.

Extra references of a multi-reference test set (NIST) go beside the target-language file as
`<file>.ref1`, `<file>.ref2`, ... (reference 0 is the file itself).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import IO

from rnmt.data import sgml
from rnmt.data.extract import open_member
from rnmt.data.sources import FETCHED, Source, manual_paths, missing_manual_message
from rnmt.io import InputError, atomic_writer, drop_extra_references, read_lines, split_lines, write_json

log = logging.getLogger(__name__)


def _write_texts(outs: dict[str, Path], texts: dict[str, list[list[str]]], where: str) -> dict[str, int]:
    """Write each language's first text to its file, further texts (references) to `.refN`."""
    counts = {lang: len(t[0]) for lang, t in texts.items()}
    if len(set(counts.values())) != 1:
        raise InputError(f"{where}: the languages have different numbers of segments {counts}; the files "
                         "must be line-aligned translations of each other")
    for lang, versions in texts.items():
        for k, lines in enumerate(versions):
            path = outs[lang] if k == 0 else outs[lang].with_name(f"{outs[lang].name}.ref{k}")
            with atomic_writer(path) as f:
                f.writelines(line + "\n" for line in lines)
    return counts


def _read_text(stream_bytes: bytes, where: str, name: str) -> list[list[str]]:
    """Lines of a plain file, or the segments (per reference) of an SGML file."""
    try:
        text = stream_bytes.decode("utf-8")
    except UnicodeDecodeError as e:
        line = stream_bytes[: e.start].count(b"\n") + 1
        raise InputError(f"{where}: {name}, line {line}: not valid UTF-8; convert it to UTF-8") from None
    lines = split_lines(text)
    if _is_sgml(name) or (lines and lines[0].lstrip().lower().startswith(("<srcset",
                                                                                                     "<refset"))):
        return list(sgml.segments(lines).values())
    return [[line.strip() for line in lines]]


def _is_sgml(name: str) -> bool:
    return name.endswith((".sgm", ".sgml", ".xml"))


def _copy_lines(stream: IO[bytes], out: IO[str], where: str) -> int:
    """Stream plain lines (whitespace-trimmed) from an archive member to `out`; return the count."""
    n = 0
    for n, raw in enumerate(stream, 1):
        try:
            out.write(" ".join(raw.decode("utf-8").split()) + "\n")
        except UnicodeDecodeError:
            raise InputError(f"{where}, line {n}: not valid UTF-8; convert it to UTF-8") from None
        if n % 1_000_000 == 0:
            log.info("%s: %d lines", where, n)
    return n


def fetch_archive_source(src: Source, download_dir: Path, outs: dict[str, Path]) -> dict[str, int]:
    """A `url:` source: members of the downloaded archive(s), streamed and concatenated per language."""
    counts: dict[str, int] = {}
    for lang in src.langs:
        archive = download_dir / src.download_for(lang)
        if not archive.is_file():
            raise InputError(f"{archive}: not downloaded; run `rnmt corpus download` for it first")
        n = 0
        with atomic_writer(outs[lang]) as out:
            for member in src.members(lang):
                where = f"{archive}:{member or archive.name}"
                with open_member(archive, member) as f:
                    if _is_sgml(member or archive.name):
                        segs = _read_text(f.read(), str(archive), member or "")[0]
                        out.writelines(line + "\n" for line in segs)
                        n += len(segs)
                    else:
                        n += _copy_lines(f, out, where)
        counts[lang] = n
    if len(set(counts.values())) != 1:
        raise InputError(f"{src.id}: the languages have different numbers of lines {counts}; check 'files' in "
                         "the registry (each language's members must be translations of each other, in order)")
    return counts


def fetch_manual_source(src: Source, manual_dir: Path, outs: dict[str, Path], corpus: str) -> dict[str, int]:
    """A `manual:` source: the user's files (plain or SGML), with every reference of SGML sets."""
    msg = missing_manual_message(src, manual_dir, corpus)
    if msg:
        raise InputError(msg)
    texts = {lang: [v for p in paths for v in _read_text(p.read_bytes(), src.id, str(p))]
             for lang, paths in manual_paths(src, manual_dir).items()}
    return _write_texts(outs, texts, src.id)


def fetch_sacrebleu_source(src: Source, outs: dict[str, Path]) -> dict[str, int]:
    """A `sacrebleu:<set>:<pair>` source via sacrebleu's own download, cache and checks."""
    from sacrebleu.dataset import DATASETS

    name, pair = src.spec.rsplit(":", 1)
    if name not in DATASETS:
        raise InputError(f"{src.id}: sacrebleu has no test set {name!r}")
    ds = DATASETS[name]
    if pair not in ds.langpairs:
        raise InputError(f"{src.id}: sacrebleu test set {name} has no pair {pair}; it has {', '.join(ds.langpairs)}")
    try:
        ds.process_to_text(pair)
    except (Exception, SystemExit) as e:        # sacrebleu raises, or exits, when a download fails
        raise InputError(f"{src.id}: sacrebleu could not get test set {name} from {', '.join(ds.data)} "
                         f"({type(e).__name__}: {e}). Without network here, run `sacrebleu -t {name} -l {pair} "
                         f"--echo src` on a machine that has one and copy its cache {ds._rawdir} ($SACREBLEU) "
                         "here") from None
    a, _ = pair.split("-")
    files = {a: [ds.get_source_file(pair)], src.langs[1 - src.langs.index(a)]: ds.get_reference_files(pair)}
    texts = {lang: [read_lines(f) for f in fs] for lang, fs in files.items()}
    return _write_texts(outs, texts, src.id)


def fetch_mtdata_source(src: Source, outs: dict[str, Path], cache_dir: Path | None = None, retries: int = 3,
                        backoff: float = 5.0) -> dict[str, int]:
    """An `mtdata:<ID>` source via mtdata's index, download cache ($MTDATA) and parsers.

    mtdata downloads without retrying, so a failed attempt is retried here with back-off; a
    download it completed is flagged in its cache and never fetched again.
    """
    import mtdata
    from mtdata.cache import Cache
    from mtdata.entry import DatasetId
    from mtdata.index import INDEX
    from mtdata.parser import Parser

    did = DatasetId.parse(src.spec)
    if did not in INDEX:
        raise InputError(f"{src.id}: mtdata has no dataset {src.spec!r} (mtdata list -id | grep -i ... finds ids)")
    entry = INDEX[did]
    cache = Cache(cache_dir or mtdata.cache_dir)
    for attempt in range(retries + 1):
        try:
            path = cache.get_entry(entry)
            break
        except Exception as e:         # mtdata raises assertions and requests' errors alike
            if attempt == retries:
                raise InputError(f"{src.id}: mtdata could not get {src.spec} from {entry.url} after {retries + 1} "
                                 f"attempts: {e!r}. Without network here, run `mtdata cache -di "
                                 f"{src.spec}` on a machine that has one and copy its cache ({cache.root}, "
                                 "$MTDATA) here") from None
            log.warning("%s: mtdata failed (%r); retrying in %.0f s", src.id, e, backoff * 2**attempt)
            time.sleep(backoff * 2**attempt)
    n, skipped = 0, 0
    a, b = src.langs
    with atomic_writer(outs[a]) as fa, atomic_writer(outs[b]) as fb:
        for rec in Parser(path, ext=entry.in_ext or None, ent=entry).read_segs(show_pbar=False):
            if len(rec) < 2:
                skipped += 1
                continue
            fa.write(" ".join(str(rec[0]).split()) + "\n")
            fb.write(" ".join(str(rec[1]).split()) + "\n")
            n += 1
    if skipped:
        log.warning("%s: %d records without two sides skipped", src.id, skipped)
    return {a: n, b: n}


def fetch(src: Source, out_dir: Path, download_dir: Path, manual_dir: Path, corpus: str = "") -> dict[str, int]:
    """Write `<out_dir>/<l1>-<l2>.<lang>` for both languages of `src`; return line counts."""
    a, b = src.langs
    outs = {lang: out_dir / f"{a}-{b}.{lang}" for lang in src.langs}
    out_dir.mkdir(parents=True, exist_ok=True)
    for path in outs.values():          # the source's references are those written below, none before
        drop_extra_references(path)
    if src.kind == "url":
        counts = fetch_archive_source(src, download_dir, outs)
    elif src.kind == "manual":
        counts = fetch_manual_source(src, manual_dir, outs, corpus or src.id)
    elif src.kind == "sacrebleu":
        counts = fetch_sacrebleu_source(src, outs)
    elif src.kind == "mtdata":
        counts = fetch_mtdata_source(src, outs)
    else:
        raise InputError(f"{src.id}: {src.kind}: sources are not fetched")
    write_json(out_dir / FETCHED, src.identity())      # what the text was made from (registry.check_fetched)
    log.info("%s: %s", src.id, ", ".join(f"{n} lines {lang}" for lang, n in counts.items()))
    return counts

