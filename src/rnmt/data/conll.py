"""Reading and writing dependency trees in CoNLL-U (and CoNLL-X, whose columns 1-8 are the same).

Each sentence keeps its surface tokens: a multiword token (CoNLL-U range line `3-4 du`, French
"de le") is one token whose head word is the part attached outside the range. Empty nodes (`5.1`)
are skipped. Errors name the file and line.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rnmt.io import InputError


@dataclass
class Word:
    form: str
    upos: str
    head: int              # 0: the root
    deprel: str


@dataclass
class Sentence:
    words: list[Word]
    tokens: list[tuple[int, int]] = field(default_factory=list)    # surface token → word span [a, b)
    line: int = 0                                                    # where it starts in its file
    comments: list[str] = field(default_factory=list)
    mwt_forms: dict[int, str] = field(default_factory=dict)         # first word index → multiword form

    @property
    def forms(self) -> list[str]:
        """Surface token forms (a multiword token once)."""
        return [self._token_form(a, b) for a, b in self.tokens]

    def _token_form(self, a: int, b: int) -> str:
        return self.mwt_forms.get(a, self.words[a].form) if b - a > 1 else self.words[a].form

    def token_heads(self) -> list[int]:
        """For each surface token, the index of its head word: the part whose head lies outside the token."""
        out = []
        for a, b in self.tokens:
            inside = [i for i in range(a, b) if not (a < self.words[i].head <= b)]
            out.append(inside[0] if inside else a)
        return out


def _sentences(lines: Iterable[str], path: str) -> Iterator[Sentence]:
    words: list[Word] = []
    tokens: list[tuple[int, int]] = []
    mwt: dict[int, str] = {}
    comments: list[str] = []
    start, pending_range = 0, None
    for n, raw in enumerate(lines, 1):
        line = raw.rstrip("\r\n")
        if not line.strip():
            if words:
                yield Sentence(words, tokens, start, comments, mwt)
            words, tokens, mwt, comments, pending_range, start = [], [], {}, [], None, 0
            continue
        start = start or n
        if line.startswith("#"):
            if not words:
                comments.append(line)
            continue
        cols = line.split("\t")
        if len(cols) != 10:
            raise InputError(f"{path}:{n}: a CoNLL-U/CoNLL-X line has 10 tab-separated columns, this one has "
                             f"{len(cols)}: {line[:80]!r}")
        wid = cols[0]
        if "." in wid:
            continue                                     # an empty node (enhanced dependencies)
        if "-" in wid:
            a, b = (int(x) for x in wid.split("-"))
            pending_range = (a, b)
            mwt[a - 1] = cols[1]
            continue
        try:
            i, head = int(wid), int(cols[6])
        except ValueError:
            raise InputError(f"{path}:{n}: the ID and HEAD columns must be integers, got {wid!r} and "
                             f"{cols[6]!r} (is this a parsed file?)") from None
        if i != len(words) + 1:
            raise InputError(f"{path}:{n}: word ID {i} out of sequence (expected {len(words) + 1}); a blank line "
                             "must end each sentence")
        words.append(Word(cols[1], cols[3], head, cols[7]))
        if pending_range and pending_range[0] == i:
            tokens.append((i - 1, pending_range[1]))
        elif not (pending_range and pending_range[0] < i <= pending_range[1]):
            tokens.append((i - 1, i))
    if words:
        yield Sentence(words, tokens, start, comments, mwt)


def iter_sentences(path: str | Path) -> Iterator[Sentence]:
    """The sentences of a file one at a time (corpus-sized files are never held in memory)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: CoNLL-U file not found")
    with open(path, encoding="utf-8") as f:
        for s in _sentences(f, str(path)):
            for w in s.words:
                if not 0 <= w.head <= len(s.words):
                    raise InputError(f"{path}:{s.line}: a head {w.head} outside the sentence of {len(s.words)} "
                                     "words")
            yield s


def read(path: str | Path) -> list[Sentence]:
    return list(iter_sentences(path))


def count_sentences(path: str | Path) -> int:
    """Sentences in a file, counted cheaply: each has exactly one word with ID 1."""
    if not Path(path).is_file():
        raise InputError(f"{path}: CoNLL-U file not found")
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in f if line.startswith("1\t"))


def format_sentence(forms: list[str], upos: list[str], heads: list[int], deprels: list[str],
                    comments: Iterable[str] = ()) -> str:
    """One sentence as CoNLL-U (lemma, xpos, feats, deps and misc left empty)."""
    lines = list(comments)
    for i, (f, u, h, d) in enumerate(zip(forms, upos, heads, deprels, strict=True), 1):
        lines.append("\t".join([str(i), f, "_", u, "_", "_", str(h), d, "_", "_"]))
    return "\n".join(lines) + "\n\n"


def attachment_scores(gold: list[Sentence], pred: list[Sentence]) -> dict[str, float]:
    """Unlabelled and labelled attachment scores (UAS, LAS) over all words, punctuation included."""
    if len(gold) != len(pred):
        raise InputError(f"attachment scores: {len(gold)} gold sentences but {len(pred)} parsed ones")
    words = heads = labelled = 0
    for k, (g, p) in enumerate(zip(gold, pred, strict=True), 1):
        if [w.form for w in g.words] != [w.form for w in p.words]:
            raise InputError(f"attachment scores: sentence {k} has other words in the parse than in the gold tree")
        for gw, pw in zip(g.words, p.words, strict=True):
            words += 1
            if gw.head == pw.head:
                heads += 1
                labelled += gw.deprel == pw.deprel
    return {"uas": heads / max(words, 1), "las": labelled / max(words, 1), "words": words}
