"""The synthetic pair's language (rnmt.data.synthetic): its vocabulary, with the target side's stems and
genders fixed by a language seed, and the grammar that draws a sentence's structure (clauses, noun
phrases, relative clauses, prepositional phrases) from a corpus seed; rnmt.data.synthetic writes each
structure out in both languages."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

LANGUAGE_SEED = 20181031

# ---- source lexicon (written for this project) ---------------------------------------------------
ANIMATE_NOUNS = ["dog", "cat", "bird", "horse", "farmer", "teacher", "doctor", "king", "soldier",
                 "singer", "baker", "friend", "student", "pilot", "rabbit"]
INANIMATE_NOUNS = ["house", "river", "book", "stone", "tree", "car", "ship", "letter", "garden",
                   "table", "apple", "road", "key", "bridge", "window", "lamp", "song", "picture"]
NAMES = {"Anna": "f", "Maria": "f", "Laura": "f", "Sofia": "f", "Elena": "f",
         "Peter": "m", "Paul": "m", "Marco": "m", "David": "m", "Tom": "m"}
ADJECTIVES = ["big", "small", "old", "young", "red", "green", "happy", "quiet", "strong", "clever",
              "dark", "tall", "heavy", "strange"]
AMBIGUOUS_ADJECTIVES = ["light", "hard"]          # target word depends on the noun's animacy
TRANSITIVE_VERBS = ["see", "like", "find", "follow", "help", "paint", "visit", "build", "want",
                    "need", "love", "hold", "greet", "keep", "bring"]
AMBIGUOUS_VERBS = ["take", "call", "play"]         # target word depends on the object's animacy
INTRANSITIVE_VERBS = ["sleep", "run", "sing", "laugh", "walk", "smile", "dance", "wait", "fall", "work"]
ADVERBS = ["quickly", "slowly", "often", "never", "always", "quietly", "today", "again"]
PREPOSITIONS = ["with", "near", "under", "behind", "from", "without"]

# ---- target function words and inflections --------------------------------------------------------
TARGET_DETERMINERS = {
    ("def", "m", "sg"): "lo", ("def", "f", "sg"): "la", ("def", "m", "pl"): "li", ("def", "f", "pl"): "le",
    ("indef", "m", "sg"): "un", ("indef", "f", "sg"): "una",
    ("indef", "m", "pl"): "certi", ("indef", "f", "pl"): "certe",
    ("dem", "m", "sg"): "kesto", ("dem", "f", "sg"): "kesta",
    ("dem", "m", "pl"): "kesti", ("dem", "f", "pl"): "keste",
}
SOURCE_DETERMINERS = {("def", "sg"): "the", ("def", "pl"): "the", ("indef", "sg"): "a",
                      ("indef", "pl"): "some", ("dem", "sg"): "this", ("dem", "pl"): "these"}
NOMINAL_SUFFIX = {("m", "sg"): "o", ("m", "pl"): "i", ("f", "sg"): "a", ("f", "pl"): "e"}
VERB_SUFFIX = {("m", "sg"): "et", ("f", "sg"): "at", ("m", "pl"): "ent", ("f", "pl"): "ant"}
RELATIVIZER = "ke"

_ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "tr", "pl", "sk"]
_VOWELS = ["a", "e", "i", "o", "u"]
_CODAS = ["", "", "", "n", "r", "l", "s"]


@dataclass(frozen=True)
class Lexicon:
    """The target side of the vocabulary: stems and genders, fixed by the language seed."""

    noun_stem: dict[str, str]
    noun_gender: dict[str, str]
    adj_stem: dict[str, str | dict[bool, str]]
    verb_stem: dict[str, str | dict[bool, str]]
    adverb: dict[str, str]
    postposition: dict[str, str]

    @classmethod
    def build(cls, seed: int = LANGUAGE_SEED) -> Lexicon:
        rng = random.Random(seed)
        reserved = set(TARGET_DETERMINERS.values()) | {RELATIVIZER}
        used: set[str] = set()

        def stem(syllables: int) -> str:
            while True:
                s = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(syllables - 1))
                s += rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)
                s = s.rstrip("aeiou") or s   # stems end in a consonant where they can: suffixes follow
                if s not in used and s not in reserved and len(s) >= 2:
                    used.add(s)
                    return s

        nouns = ANIMATE_NOUNS + INANIMATE_NOUNS
        noun_stem = {n: stem(2) for n in nouns}
        noun_gender = {n: rng.choice("mf") for n in nouns}
        adj_stem: dict[str, str | dict[bool, str]] = {a: stem(2) for a in ADJECTIVES}
        for a in AMBIGUOUS_ADJECTIVES:
            adj_stem[a] = {True: stem(2), False: stem(2)}
        verb_stem: dict[str, str | dict[bool, str]] = {
            v: stem(rng.choice((1, 2))) for v in TRANSITIVE_VERBS + INTRANSITIVE_VERBS}
        for v in AMBIGUOUS_VERBS:
            verb_stem[v] = {True: stem(2), False: stem(2)}
        adverb = {a: stem(2) + rng.choice(_VOWELS) for a in ADVERBS}
        postposition = {p: stem(1) + rng.choice(_VOWELS) for p in PREPOSITIONS}
        return cls(noun_stem, noun_gender, adj_stem, verb_stem, adverb, postposition)


# ---- abstract syntax -----------------------------------------------------------------------------
@dataclass
class NounPhrase:
    noun: str                       # lemma, or a name
    number: str                     # "sg" | "pl"
    det: str | None                 # "def" | "indef" | "dem" | None for names
    adjectives: list[str] = field(default_factory=list)
    pp: PrepPhrase | None = None    # noun modifier (nmod)
    rel: RelClause | None = None

    @property
    def is_name(self) -> bool:
        return self.noun in NAMES

    @property
    def animate(self) -> bool:
        return self.is_name or self.noun in ANIMATE_NOUNS


@dataclass
class PrepPhrase:
    prep: str
    np: NounPhrase


@dataclass
class RelClause:
    role: str                       # "subj": the head noun is the clause's subject; "obj": its object
    verb: str
    other: NounPhrase | None        # the object (role subj, transitive) or the subject (role obj)


@dataclass
class Clause:
    subj: NounPhrase
    verb: str
    obj: NounPhrase | None
    adverb: str | None
    pp: PrepPhrase | None           # verb modifier (obl)


# ---- sampling -------------------------------------------------------------------------------------
class Grammar:
    """Samples clauses; `depth` bounds nesting of relative clauses and noun-modifying phrases."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def noun_phrase(self, depth: int, animate: bool | None = None) -> NounPhrase:
        r = self.rng
        if animate is None:
            animate = r.random() < 0.55
        if animate and r.random() < 0.15:
            return NounPhrase(r.choice(sorted(NAMES)), "sg", None)
        noun = r.choice(ANIMATE_NOUNS if animate else INANIMATE_NOUNS)
        number = r.choice(("sg", "pl"))
        det = r.choices(("def", "indef", "dem"), weights=(6, 3, 2))[0]
        adjs: list[str] = []
        if r.random() < 0.45:
            adjs.append(r.choice(ADJECTIVES + AMBIGUOUS_ADJECTIVES * 2))
            if r.random() < 0.2:
                second = r.choice(ADJECTIVES)
                if second not in adjs:
                    adjs.append(second)
        np = NounPhrase(noun, number, det, adjs)
        if depth > 0 and r.random() < 0.12:
            np.pp = PrepPhrase(r.choice(PREPOSITIONS), self.noun_phrase(depth - 1))
        elif depth > 0 and r.random() < 0.2:
            np.rel = self.relative_clause(depth - 1)
        return np

    def relative_clause(self, depth: int) -> RelClause:
        r = self.rng
        if r.random() < 0.5:
            if r.random() < 0.6:
                verb = r.choice(TRANSITIVE_VERBS + AMBIGUOUS_VERBS)
                return RelClause("subj", verb, self.noun_phrase(depth))
            return RelClause("subj", r.choice(INTRANSITIVE_VERBS), None)
        return RelClause("obj", r.choice(TRANSITIVE_VERBS + AMBIGUOUS_VERBS), self.noun_phrase(depth))

    def clause(self) -> Clause:
        r = self.rng
        subj = self.noun_phrase(depth=1, animate=r.random() < 0.85)
        if r.random() < 0.7:
            verb = r.choice(TRANSITIVE_VERBS + AMBIGUOUS_VERBS * 2)
            obj = self.noun_phrase(depth=1)
        else:
            verb, obj = r.choice(INTRANSITIVE_VERBS), None
        adverb = r.choice(ADVERBS) if r.random() < 0.3 else None
        pp = PrepPhrase(r.choice(PREPOSITIONS), self.noun_phrase(0)) if r.random() < 0.3 else None
        return Clause(subj, verb, obj, adverb, pp)
