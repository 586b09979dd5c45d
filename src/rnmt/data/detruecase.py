"""Undo truecasing on tokenized output (as Moses' detruecase.perl does): a sentence's first word, and
the first word after a sentence-final token, get an upper-case first letter."""

from __future__ import annotations

SENTENCE_END = {".", "?", "!", ":"}
OPENERS = {"&quot;", "&apos;", "\"", "'", "(", "[", "«", "„", "“", "-"}


def detruecase(line: str) -> str:
    out, start = [], True
    for tok in line.split():
        if start and tok[:1].isalpha():
            tok = tok[0].upper() + tok[1:]
            start = False
        elif start and tok not in OPENERS:
            start = False
        start = start or tok in SENTENCE_END
        out.append(tok)
    return " ".join(out)
