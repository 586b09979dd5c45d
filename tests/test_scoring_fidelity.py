"""Scoring as each paper scored: multi-bleu.perl on tokenized text against NIST's 4 references (DTMT
Tables 1, 3, 4, 6 and Figure 3), tensor2tensor's compound splitting (SR-NMT), and a signature per
BLEU column that says how that column was computed."""

import json
import math
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from rnmt.data.clean import Preparer
from rnmt.data.prepare import assemble, prepare_text
from rnmt.evaluate.metrics import write_metrics
from rnmt.evaluate.score import score, split_compounds, tok_scorer
from rnmt.io import InputError
from rnmt.planning.table import Row, Table
from rnmt.report.tables import build


def multi_bleu_perl(hyps: list[str], refs: list[list[str]], lowercase: bool = False) -> float:
    """multi-bleu.perl (with -lc where `lowercase`), written out: whitespace tokens, n-gram counts up to 4
    clipped by the largest count in any one reference, summed over the corpus; the brevity penalty
    against the sum of each sentence's closest reference length (the shorter of two equally close);
    no smoothing, so a zero n-gram precision makes BLEU 0."""
    correct, total = [0] * 4, [0] * 4
    hyp_len = ref_len = 0
    for k, line in enumerate(hyps):
        h = (line.lower() if lowercase else line).split()
        rs = [(r[k].lower() if lowercase else r[k]).split() for r in refs]
        hyp_len += len(h)
        closest = len(rs[0])
        for r in rs[1:]:
            d, best = abs(len(r) - len(h)), abs(closest - len(h))
            if d < best or (d == best and len(r) < closest):
                closest = len(r)
        ref_len += closest
        for n in range(1, 5):
            grams = Counter(tuple(h[i:i + n]) for i in range(len(h) - n + 1))
            most: dict[tuple[str, ...], int] = {}
            for r in rs:
                for g, c in Counter(tuple(r[i:i + n]) for i in range(len(r) - n + 1)).items():
                    most[g] = max(most.get(g, 0), c)
            correct[n - 1] += sum(min(c, most.get(g, 0)) for g, c in grams.items())
            total[n - 1] += sum(grams.values())
    if min(correct) == 0:
        return 0.0
    bp = math.exp(1 - ref_len / hyp_len) if hyp_len < ref_len else 1.0
    return 100 * bp * math.exp(sum(math.log(c / t) for c, t in zip(correct, total, strict=True)) / 4)


# Two "test sets" of two sentences each, 4 references per sentence (NIST-style), case differing between
# hypothesis and references. Sentence 1's references are 7, 9, 11 and 4 tokens long for an 8-token
# hypothesis: 7 and 9 are equally close and the shorter counts (so does sentence 3's 4 of 4 and 6). The
# 24 hypothesis tokens are fewer than the 25 of the closest references (a brevity penalty), and set 2
# has no matching 4-gram.
HYPS_TOK = ["The Cat sat on the red mat today",
            "there is A dog , he said .",
            "Rain falls today in Beijing",
            "stocks rose sharply"]
REFS_TOK = [["the cat sat on the mat .", "the cat was sitting on the red mat today",
             "a cat sat on the red mat in the garden today", "the cat sat ."],
            ["a dog is in the garden , he said .", "there is a dog in the yard , he says .",
             "he said : there is a dog in the garden .", "in the garden there is a dog , he said ."],
            ["it rains today in beijing .", "today it is raining in beijing", "beijing has rain today",
             "rain falls in beijing today ."],
            ["shares rose sharply monday", "on monday , stocks went up sharply", "stock prices rose sharply",
             "stocks climbed steeply on monday ."]]
REFS_TOK_STREAMS = [[REFS_TOK[k][j] for k in range(4)] for j in range(4)]     # 4 streams of 4 lines
PARTS = [("nist-mt02", 1, 2), ("nist-mt03", 3, 2)]
SRC_LENGTHS = [5, 12, 25, 8]


