"""The corpus rules through Snakemake: dry runs of every paper corpus at paper scale, the LDC
message for NIST, and a real download → prepare run against a local server on 127.0.0.1."""

import gzip
import hashlib
import json
import os
from collections import Counter
from pathlib import Path

import pytest
import yaml

from conftest import jobs, run_snakemake
from httpserver import Files, make_tgz, serve
from rnmt.data.registry import Registry

ROOT = Path(__file__).resolve().parents[1]
# Real corpora for the two opt-in tests below, in the layout benchmarks/prepare_corpus.py describes
# (toy-ende/, enro-europarl-sample/); without RNMT_REAL_CORPORA they are skipped.
REAL = Path(os.environ.get("RNMT_REAL_CORPORA", "/nonexistent"))
PAPER = [c for c in Registry(ROOT / "workflow/corpora.yaml").corpora if "nist" not in c and "multi30k" not in c]
NIST = ["atr-nist-zh-en", "dtmt-nist-zh-en"]
DATA_TARGETS = ["vocab.src", "vocab.tgt", "bpe/dev.src", "bpe/dev.tgt", "bpe/test.src", "bpe/test.tgt"]


def data_targets(run: str, corpus: str) -> list[str]:
    return [f"results/{run}/data/{corpus}/{t}" for t in DATA_TARGETS]


@pytest.fixture(scope="module")
def paper_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("paper")
    corpora = {c: {"registry": c} for c in PAPER + NIST}
    (d / "paper.yaml").write_text(yaml.safe_dump({"run": "paper", "scale": "paper", "corpora": corpora}))
    return d


@pytest.mark.workflow
def test_every_paper_corpus_dry_runs_at_paper_scale(paper_dir: Path) -> None:
    targets = [t for c in PAPER for t in data_targets("paper", c)]
    r = run_snakemake([*targets, "-n", "--configfile", "paper.yaml"], paper_dir)
    assert r.returncode == 0, r.stderr[-3000:]
    counts = jobs(r.stdout)
    reg = Registry(ROOT / "workflow/corpora.yaml")
    assert counts["clean_chunk"] == sum(reg.corpora[c]["preprocess"]["chunks"] for c in PAPER)
    assert counts["merge_chunks"] == counts["chunk_index"] == counts["apply_bpe_train"] == len(PAPER)
    assert counts["download"] == 6          # nc-v9 (shared by En-De and En-Fr), 12M, UN, giga, 2 back-translations
    assert counts["truecase_model"] == 2    # SR-NMT En-Ro only
    assert counts["learn_bpe"] == 8         # ATR En-De/En-Fr per side (4), SR-NMT and DTMT joint (4); UD word level


@pytest.mark.workflow
def test_nist_without_ldc_files_stops_with_what_to_obtain(paper_dir: Path) -> None:
    for corpus in NIST:
        r = run_snakemake([*data_targets("paper", corpus), "-n", "--configfile", "paper.yaml"], paper_dir)
        out = r.stdout + r.stderr
        assert r.returncode != 0
        assert "Linguistic Data Consortium (catalogue entries LDC20" in out and "(zh, missing)" in out
        assert "data/ldc/nist-zh-en/" in out and corpus in out and "corpora.<name>.manual_dir" in out


def _lines(lines: list[str]) -> bytes:
    return "".join(x + "\n" for x in lines).encode()


