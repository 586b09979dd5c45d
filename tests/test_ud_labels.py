"""Dependency labels on subwords: CoNLL-U reading, alignment with the corpus text, BPE projection."""

from pathlib import Path

import pytest

from rnmt.data import conll, labels
from rnmt.io import InputError
from udcorpus import labelled_corpus, run

CONLLU_MWT = """# text = Il parle du chat.
1\tIl\til\tPRON\t_\t_\t2\tnsubj\t_\t_
2\tparle\tparler\tVERB\t_\t_\t0\troot\t_\t_
3-4\tdu\t_\t_\t_\t_\t_\t_\t_\t_
3\tde\tde\tADP\t_\t_\t5\tcase\t_\t_
4\tle\tle\tDET\t_\t_\t5\tdet\t_\t_
5\tchat\tchat\tNOUN\t_\t_\t2\tobl:arg\t_\t_
6\t.\t.\tPUNCT\t_\t_\t2\tpunct\t_\t_

"""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return labelled_corpus(tmp_path_factory.mktemp("ud"), {"train": 60, "dev": 15})


def test_multiword_tokens_and_subtypes(tmp_path: Path) -> None:
    (tmp_path / "fr.conllu").write_text(CONLLU_MWT, encoding="utf-8")
    [s] = conll.read(tmp_path / "fr.conllu")
    assert s.forms == ["Il", "parle", "du", "chat", "."]
    # "du" = de (case → chat) + le (det → chat): both attach outside the token, the first one labels it
    assert labels.word_labels(s) == ["nsubj", "root", "case", "obl", "punct"]
    assert labels.word_labels(s, subtypes=True)[3] == "obl:arg"
    labels.write_aligned_conllu(tmp_path / "out.conllu", [(s, s.forms)])
    [t] = conll.read(tmp_path / "out.conllu")
    assert [(w.form, w.head, w.deprel) for w in t.words] == [
        ("Il", 2, "nsubj"), ("parle", 0, "root"), ("du", 4, "case"), ("chat", 2, "obl:arg"), (".", 2, "punct")]


def test_every_subword_carries_its_words_label() -> None:
    assert labels.project(["det", "nsubj", "root", "punct"], "the hou@@ s@@ es sleep .", "s1") == \
        ["det", "nsubj", "nsubj", "nsubj", "root", "punct"]


def test_labels_follow_bpe_on_the_synthetic_corpus(corpus: dict[str, Path]) -> None:
    gold = conll.read(corpus["raw"] / "train.src.conllu")
    bpe_lines = (corpus["bpe"] / "train.src").read_text(encoding="utf-8").splitlines()
    lab_lines = (corpus["labels"] / "train.bpe.lab").read_text(encoding="utf-8").splitlines()
    assert len(bpe_lines) == len(lab_lines) == 60
    split_words = 0
    for k, (b, lab, s) in enumerate(zip(bpe_lines, lab_lines, gold, strict=True)):
        subwords, tags = b.split(), lab.split()
        assert len(subwords) == len(tags), k
        groups = labels.subword_groups(b)
        assert labels.unsegment(b) == [w.form for w in s.words]
        pos = 0
        for g, w in zip(groups, s.words, strict=True):
            assert tags[pos:pos + len(g)] == [w.deprel.split(":")[0]] * len(g)
            split_words += len(g) > 1
            pos += len(g)
    assert split_words > 50          # 40 merges leave many words in several subwords
    vocab = (corpus["labels"] / "vocab.lab").read_text().split()
    assert {"nsubj", "obj", "det", "root", "punct", "acl"} <= set(vocab) and "acl:relcl" not in vocab


def test_lines_lost_to_cleaning_skip_their_trees(corpus: dict[str, Path], tmp_path: Path) -> None:
    lines = (corpus["bpe"] / "dev.src").read_text(encoding="utf-8").splitlines()
    kept = lines[:3] + lines[5:]                     # two pairs dropped (e.g. by a length filter)
    (tmp_path / "dev.src").write_text("\n".join(kept) + "\n", encoding="utf-8")
    run("labels", "project", "--conllu", corpus["labels"] / "dev.conllu", "--bpe", tmp_path / "dev.src",
        "--output", tmp_path / "dev.bpe.lab")
    full = (corpus["labels"] / "dev.bpe.lab").read_text().splitlines()
    assert (tmp_path / "dev.bpe.lab").read_text().splitlines() == full[:3] + full[5:]