def test_tokenized_multi_reference_bleu_is_multi_bleu_perl_per_test_set_and_length() -> None:
    s = score(HYPS_TOK, REFS_TOK_STREAMS, HYPS_TOK, REFS_TOK_STREAMS, lowercase=True, src_lengths=SRC_LENGTHS,
              parts=PARTS)
    assert s["references"] == 4
    assert s["tok_bleu"] == pytest.approx(multi_bleu_perl(HYPS_TOK, REFS_TOK_STREAMS, True), abs=1e-9)
    by_part = {name: multi_bleu_perl(HYPS_TOK[a - 1:a - 1 + n], [r[a - 1:a - 1 + n] for r in REFS_TOK_STREAMS], True)
               for name, a, n in PARTS}
    assert by_part["nist-mt02"] > 0 and by_part["nist-mt03"] == 0.0       # set 2: no 4-gram, no smoothing
    assert s["tok_bleu_by_part"] == pytest.approx(by_part, abs=1e-9)
    assert s["tok_bleu_avg"] == pytest.approx(sum(by_part.values()) / 2, abs=1e-9)
    longer = {"0": [0, 1, 2, 3], "10": [1, 2], "20": [2]}
    expected = {lo: multi_bleu_perl([HYPS_TOK[i] for i in idx], [[r[i] for i in idx] for r in REFS_TOK_STREAMS],
                                    True) for lo, idx in longer.items()}
    assert s["tok_bleu_longer_than"] == pytest.approx(expected, abs=1e-9)
    assert s["sentences_longer_than"] == {lo: len(idx) for lo, idx in longer.items()}    # what each rests on
    # the detokenized (13a) numbers stay beside them
    assert set(s["bleu_by_part"]) == set(by_part) and "0" in s["bleu_longer_than"] and "bleu_avg" in s


def test_the_example_needs_case_folding_and_the_closest_reference_length() -> None:
    """The example tells a case-sensitive scorer, and one with another reference length, apart: sacrebleu's
    tokenize="none" BLEU takes the closest reference length (the shorter on a tie) as multi-bleu.perl."""
    cased = score(HYPS_TOK, REFS_TOK_STREAMS, HYPS_TOK, REFS_TOK_STREAMS)
    assert cased["tok_bleu"] == pytest.approx(multi_bleu_perl(HYPS_TOK, REFS_TOK_STREAMS), abs=1e-9)
    assert cased["tok_bleu"] < multi_bleu_perl(HYPS_TOK, REFS_TOK_STREAMS, True)
    first = tok_scorer(True).corpus_score(HYPS_TOK[:1], [r[:1] for r in REFS_TOK_STREAMS])
    assert (first.sys_len, first.ref_len, first.bp) == (8, 7, 1.0)          # 7 and 9 are as close: 7
    corpus = tok_scorer(True).corpus_score(HYPS_TOK, REFS_TOK_STREAMS)
    assert (corpus.sys_len, corpus.ref_len) == (24, 7 + 10 + 4 + 4) and corpus.bp < 1.0   # not 9 + 10 + 6 + 4


def test_compound_splitting_rewrites_hyphenated_compounds_as_tensor2tensor() -> None:
    assert split_compounds("Ein Test-Fall") == "Ein Test ##AT##-##AT## Fall"
    assert split_compounds("Ein Test @-@ Fall") == "Ein Test ##AT##-##AT## Fall"   # our aggressive dash split
    assert split_compounds("die Zwei-Drittel-Mehrheit") == "die Zwei ##AT##-##AT## Drittel ##AT##-##AT## Mehrheit"
    # Perl's s{(\S)-(\S)}{...}g resumes after each match, which took the "b": the second hyphen stays
    assert split_compounds("a-b-c") == "a ##AT##-##AT## b-c"
    assert split_compounds("rund 3 - 4 Tage , -5 Grad") == "rund 3 - 4 Tage , -5 Grad"


def test_compound_split_bleu_scores_the_split_tokens() -> None:
    hyp = ["Ein Test-Fall ist nicht immer ein leichter Fall .", "Das ist ein Fall für die Test-Serie ."]
    ref = [["Ein Test-Sieg ist nicht immer ein leichter Sieg .", "Das ist ein Fall für die Test-Reihe ."]]
    hyp_split = ["Ein Test ##AT##-##AT## Fall ist nicht immer ein leichter Fall .",
                 "Das ist ein Fall für die Test ##AT##-##AT## Serie ."]
    ref_split = [["Ein Test ##AT##-##AT## Sieg ist nicht immer ein leichter Sieg .",
                  "Das ist ein Fall für die Test ##AT##-##AT## Reihe ."]]
    s = score(hyp, ref, hyp, ref)
    assert s["tok_bleu_compound"] == pytest.approx(multi_bleu_perl(hyp_split, ref_split), abs=1e-9)
    assert s["tok_bleu"] == pytest.approx(multi_bleu_perl(hyp, ref), abs=1e-9)
    assert s["tok_bleu_compound"] > s["tok_bleu"]          # "Test" and "##AT##-##AT##" now match
    plain = [h.replace("-", " ") for h in hyp], [[x.replace("-", " ") for x in r] for r in ref]
    same = score(*plain, *plain)                                  # no compound: the same BLEU
    assert same["tok_bleu_compound"] == pytest.approx(same["tok_bleu"], abs=1e-9)
    compound_signature = s["tok_bleu_compound_signature"]
    assert "tok:none" in compound_signature and compound_signature.endswith("|compounds:##AT##-##AT##")
    assert "compounds" not in s["tok_bleu_signature"]


