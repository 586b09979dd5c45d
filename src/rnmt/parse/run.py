"""Parse one chunk of a tokenized text file with stanza.Pipeline (POS tagging, dependency parsing).

The input is pretokenized: stanza keeps exactly the corpus' tokens (Moses escapes undone for the
parser, the original tokens written back as forms), so the trees align with the text line by line.
Chunk k of n is the lines [k·N/n, (k+1)·N/n); the chunks' CoNLL-U files are concatenated in order.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Sequence
from pathlib import Path

from rnmt.data.conll import Sentence, Word
from rnmt.data.labels import write_aligned_conllu
from rnmt.io import InputError, atomic_writer, read_lines
from rnmt.parse.models import pipeline_kwargs

log = logging.getLogger(__name__)


def chunk_range(n_lines: int, chunk: int, chunks: int) -> tuple[int, int]:
    if not 0 <= chunk < chunks:
        raise InputError(f"chunk {chunk} is outside 0..{chunks - 1}")
    return chunk * n_lines // chunks, (chunk + 1) * n_lines // chunks


def make_pipeline(model_dir: str | Path, lang: str, device: str = "cpu", batch_size: int = 1000):  # noqa: ANN201
    import stanza

    kwargs = pipeline_kwargs(model_dir, lang)
    return stanza.Pipeline(**kwargs, device=device, pos_batch_size=batch_size, depparse_batch_size=batch_size,
                           logging_level="WARN")


def parse_tokens(nlp, lines: Sequence[list[str]], block: int = 2000) -> list[Sentence]:  # noqa: ANN001
    """One tree per non-empty line (token lists), in order."""
    todo = [words for words in lines if words]
    out: list[Sentence] = []
    for s in range(0, len(todo), block):
        doc = nlp([[html.unescape(t) for t in words] for words in todo[s:s + block]])
        for words, sent in zip(todo[s:s + block], doc.sentences, strict=True):
            if len(sent.words) != len(words):
                raise InputError(f"stanza returned {len(sent.words)} words for a line of {len(words)} tokens: "
                                 f"{' '.join(words)[:200]!r}")
            ws = [Word(t, w.upos or "_", int(w.head), w.deprel or "dep") for t, w in zip(words, sent.words,
                                                                                          strict=True)]
            out.append(Sentence(ws, [(i, i + 1) for i in range(len(ws))]))
        log.info("parsed %d / %d sentences", min(s + block, len(todo)), len(todo))
    return out


def parse_file(model_dir: str | Path, lang: str, text: str | Path, output: str | Path, chunk: int = 0,
               chunks: int = 1, device: str = "cpu", batch_size: int = 1000) -> int:
    """Parse chunk `chunk` of `chunks` of a tokenized file into CoNLL-U; returns the number of lines."""
    lines = [line.split() for line in read_lines(text)]
    a, b = chunk_range(len(lines), chunk, chunks)
    part = lines[a:b]
    trees = parse_tokens(make_pipeline(model_dir, lang, device, batch_size), part) if any(part) else []
    it = iter(trees)
    write_aligned_conllu(output, ((next(it) if words else Sentence([], []), words) for words in part), a + 1)
    return len(part)


def merge(parts: Sequence[str | Path], output: str | Path) -> None:
    with atomic_writer(output) as f:
        for p in parts:
            f.write(Path(p).read_text(encoding="utf-8"))
