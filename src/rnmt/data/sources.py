"""Corpus sources: where one piece of parallel text comes from, parsed from the registry.

Kinds (the prefix of `source:`):
- `mtdata:<ID>`: an mtdata dataset id (mtdata downloads, caches and parses it);
- `sacrebleu:<set>:<pair>`: a sacrebleu test set (sacrebleu downloads and caches it);
- `url:<URL>`: an archive or file; `{lang}` in the URL makes one download per language; `files`
  names the member(s) per language, `sha256` pins each downloaded file (null where not known);
- `manual:<folder>`: files the user obtains (LDC); `files` names them per language under the
  corpus' `manual_dir`, `ldc` lists the catalogue entries they come from;
- `local:<folder>` and `synthetic:<name>`: whole corpora (config entries), not registry sources.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rnmt.io import InputError

KINDS = ("mtdata", "sacrebleu", "url", "manual", "local", "synthetic")
_MTDATA_LANGS = {"deu": "de", "eng": "en", "fra": "fr", "ron": "ro", "zho": "zh", "cmn": "zh"}


def split_source(text: str, where: str) -> tuple[str, str]:
    """`kind:rest` → (kind, rest), with an error naming `where` and the known kinds."""
    kind, sep, rest = str(text).partition(":")
    if not sep or kind not in KINDS or not rest:
        raise InputError(f"{where}: source {text!r} is not of the form <kind>:<spec>; kinds: {', '.join(KINDS)}")
    return kind, rest


@dataclass(frozen=True)
class Source:
    """One registry source: a parallel text in two languages (and, for test sets, more references)."""

    id: str
    kind: str
    spec: str
    langs: tuple[str, str]
    files: dict[str, list[str]] = field(default_factory=dict)
    sha256: dict[str, str | None] = field(default_factory=dict)
    ldc: tuple[str, ...] = ()
    note: str = ""

    @classmethod
    def from_entry(cls, sid: str, e: dict[str, Any], where: str) -> Source:
        kind, spec = split_source(e.get("source", ""), f"{where}: sources.{sid}")
        if kind in ("local", "synthetic"):
            raise InputError(f"{where}: sources.{sid}: {kind}: is a whole corpus, set it in a config corpus entry")
        langs = tuple(e.get("langs") or cls._langs_from_spec(kind, spec, f"{where}: sources.{sid}"))
        if len(langs) != 2:
            raise InputError(f"{where}: sources.{sid}: 'langs' must name two languages, e.g. [de, en]")
        files = {lang: ([v] if isinstance(v, str) else list(v)) for lang, v in (e.get("files") or {}).items()}
        if kind in ("url", "manual") and "{lang}" not in spec and set(files) != set(langs):
            raise InputError(f"{where}: sources.{sid}: 'files' must name the file or archive member of each "
                             f"language {list(langs)}; it names {sorted(files)}")
        if kind == "manual" and not e.get("ldc"):
            raise InputError(f"{where}: sources.{sid}: a manual source lists its LDC catalogue entries in 'ldc'")
        src = cls(sid, kind, spec, (str(langs[0]), str(langs[1])), files, dict(e.get("sha256") or {}),
                  tuple(e.get("ldc") or ()), str(e.get("note", "")))
        for name in src.sha256:
            if name not in {d for d, _ in src.downloads()}:
                raise InputError(f"{where}: sources.{sid}: sha256 pins {name!r}, which is not one of its downloads "
                                 f"({', '.join(d for d, _ in src.downloads())})")
        return src

    @staticmethod
    def _langs_from_spec(kind: str, spec: str, where: str) -> tuple[str, str]:
        if kind == "mtdata":
            parts = spec.split("-")
            if len(parts) != 5:
                raise InputError(f"{where}: mtdata id {spec!r} is not <group>-<name>-<version>-<l1>-<l2>")
            return _MTDATA_LANGS.get(parts[3], parts[3]), _MTDATA_LANGS.get(parts[4], parts[4])
        if kind == "sacrebleu":
            m = re.fullmatch(r"(.+):([a-z]{2,3})-([a-z]{2,3})", spec)
            if not m:
                raise InputError(f"{where}: sacrebleu source {spec!r} is not <test set>:<l1>-<l2>, "
                                 "e.g. wmt14/full:en-de")
            return m.group(2), m.group(3)
        raise InputError(f"{where}: a {kind}: source names its two languages in 'langs', e.g. [de, en]")

    def identity(self) -> dict[str, Any]:
        """What the fetched text is made from (kept beside it as FETCHED): its kind, spec, languages and
        archive members. A sha256 pin or a note changes no text."""
        return {"id": self.id, "kind": self.kind, "spec": self.spec, "langs": list(self.langs),
                "files": {lang: list(v) for lang, v in sorted(self.files.items())}}

    def downloads(self) -> list[tuple[str, str]]:
        """(file name under the download folder, URL) of each file a `url:` source needs."""
        if self.kind != "url":
            return []
        urls = [self.spec.format(lang=lang) for lang in self.langs] if "{lang}" in self.spec else [self.spec]
        return [(download_name(u), u) for u in urls]

    def members(self, lang: str) -> list[str | None]:
        """The archive members (None: the downloaded file itself) that make up one language's side."""
        return list(self.files.get(lang) or [None])

    def download_for(self, lang: str) -> str:
        """The downloaded file that holds `lang` (url sources)."""
        names = self.downloads()
        return names[self.langs.index(lang)][0] if "{lang}" in self.spec else names[0][0]


FETCHED = "source.json"       # beside a fetched source's text: Source.identity() of what it was fetched from


def download_name(url: str) -> str:
    """A file name for a URL: its last path part, or its query's last part (download.php?f=X/y.zip)."""
    parts = urlsplit(url)
    name = Path(parts.path).name
    if parts.query:
        name = re.split(r"[/=&]", parts.query)[-1] or name
    name = re.sub(r"[^A-Za-z0-9._+-]", "_", name)
    if not name or name.startswith("."):
        raise InputError(f"cannot name a download for {url!r}; give the source another URL")
    return name


def manual_paths(src: Source, manual_dir: Path) -> dict[str, list[Path]]:
    """The user-supplied files of a manual source, per language."""
    base = manual_dir / src.spec
    return {lang: [base / f for f in src.files[lang]] for lang in src.langs}


def missing_manual_message(src: Source, manual_dir: Path, corpus: str) -> str | None:
    """None when every file of a manual source is present; else what to obtain and where to put it.

    `corpus` names the corpus (or the comma-separated corpora) that need the source.
    """
    paths = manual_paths(src, manual_dir)
    missing = [p for ps in paths.values() for p in ps if not p.is_file()]
    if not missing:
        return None
    lines = [f"{corpus or 'this corpus'} needs source {src.id!r} ({src.note or 'licensed data'}), which cannot be "
             "downloaded: obtain it from the Linguistic Data Consortium (catalogue entries "
             f"{', '.join(src.ldc)}) and put these files there:"]
    for lang, ps in paths.items():
        lines += [f"    {p}  ({lang}{'' if p.is_file() else ', missing'})" for p in ps]
    lines.append(f"  or give another folder as corpora.<name>.manual_dir (for {corpus or 'the corpus'}; "
                 f"now {manual_dir})")
    return "\n".join(lines)
