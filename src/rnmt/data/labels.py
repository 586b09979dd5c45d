"""Dependency labels as a source factor (the UD paper): one label per word, then one per subword.

- A word's label is the Universal Dependencies relation of its head word (`acl:relcl` → `acl` unless
  subtypes are kept); a multiword token takes the relation of its part attached outside it.
- Sentences are matched to a text file line by line on their words (lower-cased, Moses escapes undone).
  Where the text file lost lines to cleaning or to a subword limit (it has fewer lines than the
  trees), trees are skipped in order until the words match; any other mismatch stops with an error
  naming the line, both word sequences and their lengths.
- BPE projection: every subword of a word carries the word's label, so label and subword lines have
  the same length (checked once more when written).
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from rnmt.data import conll
from rnmt.data.bpe import SEPARATOR
from rnmt.data.conll import Sentence, format_sentence
from rnmt.io import InputError, atomic_writer, iter_lines


def word_labels(sent: Sentence, subtypes: bool = False) -> list[str]:
    """One label per surface token."""
    labels = [sent.words[h].deprel for h in sent.token_heads()]
    return labels if subtypes else [lab.split(":", 1)[0] for lab in labels]


def key(tokens: Sequence[str]) -> tuple[str, ...]:
    """Tokens compared case-insensitively and without Moses' XML escapes (&apos; &quot; &amp; ...)."""
    return tuple(html.unescape(t).lower() for t in tokens)


def subword_groups(line: str) -> list[list[str]]:
    """The subwords of a BPE line grouped by word (a subword ending in @@ continues into the next)."""
    groups: list[list[str]] = []
    current: list[str] = []
    for sw in line.split():
        current.append(sw)
        if not sw.endswith(SEPARATOR):
            groups.append(current)
            current = []
    if current:
        groups.append(current)
    return groups


def unsegment(line: str) -> list[str]:
    return ["".join(sw[: -len(SEPARATOR)] if sw.endswith(SEPARATOR) else sw for sw in g)
            for g in subword_groups(line)]


def _show(words: Sequence[str], limit: int = 12) -> str:
    text = " ".join(words[:limit])
    return text + (" ..." if len(words) > limit else "")


def align(sentences: Iterable[Sentence], n_sentences: int, lines: Iterable[list[str]], n_lines: int,
          tree_file: str, text_file: str) -> Iterator[Sentence]:
    """The tree of each text line (token list), in order; streams both.

    `n_sentences` trees for `n_lines` non-empty lines: at most the difference is skipped (trees of lines
    that cleaning dropped); an empty line gets an empty sentence.
    """
    skips = n_sentences - n_lines
    if skips < 0:
        raise InputError(f"{text_file} has {n_lines} (non-empty) lines but {tree_file} only {n_sentences} "
                         "sentences: the trees must cover every line (parse the same split, or give the CoNLL-U "
                         "file of this split)")
    trees = iter(sentences)
    j = 0                                         # trees consumed
    for i, words in enumerate(lines):
        if not words:                             # an empty line has no tree (and no labels)
            yield Sentence([], [])
            continue
        want = key(words)
        first: Sentence | None = None
        start = j
        for s in trees:
            j += 1
            first = first or s
            if key(s.forms) == want:
                break
            if j - start > skips:
                s = None
                break
        else:
            s = None
        if s is None:
            theirs = f"sentence {start + 1} (line {first.line}) has {len(first.forms)} words: " \
                f"{_show(first.forms)!r}" if first else "no sentence is left"
            raise InputError(f"{text_file}, sentence {i + 1}: its {len(words)} words {_show(words)!r} do not match "
                             f"the tree in {tree_file}: {theirs}. The label files are misaligned with the text; "
                             "rebuild the labels from this corpus' own text (pretokenized, same splits)")
        skips -= j - start - 1
        yield s


def project(labels: Sequence[str], bpe_line: str, where: str) -> list[str]:
    """One label per subword; `where` names the sentence in the error when the word counts differ."""
    groups = subword_groups(bpe_line)
    if len(groups) != len(labels):
        raise InputError(f"{where}: {len(groups)} words in the subword line {_show(unsegment(bpe_line))!r} but "
                         f"{len(labels)} labels {_show(labels)!r}; labels and text must come from the same "
                         "tokenization")
    return [lab for g, lab in zip(groups, labels, strict=True) for _ in g]


def write_aligned_conllu(path: str | Path, pairs: Iterable[tuple[Sentence, list[str]]], first_line: int = 1) -> int:
    """(tree, text tokens) pairs written with the text's own tokens as forms and the text's line number as
    sent_id (the first pair is line `first_line`); returns the number of pairs."""
    k = first_line - 1
    with atomic_writer(path) as f:
        for k, (s, words) in enumerate(pairs, first_line):
            if not words:
                continue
            heads = s.token_heads()
            tok_heads = []
            for w in heads:                       # a token's head: the token holding its head word
                h = s.words[w].head
                tok_heads.append(0 if h == 0 else 1 + next(t for t, (a, b) in enumerate(s.tokens) if a < h <= b))
            f.write(format_sentence(list(words), [s.words[w].upos for w in heads], tok_heads,
                                    [s.words[w].deprel for w in heads], [f"# sent_id = {k}"]))
    return k - first_line + 1


def write_bpe_labels(path: str | Path, pairs: Iterable[tuple[Sentence, str]], bpe_file: str,
                     subtypes: bool = False) -> int:
    """(tree, BPE line) pairs → one label line per BPE line; returns the lines written."""
    i = 0
    with atomic_writer(path) as f:
        for i, (s, line) in enumerate(pairs, 1):
            f.write(" ".join(project(word_labels(s, subtypes), line, f"{bpe_file}, sentence {i}")) + "\n")
    return i


def text_lines(path: str | Path) -> Iterator[str]:
    """A text file's lines one at a time, without newlines."""
    from rnmt.data.bpe import file_lines

    return file_lines([path])


def count_nonempty(path: str | Path) -> int:
    return sum(1 for line in text_lines(path) if line.strip())


def align_files(tree_files: Sequence[str | Path], text_file: str | Path,
                words: Callable[[str], list[str]] = str.split) -> Iterator[tuple[Sentence, str]]:
    """(tree, text line) for each line of `text_file`: the trees of `tree_files` (in order) matched to the
    lines' words (`words` splits a line into them), streaming every file."""
    trees = align((s for p in tree_files for s in conll.iter_sentences(p)),
                  sum(conll.count_sentences(p) for p in tree_files), (words(x) for x in text_lines(text_file)),
                  count_nonempty(text_file), ", ".join(map(str, tree_files)), str(text_file))
    return zip(trees, text_lines(text_file), strict=True)


def read_labels(path: str | Path, lengths: Sequence[int] | None = None, text_file: str = "") -> list[list[str]]:
    """Label lines; with `lengths` (subwords per line of `text_file`) each line's length is checked."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: label file not found")
    out = [line.split() for line in iter_lines(path)]
    if lengths is not None:
        if len(out) != len(lengths):
            raise InputError(f"{path} has {len(out)} lines but {text_file} has {len(lengths)}; a label file must "
                             "have one line per sentence of its text")
        for i, (lab, n) in enumerate(zip(out, lengths, strict=True), 1):
            if len(lab) != n:
                raise InputError(f"{path}, sentence {i}: {len(lab)} labels for {n} subwords in {text_file}; "
                                 "rebuild the labels from this BPE file (every subword carries its word's label)")
    return out
