"""The embedded demo corpus: a synthetic language pair generated from a small grammar.

The source side is English-like (SVO, adjectives before nouns, prepositions, relative clauses with
"that") and every source sentence comes with its gold Universal Dependencies tree. The target side is
an invented language that makes a translation model need what real MT needs:

- different word order: subject, verb-attached phrases, object, adverb, then the verb (SOV);
  adjectives follow their noun; postpositions instead of prepositions;
- agreement: nouns have a lexical gender that the source does not show; determiners and adjectives
  agree with their noun in gender and number, verbs with their subject;
- long-distance dependencies: a relative clause sits between a subject and its verb, so the verb's
  agreement depends on a noun many tokens back;
- lexical ambiguity: some verbs translate differently for animate and inanimate objects, and some
  adjectives for animate and inanimate nouns.

The target lexicon is derived from a fixed language seed (so the language is the same for every
corpus); sentences are drawn from the corpus seed. Same seeds, same bytes. The language (vocabulary and
grammar) is rnmt.data.synthetic_grammar's; this module writes its sentences out in both languages, the
source with its dependency tree.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rnmt.data.synthetic_grammar import (
    LANGUAGE_SEED,
    NAMES,
    NOMINAL_SUFFIX,
    RELATIVIZER,
    SOURCE_DETERMINERS,
    TARGET_DETERMINERS,
    VERB_SUFFIX,
    Clause,
    Grammar,
    Lexicon,
    NounPhrase,
    PrepPhrase,
    RelClause,
)
from rnmt.io import atomic_writer


# ---- source realisation with a dependency tree ----------------------------------------------------
@dataclass
class Token:
    form: str
    lemma: str
    upos: str
    feats: str
    deprel: str
    head: Token | None = None       # None: the root


def _plural(noun: str) -> str:
    return noun + "s"


def _verb_3rd(verb: str, number: str) -> str:
    return verb + "s" if number == "sg" else verb


class SourceRealiser:
    def np(self, np: NounPhrase, head: Token | None, deprel: str, case: str | None = None) -> list[Token]:
        if np.is_name:
            noun = Token(np.noun, np.noun, "PROPN", "Number=Sing", deprel, head)
        else:
            form = np.noun if np.number == "sg" else _plural(np.noun)
            noun = Token(form, np.noun, "NOUN", "Number=" + ("Sing" if np.number == "sg" else "Plur"),
                         deprel, head)
        toks: list[Token] = []
        if case is not None:
            toks.append(Token(case, case, "ADP", "_", "case", noun))
        if np.det is not None:
            det = SOURCE_DETERMINERS[(np.det, np.number)]
            feats = {"def": "Definite=Def|PronType=Art", "indef": "Definite=Ind|PronType=Art",
                     "dem": "PronType=Dem"}[np.det]
            toks.append(Token(det, det if np.det != "dem" else "this", "DET", feats, "det", noun))
        toks += [Token(a, a, "ADJ", "Degree=Pos", "amod", noun) for a in np.adjectives]
        toks.append(noun)
        if np.pp is not None:
            toks += self.np(np.pp.np, noun, "nmod", case=np.pp.prep)
        if np.rel is not None:
            toks += self.rel(np.rel, noun, np.number)
        return toks

    def verb(self, lemma: str, number: str, head: Token | None, deprel: str) -> Token:
        feats = "Mood=Ind|Number=" + ("Sing" if number == "sg" else "Plur") + "|Person=3|Tense=Pres|VerbForm=Fin"
        return Token(_verb_3rd(lemma, number), lemma, "VERB", feats, deprel, head)

    def rel(self, rel: RelClause, head_noun: Token, head_number: str) -> list[Token]:
        that = Token("that", "that", "PRON", "PronType=Rel", "nsubj" if rel.role == "subj" else "obj")
        if rel.role == "subj":
            verb = self.verb(rel.verb, head_number, head_noun, "acl:relcl")
            that.head = verb
            toks = [that, verb]
            if rel.other is not None:
                toks += self.np(rel.other, verb, "obj")
            return toks
        assert rel.other is not None
        verb = self.verb(rel.verb, rel.other.number, head_noun, "acl:relcl")
        that.head = verb
        return [that, *self.np(rel.other, verb, "nsubj"), verb]

    def clause(self, c: Clause) -> list[Token]:
        verb = self.verb(c.verb, c.subj.number, None, "root")
        toks = self.np(c.subj, verb, "nsubj")
        if c.adverb is not None:
            toks.append(Token(c.adverb, c.adverb, "ADV", "_", "advmod", verb))
        toks.append(verb)
        if c.obj is not None:
            toks += self.np(c.obj, verb, "obj")
        if c.pp is not None:
            toks += self.np(c.pp.np, verb, "obl", case=c.pp.prep)
        toks.append(Token(".", ".", "PUNCT", "_", "punct", verb))
        return toks


# ---- target realisation ---------------------------------------------------------------------------
class TargetRealiser:
    def __init__(self, lex: Lexicon) -> None:
        self.lex = lex

    def gender(self, np: NounPhrase) -> str:
        return NAMES[np.noun] if np.is_name else self.lex.noun_gender[np.noun]

    def np(self, np: NounPhrase) -> list[str]:
        if np.is_name:
            words = [np.noun]
        else:
            g = self.gender(np)
            assert np.det is not None
            words = [TARGET_DETERMINERS[(np.det, g, np.number)],
                     self.lex.noun_stem[np.noun] + NOMINAL_SUFFIX[(g, np.number)]]
            for a in np.adjectives:
                stem = self.lex.adj_stem[a]
                if isinstance(stem, dict):
                    stem = stem[np.animate]
                words.append(stem + NOMINAL_SUFFIX[(g, np.number)])
        if np.pp is not None:
            words += self.pp(np.pp)
        if np.rel is not None:
            words += self.rel(np.rel, np)
        return words

    def pp(self, pp: PrepPhrase) -> list[str]:
        return [*self.np(pp.np), self.lex.postposition[pp.prep]]

    def verb(self, lemma: str, subj: NounPhrase, obj_animate: bool | None) -> str:
        stem = self.lex.verb_stem[lemma]
        if isinstance(stem, dict):
            stem = stem[bool(obj_animate)]
        return stem + VERB_SUFFIX[(self.gender(subj), subj.number)]

    def rel(self, rel: RelClause, head: NounPhrase) -> list[str]:
        if rel.role == "subj":
            obj = rel.other
            words = [RELATIVIZER, *(self.np(obj) if obj is not None else [])]
            return [*words, self.verb(rel.verb, head, obj.animate if obj is not None else None)]
        assert rel.other is not None
        return [RELATIVIZER, *self.np(rel.other), self.verb(rel.verb, rel.other, head.animate)]

    def clause(self, c: Clause) -> list[str]:
        words = self.np(c.subj)
        if c.pp is not None:
            words += self.pp(c.pp)
        if c.obj is not None:
            words += self.np(c.obj)
        if c.adverb is not None:
            words.append(self.lex.adverb[c.adverb])
        words.append(self.verb(c.verb, c.subj, c.obj.animate if c.obj is not None else None))
        return words


# ---- output ---------------------------------------------------------------------------------------
def _capitalise(s: str) -> str:
    return s[:1].upper() + s[1:]


def detokenised(forms: list[str]) -> str:
    """Plain text as a writer would type it: a capital first letter, the full stop attached."""
    text = " ".join(forms)
    return _capitalise(text.replace(" .", "."))


@dataclass
class SentencePair:
    source_tokens: list[Token]
    target_words: list[str]

    @property
    def source_text(self) -> str:
        return detokenised([t.form for t in self.source_tokens])

    @property
    def target_text(self) -> str:
        return detokenised([*self.target_words, "."])

    def conllu(self, sent_id: str) -> str:
        index = {id(t): i + 1 for i, t in enumerate(self.source_tokens)}
        lines = [f"# sent_id = {sent_id}", f"# text = {self.source_text}"]
        n = len(self.source_tokens)
        for i, t in enumerate(self.source_tokens):
            form = _capitalise(t.form) if i == 0 else t.form
            lemma = t.lemma if t.upos == "PROPN" else t.lemma.lower()
            head = 0 if t.head is None else index[id(t.head)]
            misc = "SpaceAfter=No" if i + 1 < n and self.source_tokens[i + 1].form == "." else "_"
            lines.append("\t".join([str(i + 1), form, lemma, t.upos, "_", t.feats, str(head), t.deprel,
                                    "_", misc]))
        return "\n".join(lines) + "\n\n"


def generate_pairs(seed: int, n: int, language_seed: int = LANGUAGE_SEED,
                   max_words: int | None = None) -> Iterator[SentencePair]:
    """Yield `n` sentence pairs drawn with `seed` (at most `max_words` source tokens each)."""
    rng = random.Random(seed)
    grammar, src, tgt = Grammar(rng), SourceRealiser(), TargetRealiser(Lexicon.build(language_seed))
    made = 0
    while made < n:
        clause = grammar.clause()
        toks = src.clause(clause)
        if max_words is not None and len(toks) > max_words:
            continue
        made += 1
        yield SentencePair(toks, tgt.clause(clause))


SPLITS = ("train", "dev", "test")


def write_corpus(out_dir: Path, sizes: dict[str, int], seed: int, language_seed: int = LANGUAGE_SEED,
                 max_words: int | None = None) -> dict[str, int]:
    """Write `{split}.src`, `{split}.tgt` and `{split}.src.conllu` for each split.

    Each split has its own seed derived from `seed`, so changing one split's size leaves the others'
    sentences unchanged. Test and dev sentences that also occur in train are skipped, so held-out
    scores measure generalisation. Returns the number of pairs written per split.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    written: dict[str, int] = {}
    for k, split in enumerate(SPLITS):
        n = sizes.get(split, 0)
        pairs = generate_pairs(seed * 1000 + k, 10**9, language_seed, max_words)
        with atomic_writer(out_dir / f"{split}.src") as fs, atomic_writer(out_dir / f"{split}.tgt") as ft, \
                atomic_writer(out_dir / f"{split}.src.conllu") as fc:
            count = 0
            for pair in pairs:
                if count >= n:
                    break
                text = pair.source_text
                if split != "train" and text in seen:
                    continue
                if split == "train":
                    seen.add(text)
                count += 1
                fs.write(text + "\n")
                ft.write(pair.target_text + "\n")
                fc.write(pair.conllu(f"{split}-{count}"))
        written[split] = count
    return written