def test_each_bleu_has_the_signature_of_its_own_scorer() -> None:
    s = score(HYPS_TOK, REFS_TOK_STREAMS, HYPS_TOK, REFS_TOK_STREAMS, lowercase=True)
    assert s["bleu_signature"].startswith("nrefs:4|case:lc|eff:no|tok:13a|smooth:exp|")
    assert s["tok_bleu_signature"].startswith("nrefs:4|case:lc|eff:no|tok:none|smooth:none|")


def _run(tmp_path: Path, scores: dict) -> Path:
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps({"variant": "v", "member": "seed1", "scores": scores, "train": {}, "decode": {}}))
    return path


def test_the_table_shows_each_columns_own_signature(tmp_path: Path) -> None:
    scores = score(HYPS_TOK, REFS_TOK_STREAMS, HYPS_TOK, REFS_TOK_STREAMS, lowercase=True, parts=PARTS)
    metrics = ["bleu", "tok_bleu@nist-mt02", "tok_bleu_avg", "tok_bleu_compound", "chrf"]
    table = Table("t", tmp_path / "t.yaml", "T", "nist", "test", metrics,
                  [Row("Ours", "v", {"tok_bleu_avg": 45.04})])
    df = build(table, [_run(tmp_path, scores)], "r", "demo", tmp_path / "t.csv", tmp_path / "t.md")
    sig = df.set_index("metric").signature
    assert sig["bleu"] == scores["bleu_signature"] and "tok:13a" in sig["bleu"]
    for m in ("tok_bleu@nist-mt02", "tok_bleu_avg"):
        assert sig[m] == scores["tok_bleu_signature"] and "tok:none" in sig[m] and "13a" not in sig[m]
    assert sig["tok_bleu_compound"] == scores["tok_bleu_compound_signature"]
    assert sig["chrf"] == scores["chrf_signature"]
    assert pd.read_csv(tmp_path / "t.csv").set_index("metric").signature["tok_bleu_avg"] == sig["tok_bleu_avg"]
    assert df.set_index("metric").ours["tok_bleu_avg"] == pytest.approx(scores["tok_bleu_avg"])
    md = (tmp_path / "t.md").read_text()
    assert f"Signature of BLEU: `{scores['bleu_signature']}`" in md
    assert f"Signature of tok MT02, tok Avg: `{scores['tok_bleu_signature']}`" in md
    assert f"Signature of tok BLEU (compounds split): `{scores['tok_bleu_compound_signature']}`" in md


def test_an_average_over_other_test_sets_says_which_it_averages(tmp_path: Path) -> None:
    """At a scale whose test split is other test sets than the paper's (mini: Multi30k's three), the paper's
    per-set columns are empty and its average column holds the mean over the split's own sets: the note
    says so and names them, instead of calling it the BLEU of one test set."""
    parts = [("multi30k-2016", 1, 2), ("multi30k-2017", 3, 2)]
    scores = score(HYPS_TOK, REFS_TOK_STREAMS, HYPS_TOK, REFS_TOK_STREAMS, lowercase=True, parts=parts)
    table = Table("t", tmp_path / "t.yaml", "T", "nist", "test", ["tok_bleu@nist-mt02", "tok_bleu_avg"],
                  [Row("Ours", "v", {"tok_bleu_avg": 45.04})])
    df = build(table, [_run(tmp_path, scores)], "r", "mini", tmp_path / "t.csv", tmp_path / "t.md")
    avg = df.set_index("metric").ours["tok_bleu_avg"]
    assert avg == pytest.approx(sum(scores["tok_bleu_by_part"].values()) / 2)
    assert avg != pytest.approx(scores["tok_bleu"])
    md = (tmp_path / "t.md").read_text()
    assert ("tok Avg (ours): the mean of the BLEU on the 2 test sets of scale `mini` (multi30k-2016, "
            "multi30k-2017), not the paper's.") in md
    assert "BLEU of the one test set" not in md


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{x}\n" for x in lines))
    return path


