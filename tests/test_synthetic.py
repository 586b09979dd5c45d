"""The embedded corpus: deterministic, aligned, valid CoNLL-U, and a target language that needs
reordering, agreement and disambiguation."""

import hashlib
import re
from pathlib import Path

import conllu
import pytest

from rnmt.data import synthetic as syn
from rnmt.data import synthetic_grammar as language

SIZES = {"train": 300, "dev": 40, "test": 60}


def digest(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}


def test_same_seed_same_bytes_other_seed_other_text(tmp_path: Path) -> None:
    syn.write_corpus(tmp_path / "a", SIZES, seed=7)
    syn.write_corpus(tmp_path / "b", SIZES, seed=7)
    syn.write_corpus(tmp_path / "c", SIZES, seed=8)
    assert digest(tmp_path / "a") == digest(tmp_path / "b")
    assert (tmp_path / "a/train.src").read_text() != (tmp_path / "c/train.src").read_text()
    assert len(digest(tmp_path / "a")) == 9          # {train,dev,test}.{src,tgt,src.conllu}


def test_split_sizes_aligned_and_held_out(tmp_path: Path) -> None:
    written = syn.write_corpus(tmp_path, SIZES, seed=3)
    assert written == SIZES
    train = set((tmp_path / "train.src").read_text().splitlines())
    for split, n in SIZES.items():
        src = (tmp_path / f"{split}.src").read_text().splitlines()
        tgt = (tmp_path / f"{split}.tgt").read_text().splitlines()
        assert len(src) == len(tgt) == n
        assert all(s and t for s, t in zip(src, tgt, strict=True))
        if split != "train":
            assert not train & set(src), f"{split} sentences also occur in train"


def test_changing_one_split_size_keeps_the_others(tmp_path: Path) -> None:
    syn.write_corpus(tmp_path / "a", SIZES, seed=5)
    syn.write_corpus(tmp_path / "b", {**SIZES, "train": 200}, seed=5)
    a = (tmp_path / "a/train.src").read_text().splitlines()
    b = (tmp_path / "b/train.src").read_text().splitlines()
    assert a[:200] == b


def test_conllu_is_valid_and_matches_the_source_text(tmp_path: Path) -> None:
    syn.write_corpus(tmp_path, SIZES, seed=11)
    sentences = conllu.parse((tmp_path / "train.src.conllu").read_text())
    texts = (tmp_path / "train.src").read_text().splitlines()
    assert len(sentences) == len(texts)
    labels = set()
    for sent, text in zip(sentences, texts, strict=True):
        assert sent.metadata["text"] == text
        ids = [t["id"] for t in sent]
        assert ids == list(range(1, len(sent) + 1))
        heads = {t["id"]: t["head"] for t in sent}
        assert sum(h == 0 for h in heads.values()) == 1
        root = next(t for t in sent if t["head"] == 0)
        assert root["deprel"] == "root" and root["upos"] == "VERB"
        for tid in ids:                             # every token reaches the root: a tree, no cycles
            seen, cur = set(), tid
            while cur != 0:
                assert cur not in seen and cur in heads
                seen.add(cur)
                cur = heads[cur]
        # the text is the tokens joined with the spaces MISC says
        rebuilt = "".join(t["form"] + ("" if (t["misc"] or {}).get("SpaceAfter") == "No" else " ") for t in sent)
        assert rebuilt.strip() == text
        labels |= {t["deprel"] for t in sent}
    assert {"nsubj", "obj", "det", "amod", "root", "punct", "case", "acl:relcl"} <= labels


def _pairs(n: int = 3000, seed: int = 2) -> list[syn.SentencePair]:
    return list(syn.generate_pairs(seed, n))


def test_target_is_verb_final_with_subject_agreement() -> None:
    lex = language.Lexicon.build()
    suffix_of = {v: k for k, v in language.VERB_SUFFIX.items()}
    checked = 0
    for pair in _pairs(500):
        root = next(t for t in pair.source_tokens if t.head is None)
        subj = next(t for t in pair.source_tokens if t.head is root and t.deprel == "nsubj")
        final = pair.target_words[-1]
        assert re.search("(" + "|".join(language.VERB_SUFFIX.values()) + ")$", final)
        number = "sg" if "Sing" in subj.feats else "pl"
        gender = language.NAMES[subj.lemma] if subj.upos == "PROPN" else lex.noun_gender[subj.lemma]
        ending = next(e for e in sorted(suffix_of, key=len, reverse=True) if final.endswith(e))
        assert suffix_of[ending] == (gender, number)
        checked += 1
    assert checked == 500


def test_ambiguous_verbs_translate_by_object_animacy() -> None:
    lex = language.Lexicon.build()
    seen: dict[str, set[str]] = {}
    for pair in _pairs():
        root = next(t for t in pair.source_tokens if t.head is None)
        if root.lemma in language.AMBIGUOUS_VERBS:
            stems = lex.verb_stem[root.lemma]
            assert isinstance(stems, dict)
            obj = next(t for t in pair.source_tokens if t.head is root and t.deprel == "obj")
            animate = obj.upos == "PROPN" or obj.lemma in language.ANIMATE_NOUNS
            assert pair.target_words[-1].startswith(stems[animate])
            seen.setdefault(root.lemma, set()).add(stems[animate])
    assert all(len(s) == 2 for s in seen.values()) and len(seen) == len(language.AMBIGUOUS_VERBS)


def test_long_distance_dependencies_occur() -> None:
    """Some subjects are separated from their verb by a relative clause (agreement across it)."""
    gaps = []
    for pair in _pairs(1000):
        toks = pair.source_tokens
        root = next(t for t in toks if t.head is None)
        subj = next(t for t in toks if t.head is root and t.deprel == "nsubj")
        gaps.append(toks.index(root) - toks.index(subj))
    assert max(gaps) >= 6
    assert sum(g >= 4 for g in gaps) > 50


@pytest.mark.parametrize("max_words", [6, 12])
def test_max_words_bounds_source_length(max_words: int) -> None:
    assert all(len(p.source_tokens) <= max_words for p in syn.generate_pairs(1, 200, max_words=max_words))
