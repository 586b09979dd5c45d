"""Moses tokenization and detokenization (sacremoses), the way the papers preprocessed text."""

from __future__ import annotations

from functools import lru_cache

from sacremoses import MosesDetokenizer, MosesPunctNormalizer, MosesTokenizer

DASH_SPLIT = " @-@ "      # how aggressive dash splitting writes the hyphen inside a word ("Test @-@ Fall")


@lru_cache(maxsize=8)
def _tokenizer(lang: str) -> MosesTokenizer:
    return MosesTokenizer(lang=lang)


@lru_cache(maxsize=8)
def _detokenizer(lang: str) -> MosesDetokenizer:
    return MosesDetokenizer(lang=lang)


@lru_cache(maxsize=8)
def _normalizer(lang: str) -> MosesPunctNormalizer:
    return MosesPunctNormalizer(lang=lang)


def tokenize(line: str, lang: str, escape: bool = True, normalize: bool = True,
             lowercase: bool = False) -> str:
    """Punctuation-normalise and Moses-tokenize one line; `escape` writes &apos; &quot; etc. as Moses does."""
    if normalize:
        line = _normalizer(lang).normalize(line)
    out = _tokenizer(lang).tokenize(line, escape=escape, return_str=True, aggressive_dash_splits=True)
    return out.lower() if lowercase else out


def detokenize(line: str, lang: str, unescape: bool = True) -> str:
    """Undo Moses tokenization (including its escapes and the aggressive-dash `@-@` marks)."""
    tokens = line.replace(DASH_SPLIT, "-").split()
    return _detokenizer(lang).detokenize(tokens, unescape=unescape)


def postprocess(segmented: str, lang: str, detruecase: bool = False) -> tuple[str, str]:
    """A translation's subwords → (the tokenized words, detruecased where the corpus truecases; the
    detokenized text): what the rule `postprocess` writes and a bundle prints."""
    from rnmt.data.bpe import undo

    tok = undo(segmented)
    if detruecase:              # Moses' detruecase.perl: sentence starts (also after . ? ! :) capitalised
        from sacremoses import MosesDetruecaser

        tok = MosesDetruecaser().detruecase(tok, return_str=True)
    return tok, detokenize(tok, lang)