def test_all_four_references_reach_tokenized_scoring(tmp_path: Path) -> None:
    """The raw test split keeps references 2..4 beside the first (<file>.ref1..3, written by assemble);
    preparing it writes their tokenized twins beside the tokenized file, and scoring reads all four."""
    raw, tok = tmp_path / "raw", tmp_path / "tok"
    raw.mkdir()
    tok.mkdir()
    hyps = ["The cat sat on the red mat, today.", "There is a dog in the garden, he said."]
    refs = [["The cat sat on the mat.", "A dog is in the garden, he said."],
            ["The cat was sitting on the red mat today.", "There is a dog in the yard, he says."],
            ["A cat sat on the red mat in the garden today.", "He said: there is a dog in the garden."],
            ["The cat sat.", "In the garden there is a dog, he said."]]
    for k, r in enumerate(refs):
        _write(raw / ("test.tgt" if k == 0 else f"test.tgt.ref{k}"), r)
    prepare_text(raw / "test.tgt", tok / "test.tgt", Preparer("en"))
    assert sorted(p.name for p in tok.iterdir()) == ["test.tgt", "test.tgt.ref1", "test.tgt.ref2", "test.tgt.ref3"]
    _write(tmp_path / "hyp.txt", hyps)
    hyps_tok = [Preparer("en")(h) for h in hyps]
    _write(tmp_path / "hyp.tok", hyps_tok)
    out = write_metrics(str(tmp_path / "m.json"), str(tmp_path / "hyp.txt"), [str(raw / "test.tgt")],
                        str(tmp_path / "hyp.tok"), [str(tok / "test.tgt")], lowercase=True)
    s = out["scores"]
    refs_tok = [(tok / ("test.tgt" if k == 0 else f"test.tgt.ref{k}")).read_text().splitlines() for k in range(4)]
    assert s["references"] == 4 and "nrefs:4" in s["tok_bleu_signature"]
    assert s["tok_bleu"] == pytest.approx(multi_bleu_perl(hyps_tok, refs_tok, True), abs=1e-9)

    (tok / "test.tgt.ref3").unlink()                    # a tokenized side with fewer references is refused
    with pytest.raises(InputError, match=r"4 raw reference\(s\) .* but 3 tokenized reference\(s\)"):
        write_metrics(str(tmp_path / "m.json"), str(tmp_path / "hyp.txt"), [str(raw / "test.tgt")],
                      str(tmp_path / "hyp.tok"), [str(tok / "test.tgt")], lowercase=True)


def test_a_split_written_again_with_fewer_references_is_scored_against_those_alone(tmp_path: Path) -> None:
    """A test split first assembled from a 4-reference set, then from a 1-reference set of the same length
    (the config's test set changed, or a training corpus' held-out slice): no reference of the first stays
    beside the split, raw or tokenized, so BLEU is not computed against another set's references."""
    parts, raw, tok = tmp_path / "parts", tmp_path / "raw", tmp_path / "tok"
    for d in (parts, raw, tok):
        d.mkdir()
    src = _write(parts / "a.src", ["le chat", "le chien"])
    tgt = _write(parts / "a.tgt", ["the cat", "the dog"])
    for k in (1, 2, 3):
        _write(parts / f"a.tgt.ref{k}", [f"a cat {k}", f"a dog {k}"])
    one_src, one_tgt = _write(parts / "b.src", ["la vache", "le cheval"]), _write(parts / "b.tgt", ["a cow", "a horse"])

    def written() -> list[str]:
        return sorted(p.name for d in (raw, tok) for p in d.iterdir() if ".ref" in p.name)

    def make(parts_: list[tuple[Path, Path]], holdout: dict[str, int] | None = None) -> dict:
        info = assemble([(str(s), str(t)) for s, t in parts_], "test", raw / "test.src", raw / "test.tgt",
                        tmp_path / "test.json", holdout)
        prepare_text(raw / "test.tgt", tok / "test.tgt", Preparer("en"))
        return info

    assert make([(src, tgt)])["references"] == 4
    assert written() == sorted(["test.tgt.ref1", "test.tgt.ref2", "test.tgt.ref3"] * 2)   # raw and tokenized
    assert make([(one_src, one_tgt)])["references"] == 1 and written() == []
    _write(tmp_path / "hyp.txt", ["a cow", "a horse"])
    out = write_metrics(str(tmp_path / "m.json"), str(tmp_path / "hyp.txt"), [str(raw / "test.tgt")],
                        str(tmp_path / "hyp.txt"), [str(tok / "test.tgt")], lowercase=True)
    assert out["scores"]["references"] == 1 and "nrefs:1" in out["scores"]["tok_bleu_signature"]

    make([(src, tgt)])                                      # and a held-out slice, which has one reference
    make([(src, tgt), (one_src, one_tgt)], holdout={"test": 2})
    assert written() == []