@pytest.mark.workflow
def test_download_and_prepare_from_a_local_server_and_resume(tmp_path: Path) -> None:
    en = [f"This is sentence number {i} , about {'cats' if i % 3 else 'dogs'} ." for i in range(300)]
    de = [f"Das ist Satz Nummer {i} über {'Katzen' if i % 3 else 'Hunde'} ." for i in range(300)]
    en[7], de[7] = "", "leer"                                        # dropped by non_empty
    en[8], de[8] = " ".join(["long"] * 60), "kurz"                   # dropped by the length filter
    files = Files({
        "/train.tgz": make_tgz({
            "corpus/train.de": _lines(de[:200]), "corpus/more.de.gz": gzip.compress(_lines(de[200:])),
            "corpus/train.en": _lines(en[:200]), "corpus/more.en.gz": gzip.compress(_lines(en[200:]))}),
        "/dev.en.gz": gzip.compress(_lines(["Good morning .", "How are you ?"])),
        "/dev.de.gz": gzip.compress(_lines(["Guten Morgen .", "Wie geht es ?"])),
        "/test.tgz": make_tgz({
            "t/src.en.sgm": b'<srcset><doc docid="a"><seg id="1">Hello &amp; bye .</seg></doc></srcset>\n',
            "t/ref.de.sgm": b'<refset><doc docid="a" sysid="r"><seg id="1">Hallo .</seg></doc></refset>\n'}),
    }, failures={"/dev.de.gz": [404]})

    def pin(path: str) -> str:
        return hashlib.sha256(files.content[path]).hexdigest()

    with serve(files) as base:
        registry = {
            "sources": {
                "train": {"source": f"url:{base}/train.tgz", "langs": ["de", "en"],
                          "files": {"de": ["corpus/train.de", "corpus/more.de.gz"],
                                    "en": ["corpus/train.en", "corpus/more.en.gz"]},
                          "sha256": {"train.tgz": hashlib.sha256(files.content["/train.tgz"]).hexdigest()}},
                "dev": {"source": f"url:{base}/dev.{{lang}}.gz", "langs": ["en", "de"],
                        "sha256": {"dev.en.gz": pin("/dev.en.gz"), "dev.de.gz": pin("/dev.de.gz")}},
                "test": {"source": f"url:{base}/test.tgz", "langs": ["en", "de"],
                         "files": {"en": "t/src.en.sgm", "de": "t/ref.de.sgm"}, "sha256": {"test.tgz": None}},
            },
            "corpora": {"toy": {"src_lang": "en", "tgt_lang": "de",
                                "splits": {"train": ["train"], "dev": ["dev"], "test": ["test"]},
                                "preprocess": {"max_words": 50, "dedupe": True, "chunks": 2},
                                "bpe": {"merges": 50, "joint": True}}},
        }
        (tmp_path / "registry.yaml").write_text(yaml.safe_dump(registry))
        (tmp_path / "registry.sha256").write_text(f"{pin('/test.tgz')}  test.tgz\n")   # pinned in the pin file
        (tmp_path / "c.yaml").write_text(yaml.safe_dump({"run": "t", "corpora": {"toy": {"registry": "toy"}}}))
        env = {"RNMT_REGISTRY": str(tmp_path / "registry.yaml")}
        targets = data_targets("t", "toy")
        args = [*targets, "--cores", "2", "--keep-going", "--configfile", "c.yaml"]
        first = run_snakemake(args, tmp_path, extra_env=env)
        assert first.returncode != 0 and "HTTP 404" in (tmp_path / "results/logs/download/dev.de.gz.log").read_text()
        assert (tmp_path / "results/t/data/toy/tok/train.src").is_file()    # what could finish, did
        second = run_snakemake(args, tmp_path, extra_env=env)                # the server is back: resume
        assert second.returncode == 0, second.stderr[-3000:]
        assert Counter(p for p, _ in files.requests) == {"/train.tgz": 1, "/test.tgz": 1, "/dev.en.gz": 1,
                                                        "/dev.de.gz": 2}
        third = run_snakemake([*targets, "-n", "--configfile", "c.yaml"], tmp_path, extra_env=env)
        assert "Nothing to be done" in third.stdout + third.stderr
        # the test set's entry now names another archive member: its fetched text is the old member's, which
        # Snakemake would keep (a fetch has no input that changed), so the run stops, naming what to remove
        registry["sources"]["test"]["files"]["de"] = "t/ref2.de.sgm"
        (tmp_path / "registry.yaml").write_text(yaml.safe_dump(registry))
        fourth = run_snakemake([*targets, "-n", "--configfile", "c.yaml"], tmp_path, extra_env=env)
        assert fourth.returncode == 1 and "Traceback" not in fourth.stderr
        assert ("rnmt: error: results/sources/test holds source 'test' as fetched from another registry entry than "
                "the one now (files changed: ") in fourth.stderr
        assert "remove results/sources/test to fetch it again" in fourth.stderr
    data = tmp_path / "results/t/data/toy"
    report = json.loads((data / "prepare.json").read_text())
    steps = {s["step"]: (s["kept"], s["dropped"]) for s in report["steps"]}
    assert steps["non_empty"] == (299, 1) and steps["words_1_to_50"] == (298, 1) and steps["dedupe"] == (298, 0)
    assert (data / "tok/test.src").read_text() == "Hello &amp; bye .\n"
    assert (data / "tok/dev.tgt").read_text().splitlines() == ["Guten Morgen .", "Wie geht es ?"]
    assert len((data / "bpe/train.src").read_text().splitlines()) == 298
    assert (tmp_path / "results/downloads/train.tgz.sha256").is_file()