def test_misaligned_text_names_the_sentence(corpus: dict[str, Path], tmp_path: Path) -> None:
    lines = (corpus["bpe"] / "dev.src").read_text(encoding="utf-8").splitlines()
    swapped = lines[:6] + [lines[7], lines[6]] + lines[8:]
    (tmp_path / "dev.src").write_text("\n".join(swapped) + "\n", encoding="utf-8")
    trees = conll.read(corpus["labels"] / "dev.conllu")
    with pytest.raises(InputError, match=r"dev\.src, sentence 7: its \d+ words .* do not match the tree .*"
                                         r"sentence 7 \(line \d+\) has \d+ words"):
        list(labels.align(trees, len(trees), [labels.unsegment(x) for x in swapped], len(swapped), "dev.conllu",
                          str(tmp_path / "dev.src")))
    with pytest.raises(InputError, match=r"s9: 3 words in the subword line 'the dog sleeps' but 4 labels"):
        labels.project(["det", "nsubj", "root", "punct"], "the do@@ g sleeps", "s9")


def test_label_file_length_is_checked_per_sentence(corpus: dict[str, Path], tmp_path: Path) -> None:
    lab = (corpus["labels"] / "dev.bpe.lab").read_text().splitlines()
    lab[4] = " ".join(lab[4].split()[:-1])
    (tmp_path / "bad.lab").write_text("\n".join(lab) + "\n")
    src = (corpus["bpe"] / "dev.src").read_text().splitlines()
    with pytest.raises(InputError, match=r"bad\.lab, sentence 5: \d+ labels for \d+ subwords in .*dev\.src"):
        labels.read_labels(tmp_path / "bad.lab", [len(x.split()) for x in src], str(corpus["bpe"] / "dev.src"))


@pytest.mark.workflow
def test_label_rules_in_the_dag(tmp_path: Path) -> None:
    from conftest import jobs, run_snakemake

    base = "results/demo/data/synthetic-demo/labels"
    targets = [f"{base}/{source}/{f}" for source in ("gold", "stanza")
               for f in ("train.bpe.lab", "dev.bpe.lab", "test.bpe.lab", "vocab.lab")]
    r = run_snakemake(["-n", "-p", *targets], tmp_path)
    assert r.returncode == 0, r.stderr
    counts = jobs(r.stdout)
    assert {k: counts[k] for k in ("stanza_models", "parse_chunk", "parse_merge", "gold_labels", "project_labels",
                                   "label_vocab")} == {"stanza_models": 1, "parse_chunk": 6, "parse_merge": 3,
                                                       "gold_labels": 3, "project_labels": 6, "label_vocab": 2}
    # the demo trains its stanza models offline on the generator's gold trees
    assert "parse train-models --lang en --train results/demo/data/synthetic-demo/raw/train.src.conllu" in r.stdout



@pytest.mark.workflow
def test_a_treebank_given_by_file_trains_the_parser(tmp_path: Path) -> None:
    """parse.train_trees: a UD treebank's CoNLL-U files train the stanza models (a cluster that reaches no
    model hub), at the size train_hidden gives; a file that is not there is named before any job runs."""
    from conftest import run_snakemake

    (tmp_path / "tb").mkdir()
    for split in ("train", "dev"):
        (tmp_path / f"tb/{split}.conllu").write_text(CONLLU_MWT, encoding="utf-8")
    target = "results/demo/data/synthetic-demo/labels/stanza/vocab.lab"
    trees = "parse={models: train, train_trees: {train: tb/train.conllu, dev: tb/dev.conllu}, train_hidden: 200}"
    r = run_snakemake(["-n", "-p", target, "--config", trees], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "parse train-models --lang en --train tb/train.conllu --dev tb/dev.conllu" in r.stdout
    assert "--hidden 200" in r.stdout
    r = run_snakemake(["-n", target, "--config", trees.replace("tb/dev", "tb/missing")], tmp_path)
    assert r.returncode != 0
    assert "config parse.train_trees.dev: tb/missing.conllu: no such file" in r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
