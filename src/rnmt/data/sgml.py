"""Segments of the SGML files of WMT and NIST test sets (`<seg id="1">text</seg>`).

A NIST reference file holds several translations of the same documents, one `<doc sysid=...>`
per reference translator; they come back as separate, line-aligned lists in document order.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable

_DOC = re.compile(r"<doc\b([^>]*)>", re.I)
_SYSID = re.compile(r"""sysid\s*=\s*["']?([^"'\s>]+)""", re.I)
_DOCID = re.compile(r"""docid\s*=\s*["']?([^"'\s>]+)""", re.I)
_SEG = re.compile(r"<seg\b[^>]*>(.*?)</seg>", re.I | re.S)


def segments(lines: Iterable[str]) -> dict[str, list[str]]:
    """Segment texts per system id (one key, '', for a plain source or single-reference file).

    Each reference's documents are put in the order of the first reference's document ids, so
    the lists align line by line even where translators' files order documents differently.
    """
    per_sys: dict[str, dict[str, list[str]]] = {}
    order: list[str] = []
    sysid, docid = "", ""
    for line in lines:
        m = _DOC.search(line)
        if m:
            s, d = _SYSID.search(m.group(1)), _DOCID.search(m.group(1))
            sysid = s.group(1) if s else ""
            docid = d.group(1) if d else str(len(per_sys.get(sysid, {})))
            per_sys.setdefault(sysid, {})[docid] = []
            if len(per_sys) == 1 and docid not in order:
                order.append(docid)
        for seg in _SEG.findall(line):
            per_sys.setdefault(sysid, {}).setdefault(docid, []).append(" ".join(html.unescape(seg).split()))
    out = {}
    for s, docs in per_sys.items():
        ids = order if set(docs) == set(order) else list(docs)
        out[s] = [seg for d in ids for seg in docs[d]]
    return out