@pytest.mark.workflow
def test_a_local_test_sets_edited_extra_reference_assembles_the_split_again(tmp_path: Path) -> None:
    """A user's test set with a second reference beside its target file (test.de.ref1): the split takes it,
    and an edit of that file alone builds the split again, so scoring reads the references as they are now."""
    d = tmp_path / "corpus"
    d.mkdir()
    for name, lines in (("train.en", [f"a sentence {i} ." for i in range(40)]),
                        ("train.de", [f"ein Satz {i} ." for i in range(40)]),
                        ("test.en", ["good morning .", "thank you ."]), ("test.de", ["guten Morgen .", "danke ."]),
                        ("test.de.ref1", ["Guten Morgen !", "vielen Dank ."])):
        (d / name).write_text("".join(x + "\n" for x in lines))
    cfg = {"run": "local", "corpora": {"c": {"source": f"local:{d}", "src_lang": "en", "tgt_lang": "de",
                                             "files": {"train": ["train.en", "train.de"],
                                                       "test": ["test.en", "test.de"]},
                                             "holdout": {"dev": 5}}}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    target = ["results/local/data/c/raw/test.tgt", "--configfile", "c.yaml"]
    r = run_snakemake([*target, "--cores", "1"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    ref1 = tmp_path / "results/local/data/c/raw/test.tgt.ref1"
    assert ref1.read_text() == "Guten Morgen !\nvielen Dank .\n"
    unchanged = run_snakemake([*target, "-n"], tmp_path)
    assert "Nothing to be done" in unchanged.stdout + unchanged.stderr
    (d / "test.de.ref1").write_text("Guten Morgen .\nDanke schön .\n")
    again = run_snakemake([*target, "-n"], tmp_path)
    assert again.returncode == 0 and jobs(again.stdout) == {"assemble": 1}
    assert run_snakemake([*target, "--cores", "1"], tmp_path).returncode == 0
    assert ref1.read_text() == "Guten Morgen .\nDanke schön .\n"


@pytest.mark.workflow
@pytest.mark.skipif(not (REAL / "enro-europarl-sample/corpus.en").is_file(),
                    reason="RNMT_REAL_CORPORA has no enro-europarl-sample/")
def test_local_europarl_sample_prepares_for_real(tmp_path: Path) -> None:
    cfg = {"run": "local", "corpora": {"enro": {
        "source": f"local:{REAL / 'enro-europarl-sample'}", "src_lang": "en", "tgt_lang": "ro",
        "files": {"train": ["corpus.en", "corpus.ro"]}, "holdout": {"dev": 200, "test": 200},
        "preprocess": {"romanian": True, "max_words": 50, "max_ratio": 3, "dedupe": True, "chunks": 2}}}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    r = run_snakemake(["results/local/data/enro/prepare.json", "results/local/data/enro/tok/test.tgt", "--cores", "2",
                       "--configfile", "c.yaml"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads((tmp_path / "results/local/data/enro/prepare.json").read_text())
    assert report["lines_in"] == 9600 and 0 < report["lines_out"] < 9600
    out = (tmp_path / "results/local/data/enro/tok/train.tgt").read_text()
    assert len(out.splitlines()) == report["lines_out"] and "ş" not in out and "ţ" not in out
    assert len((tmp_path / "results/local/data/enro/tok/test.tgt").read_text().splitlines()) == 200


@pytest.mark.workflow
@pytest.mark.skipif(not (REAL / "toy-ende/src-train.txt").is_file(),
                    reason="RNMT_REAL_CORPORA has no toy-ende/")
def test_local_tokenized_toy_ende_is_not_tokenized_again(tmp_path: Path) -> None:
    cfg = {"run": "local", "corpora": {"toy": {
        "source": f"local:{REAL / 'toy-ende'}", "src_lang": "en", "tgt_lang": "de",
        "files": {"train": ["src-train.txt", "tgt-train.txt"], "dev": ["src-val.txt", "tgt-val.txt"]},
        "holdout": {"test": 300}, "preprocess": {"tokenized": True, "max_words": 80, "dedupe": True, "chunks": 2}}}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    r = run_snakemake(["results/local/data/toy/prepare.json", "results/local/data/toy/tok/dev.src", "--cores", "2",
                       "--configfile", "c.yaml"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads((tmp_path / "results/local/data/toy/prepare.json").read_text())
    assert report["lines_in"] == 9700 and report["steps"][-1]["step"] == "dedupe"
    given = {" ".join(x.split()) for x in (REAL / "toy-ende/src-train.txt").read_text().splitlines()}
    train = (tmp_path / "results/local/data/toy/tok/train.src").read_text().splitlines()
    assert len(train) == report["lines_out"] and set(train) <= given        # kept as they were: no re-escaping
    dev = (tmp_path / "results/local/data/toy/tok/dev.src").read_text().splitlines()
    assert dev == [" ".join(x.split()) for x in (REAL / "toy-ende/src-val.txt").read_text().splitlines()]


@pytest.mark.workflow
def test_multi30k_downloads_from_its_pinned_urls_or_from_files_a_user_puts_in_place(tmp_path: Path) -> None:
    """The shipped Multi30k entries, served by a local server at the same paths: the train, validation and
    three test files download and prepare; a file that cannot be downloaded stops the run with where to
    put it, and once it is there (checked against its pin) the run goes on without fetching it."""
    shipped = Registry(ROOT / "workflow/corpora.yaml")
    base = "https://github.com/multi30k/dataset/raw/a3d2e0d26b56f3846f66a952536ffed4e401d05a"
    words = {"en": ["a", "dog", "man", "runs", "in", "the", "park", "two", "girls", "play"],
             "de": ["ein", "Hund", "Mann", "läuft", "im", "Park", "zwei", "Mädchen", "spielen", "hier"]}
    sizes = {"train": 120, "val": 10, "test_2016_flickr": 8, "test_2017_flickr": 6, "test_2017_mscoco": 4}
    content = {}
    for part, n in sizes.items():
        for lang, w in words.items():
            lines = [" ".join(w[(i + k) % 10] for k in range(3 + i % 5)).capitalize() + " ." for i in range(n)]
            content[f"/data/task1/raw/{part}.{lang}.gz"] = gzip.compress(_lines(lines))
    files = Files(content, failures={"/data/task1/raw/val.de.gz": [404] * 10})
    with serve(files) as url:
        keep = {sid: s for sid, s in yaml.safe_load((ROOT / "workflow/corpora.yaml").read_text())["sources"].items()
                if sid.startswith("multi30k-") and sid.endswith("-en-de")}
        for s in keep.values():
            assert s["source"].startswith(f"url:{base}/")
            s["source"] = s["source"].replace(base, url)
        registry = {"sources": keep, "corpora": {"multi30k-en-de": shipped.corpora["multi30k-en-de"]}}
        (tmp_path / "registry.yaml").write_text(yaml.safe_dump(registry))
        (tmp_path / "registry.sha256").write_text("".join(
            f"{hashlib.sha256(data).hexdigest()}  {Path(path).name}\n" for path, data in content.items()))
        (tmp_path / "c.yaml").write_text(yaml.safe_dump({"run": "t", "corpora": {"m": {"registry": "multi30k-en-de"}}}))
        env = {"RNMT_REGISTRY": str(tmp_path / "registry.yaml")}
        args = [*data_targets("t", "m"), "--cores", "2", "--keep-going", "--configfile", "c.yaml"]
        first = run_snakemake(args, tmp_path, extra_env=env)
        assert first.returncode != 0
        log = (tmp_path / "results/logs/download/val.de.gz.log").read_text()
        assert "HTTP 404" in log and f"put it at {tmp_path / 'results/downloads/val.de.gz'}" in log
        (tmp_path / "results/downloads/val.de.gz").write_bytes(content["/data/task1/raw/val.de.gz"])
        second = run_snakemake(args, tmp_path, extra_env=env)
        assert second.returncode == 0, second.stderr[-3000:]
    assert Counter(p for p, _ in files.requests)["/data/task1/raw/val.de.gz"] == 1      # the failed attempt only
    data = tmp_path / "results/t/data/m"
    assert len((data / "raw/train.src").read_text().splitlines()) == 120
    assert len((data / "raw/dev.tgt").read_text().splitlines()) == 10
    test = json.loads((data / "raw/test.json").read_text())
    assert [(Path(p["src"]).parent.name, p["lines"]) for p in test["parts"]] == [
        ("multi30k-test2016-flickr-en-de", 8), ("multi30k-test2017-flickr-en-de", 6),
        ("multi30k-test2017-mscoco-en-de", 4)]
    assert (data / "truecase.src").is_file() and (data / "truecase.tgt").is_file()
