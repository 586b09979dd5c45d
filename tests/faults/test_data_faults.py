"""Bad corpora and interrupted data jobs: misaligned, non-UTF-8, empty lines, nothing left after
filtering, a job killed while writing, a truncated archive, unknown names and incompatible settings."""

from __future__ import annotations

import io
import json
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

from faults.faultlib import ROOT, fill, rnmt
from httpserver import make_tgz
from rnmt.data import chunks
from rnmt.data.clean import Preparer
from rnmt.data.extract import extract_all, extract_member, list_members
from rnmt.data.prepare import clean_chunk, merge, prepare_text
from rnmt.data.settings import PreprocessSettings
from rnmt.io import InputError
from rnmt.models import build_model

pytestmark = pytest.mark.faults
SETTINGS = json.dumps({"tokenized": True, "escape": False, "normalize": False, "min_words": 1, "max_words": 3})


def prep(**changes: object) -> PreprocessSettings:
    """The preprocessing settings of SETTINGS, as a preprocessing job reads them, with `changes`."""
    return PreprocessSettings.from_dict({**json.loads(SETTINGS), **changes})


def lines(path: Path, rows: list[str]) -> Path:
    path.write_text("".join(r + "\n" for r in rows), encoding="utf-8")
    return path


def test_parallel_files_of_different_lengths(tmp_path: Path, record) -> None:
    record.bad_input("parallel files of different lengths (`rnmt corpus assemble`)")
    src, tgt = lines(tmp_path / "a.src", ["a", "b", "c"]), lines(tmp_path / "a.tgt", ["x", "y"])
    got = rnmt("corpus", "assemble", "--split", "train", "--src", str(src), "--tgt", str(tgt), "--out-src",
               str(tmp_path / "o.src"), "--out-tgt", str(tmp_path / "o.tgt"), "--manifest", str(tmp_path / "o.json"))
    assert got.returncode == 2 and "Traceback" not in got.stderr
    assert f"parallel files differ in length: {src} has 3 lines, {tgt} has 2" in got.stderr
    assert "line-aligned" in got.stderr
    assert not (tmp_path / "o.src").exists()


def test_invalid_utf8_names_file_and_line(tmp_path: Path, record) -> None:
    record.bad_input("Latin-1 bytes on line 2 of a training file (`rnmt corpus chunks`)")
    src = lines(tmp_path / "a.src", ["a", "b", "c"])
    tgt = tmp_path / "a.tgt"
    tgt.write_bytes(b"x\nfa\xe7ade\nz\n")
    got = rnmt("corpus", "chunks", "--chunks", "1", str(src), str(tgt), str(tmp_path / "i.json"))
    if got.returncode == 0:                    # the index only counts lines: reading the chunk finds it
        with pytest.raises(InputError) as e:
            list(chunks.read_pairs(src, tgt, chunks.read_index(tmp_path / "i.json")[0]))
        message = str(e.value)
    else:
        message = got.stderr
    assert f"{tgt}, line 2: not valid UTF-8" in message and "convert the file to UTF-8" in message


def test_empty_lines_are_dropped_and_counted_and_an_empty_corpus_is_an_error(tmp_path: Path, record) -> None:
    record.bad_input("empty and whitespace-only lines in a training corpus")
    src = lines(tmp_path / "a.src", ["one two", "", "three", "   ", "four five six seven"])
    tgt = lines(tmp_path / "a.tgt", ["eins zwei", "leer", "\t", "drei", "vier fünf sechs sieben"])
    chunks.write_index(tmp_path / "i.json", chunks.index(src, tgt, 1), src, tgt)
    out = {k: tmp_path / f"c.{k}" for k in ("src", "tgt", "json")}
    clean_chunk(tmp_path / "i.json", 0, src, tgt, "en", "de", prep(), out["src"], out["tgt"],
                out["json"])
    steps = {s["step"]: (s["kept"], s["dropped"]) for s in json.loads(out["json"].read_text())["steps"]}
    assert steps["non_empty"] == (2, 3)                     # three pairs with an empty side, counted
    assert out["src"].read_text().splitlines() == ["one two"]  # the 4-word pair is over max_words=3
    record.bad_input("a corpus left empty by its filters")
    src2, tgt2 = lines(tmp_path / "b.src", ["", "a b c d e"]), lines(tmp_path / "b.tgt", ["x", "v w x y z"])
    chunks.write_index(tmp_path / "j.json", chunks.index(src2, tgt2, 1), src2, tgt2)
    part = (tmp_path / "d.src", tmp_path / "d.tgt", tmp_path / "d.json")
    clean_chunk(tmp_path / "j.json", 0, src2, tgt2, "en", "de", prep(), *part)
    with pytest.raises(InputError) as e:
        merge([part], tmp_path / "m.src", tmp_path / "m.tgt", tmp_path / "m.json", False, {"corpus": "toy"})
    assert "toy: the training data is empty after filtering (2 pairs in; non_empty dropped 1" in str(e.value)
    assert "max_words" in str(e.value)
    assert not (tmp_path / "m.src").exists() and not (tmp_path / "m.json").exists()


def test_a_job_killed_while_writing_leaves_no_finished_file(tmp_path: Path, record) -> None:
    record.fault("SIGKILL to `rnmt synth` while it writes the corpus, then rerun")
    out = tmp_path / "raw"
    cmd = [sys.executable, "-m", "rnmt", "synth", "--out-dir", str(out), "--train", "200000", "--dev", "10",
           "--test", "10"]
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(cmd, stderr=subprocess.DEVNULL, env=env)
    end = time.time() + 60
    while time.time() < end and not list(out.glob(".*.part")):       # kill once it has started writing
        time.sleep(0.01)
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert list(out.glob(".*.part")), "the kill came while files were being written"
    assert not (out / "train.src").exists() and not (out / "train.tgt").exists(), "no half-written file"
    got = rnmt("synth", "--out-dir", str(out), "--train", "300", "--dev", "10", "--test", "10")
    assert got.returncode == 0, got.stderr[-2000:]
    assert len((out / "train.src").read_text().splitlines()) == 300


def test_truncated_archive_is_a_clear_error(tmp_path: Path, record) -> None:
    record.bad_input("a truncated .tgz download (no pin to catch it)")
    data = make_tgz({"corpus/train.en": b"".join(b"line %d of text\n" % i for i in range(5000))})
    (tmp_path / "a.tgz").write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match=r"a.tgz: the archive is damaged or truncated .*delete it and rerun"):
        extract_member(tmp_path / "a.tgz", "corpus/train.en", tmp_path / "out.en")
    assert not (tmp_path / "out.en").exists()


def test_unknown_names_and_incompatible_settings(record) -> None:
    record.bad_input("an unknown cell name")
    with pytest.raises(InputError, match=r"unknown cell 'lstn'; valid cells: .*lstm"):
        build_model("rnnsearch", 10, 10, cell="lstn")
    record.bad_input("an unknown architecture name")
    with pytest.raises(InputError, match=r"unknown architecture 'rnnserch'; valid architectures: .*rnnsearch"):
        build_model("rnnserch", 10, 10)
    record.bad_input("SR-NMT highway with embedding size != hidden size")
    with pytest.raises(InputError, match=r"input size \(300\) must equal hidden \(500\).*emb = hidden.*highway"):
        build_model("srnmt", 10, 10, emb=300, hidden=500)


def test_unknown_cell_given_to_rnmt_train(corpus: dict[str, Path], tmp_path: Path, record) -> None:
    record.bad_input("a misspelled cell given to `rnmt train`")
    c = corpus
    got = rnmt("train", "--model", json.dumps({"arch": "rnnsearch", "cell": "gruu", "emb": 8, "hidden": 8}),
               "--settings", json.dumps({"max_steps": 1, "threads": 1}), "--train-src", str(c["train_src"]),
               "--train-tgt", str(c["train_tgt"]), "--dev-src", str(c["dev_src"]), "--dev-tgt", str(c["dev_tgt"]),
               "--src-vocab", str(c["src_vocab"]), "--tgt-vocab", str(c["tgt_vocab"]), "--out-dir", str(tmp_path))
    assert got.returncode == 2 and "Traceback" not in got.stderr, got.stderr[-2000:]
    assert "rnmt train: error: unknown cell 'gruu'; valid cells: " in got.stderr and ", gru, " in got.stderr
    assert not (tmp_path / "last.pt").exists()


def test_check_config_reports_an_unknown_cell_before_any_job(tmp_path: Path, record) -> None:
    record.bad_input("a misspelled cell in a systems file (`rnmt check-config`)")
    shutil.copytree(ROOT / "workflow/schemas", tmp_path / "workflow/schemas")
    shutil.copytree(ROOT / "workflow/systems", tmp_path / "workflow/systems")
    shutil.copy(ROOT / "workflow/corpora.yaml", tmp_path / "workflow/corpora.yaml")
    (tmp_path / "workflow/experiments").mkdir()
    shutil.copy(ROOT / "workflow/experiments/demo-rnnsearch.yaml", tmp_path / "workflow/experiments")
    systems = (tmp_path / "workflow/systems/demo.yaml").read_text()
    assert "cell: atr\n" in systems
    (tmp_path / "workflow/systems/demo.yaml").write_text(systems.replace("cell: atr\n", "cell: atrr\n"))
    (tmp_path / "tables.yaml").write_text("tables: [demo-rnnsearch]\n")
    got = rnmt("check-config", str(ROOT / "config.yaml"), "--configfile", str(tmp_path / "tables.yaml"),
               "--root", str(tmp_path))
    assert got.returncode == 2 and "Traceback" not in got.stderr, got.stderr[-2000:]
    assert "systems/demo.yaml: variant 'rnnsearch-atr': unknown cell 'atrr'; valid cells: atr, gru," in got.stderr


def test_full_disk_in_a_corpus_stage_keeps_the_previous_output(small_disk: Path, tmp_path: Path, record) -> None:
    record.fault("disk full (2 MiB tmpfs) while `rnmt tokenize` writes its output over an earlier one")
    inp = lines(tmp_path / "in.en", [f"This is sentence number {i}, with some words." for i in range(20000)])
    out = small_disk / "tok.en"
    out.write_text("the earlier output\n")
    filler = fill(small_disk, leave=16 * 1024)
    got = rnmt("tokenize", "--lang", "en", str(inp), str(out))
    assert got.returncode == 2 and "Traceback" not in got.stderr, got.stderr[-2000:]
    assert f"rnmt tokenize: error: {out}: no space left on the device while writing it" in got.stderr
    assert "tok.en keeps its previous content. Free space" in got.stderr
    assert out.read_text() == "the earlier output\n"
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "tok.en"], "no partial file is left"
    filler.unlink()
    assert rnmt("tokenize", "--lang", "en", str(inp), str(out)).returncode == 0
    assert len(out.read_text().splitlines()) == 20000


def test_an_empty_test_set_is_refused_by_the_data_stage(tmp_path: Path, record) -> None:
    record.bad_input("an empty test split (0 lines) given to `rnmt corpus assemble`")
    src, tgt = lines(tmp_path / "test.en", []), lines(tmp_path / "test.de", [])
    out = {k: tmp_path / f"raw/test.{k}" for k in ("src", "tgt", "json")}
    got = rnmt("corpus", "assemble", "--split", "test", "--src", str(src), "--tgt", str(tgt), "--out-src",
               str(out["src"]), "--out-tgt", str(out["tgt"]), "--manifest", str(out["json"]))
    assert got.returncode == 2 and "Traceback" not in got.stderr, got.stderr[-2000:]
    assert f"rnmt corpus assemble: error: the test split is empty: {src} has no sentences" in got.stderr
    assert "holdout:" in got.stderr and "files:" in got.stderr
    assert not out["src"].exists() and not out["tgt"].exists()

    record.bad_input("a test file whose every line is empty (`rnmt corpus prepare-text`)")
    blank = lines(tmp_path / "test.src", ["", "  ", "\t"])
    got = rnmt("corpus", "prepare-text", "--lang", "en", "--settings", SETTINGS, str(blank), str(tmp_path / "t.tok"))
    assert got.returncode == 2 and "Traceback" not in got.stderr, got.stderr[-2000:]
    assert (f"rnmt corpus prepare-text: error: {blank}: no sentences (all 3 lines are empty after preparing)"
            in got.stderr)
    assert "a dev or test set needs sentences" in got.stderr and "holdout:" in got.stderr
    assert not (tmp_path / "t.tok").exists()
    empty = lines(tmp_path / "dev.src", [])
    got = rnmt("corpus", "prepare-text", "--lang", "en", "--settings", SETTINGS, str(empty), str(tmp_path / "d.tok"))
    assert got.returncode == 2 and f"{empty}: no sentences (the file is empty)" in got.stderr


def prepared(tmp_path: Path, name: str, src_rows: list[str], tgt_rows: list[str], settings: PreprocessSettings,
             test_src: Path | None = None) -> tuple[dict, Path]:
    """Clean and merge one corpus (one chunk); its prepare.json and the training source it wrote."""
    d = tmp_path / name
    d.mkdir()
    src, tgt = lines(d / "a.src", src_rows), lines(d / "a.tgt", tgt_rows)
    chunks.write_index(d / "i.json", chunks.index(src, tgt, 1), src, tgt)
    part = (d / "c.src", d / "c.tgt", d / "c.json")
    clean_chunk(d / "i.json", 0, src, tgt, "en", "de", settings, *part)
    merge([part], d / "train.src", d / "train.tgt", d / "prepare.json", False, {"corpus": name}, test_src=test_src)
    return json.loads((d / "prepare.json").read_text()), d / "train.src"


@pytest.mark.parametrize("tokenized", [True, False])
def test_bom_and_control_characters_are_fixed_and_counted(tmp_path: Path, record, caplog, tokenized: bool) -> None:
    from rnmt.data.vocab import Vocab

    settings = prep(max_words=10, tokenized=tokenized)
    rows_src, rows_tgt = ["the house is red", "a cat", "one more line"], ["das Haus ist rot", "eine Katze", "noch eine"]
    record.bad_input(f"a UTF-8 byte order mark at the start of a training file (tokenized={tokenized})")
    plain, plain_src = prepared(tmp_path, "plain", rows_src, rows_tgt, settings)
    bom, bom_src = prepared(tmp_path, "bom", ["\ufeff" + rows_src[0], *rows_src[1:]], ["\ufeff" + rows_tgt[0],
                                                                                       *rows_tgt[1:]], settings)
    vocab = {p: list(Vocab.build(p.read_text(encoding="utf-8").splitlines()).itos) for p in (plain_src, bom_src)}
    assert vocab[bom_src] == vocab[plain_src] and not any("\ufeff" in t for t in vocab[bom_src])
    steps = {s["step"]: s for s in bom["steps"]}
    assert steps["bom"] == {"step": "bom", "kept": 3, "dropped": 0, "changed": 1}     # one pair changed
    assert {s["step"]: s.get("changed") for s in plain["steps"]}["bom"] == 0
    assert "1 pairs had a UTF-8 byte order mark" in caplog.text and "prepare.json" in caplog.text

    record.bad_input(f"NUL bytes and other control characters inside training lines (tokenized={tokenized})")
    caplog.clear()
    got, got_src = prepared(tmp_path, "nul", ["a\x00b", "c\x07d\te", "f g"], ["x\x00y", "z", "w"], settings)
    assert got_src.read_text().splitlines() == ["a b", "c d e", "f g"]       # two words each, not 'ab'
    steps = {s["step"]: s.get("changed") for s in got["steps"]}
    assert steps["nul"] == 1 and steps["control_chars"] == 1 and steps["bom"] == 0
    assert [s["step"] for s in got["steps"]][:4] == ["bom", "nul", "control_chars", "non_empty"]
    assert "1 pairs had NUL bytes" in caplog.text and "1 pairs had control characters" in caplog.text

    record.bad_input(f"a BOM and a NUL byte in a test file (`prepare-text`, tokenized={tokenized})")
    caplog.clear()
    test = lines(tmp_path / "test.src", ["\ufeffthe house", "a\x00b"])
    prepare_text(test, tmp_path / "test.tok", Preparer.from_settings("en", settings))
    assert (tmp_path / "test.tok").read_text().splitlines() == ["the house", "a b"]
    assert f"{test}: 1 lines had a UTF-8 byte order mark" in caplog.text and "1 lines had NUL bytes" in caplog.text


def test_identical_sides_and_a_test_set_inside_the_training_data_are_warned_about(tmp_path: Path, record,
                                                                                  caplog) -> None:
    settings = prep(max_words=10)
    record.bad_input("the same file given as source and target of the training data")
    rows = ["the house", "a cat", "", "one more line"]
    report, _ = prepared(tmp_path, "same", rows, rows, settings)
    warning = ("same: every one of the 3 training pairs has the same text on both sides: probably the same file "
               "was given twice")
    assert warning in caplog.text and any(w.startswith(warning) for w in report["warnings"])
    assert report["identical_pairs"] == 3
    caplog.clear()
    report, _ = prepared(tmp_path, "mixed", rows, ["das Haus", "a cat", "", "noch eine"], settings)
    assert report["identical_pairs"] == 1 and report["warnings"] == [] and "same text" not in caplog.text

    record.bad_input("the same file given as source and target of a test split (`rnmt corpus assemble`)")
    test = lines(tmp_path / "test.en", ["x y", "z"])
    got = rnmt("corpus", "assemble", "--split", "test", "--src", str(test), "--tgt", str(test), "--out-src",
               str(tmp_path / "t.src"), "--out-tgt", str(tmp_path / "t.tgt"), "--manifest", str(tmp_path / "t.json"))
    assert got.returncode == 0, got.stderr[-2000:]
    warning = f"test: every one of the 2 pairs has the same text on both sides ({test} and {test})"
    assert warning in got.stderr and json.loads((tmp_path / "t.json").read_text())["warnings"][0].startswith(warning)

    record.bad_input("a test set half of whose sources occur in the training data")
    caplog.clear()
    test_src = lines(tmp_path / "test.tok", ["a cat", "a dog", "one more line", "the house is red"])
    report, _ = prepared(tmp_path, "overlap", ["the house", "a cat", "one more line"],
                         ["das Haus", "eine Katze", "noch eine"], settings, test_src=test_src)
    assert report["test_overlap"] == {"test_src": str(test_src), "sentences": 4, "in_training": 2, "share": 0.5}
    warning = (f"overlap: 2 of the 4 test sentences (50.0%) in {test_src} occur as sources in the training data: "
               "BLEU on this test set overstates the model")
    assert warning in caplog.text and any(w.startswith(warning) for w in report["warnings"])
    caplog.clear()
    report, _ = prepared(tmp_path, "clean", ["the house"], ["das Haus"], settings,
                         test_src=lines(tmp_path / "t2.tok", ["a dog"]))
    assert report["test_overlap"]["in_training"] == 0 and report["warnings"] == [] and "occur" not in caplog.text


def test_a_corpus_made_mostly_of_one_repeated_pair_is_warned_about(tmp_path: Path, record, caplog) -> None:
    """Thousands of copies of one pair (a scraping accident) teach the model that pair; the estimate in
    bounded memory finds it, and a corpus of distinct pairs gets no warning."""
    record.bad_input("a training corpus a quarter of which is copies of one pair")
    settings = prep(max_words=10)
    words = [f"w{i} x{i % 7} y{i % 11}" for i in range(3000)]
    src = words[:2250] + ["the same pair"] * 750
    report, _ = prepared(tmp_path, "copies", src, [w.upper() for w in src], settings)
    assert report["repeats"]["pairs"] == 3000 and 0.2 <= report["repeats"]["most_repeated_share"] <= 0.3
    warning = re.compile(r"copies: about 2\d% of the 3000 training pairs repeat another pair \(one pair alone about")
    assert warning.search(caplog.text) and any(warning.match(w) for w in report["warnings"]), report
    assert "preprocess: {dedupe: true}" in report["warnings"][0]
    caplog.clear()
    report, _ = prepared(tmp_path, "distinct", words, [w.upper() for w in words], settings)
    assert report["repeats"]["repeated_share"] == 0.0 and report["warnings"] == [] and "repeat" not in caplog.text


def check_config_with(tmp_path: Path, corpus: dict) -> subprocess.CompletedProcess[str]:
    """`rnmt check-config` of the shipped config with the demo table run on `corpus` (a config entry)."""
    shutil.copytree(ROOT / "workflow/schemas", tmp_path / "workflow/schemas", dirs_exist_ok=True)
    shutil.copytree(ROOT / "workflow/systems", tmp_path / "workflow/systems", dirs_exist_ok=True)
    shutil.copy(ROOT / "workflow/corpora.yaml", tmp_path / "workflow/corpora.yaml")
    (tmp_path / "workflow/experiments").mkdir(exist_ok=True)
    shutil.copy(ROOT / "workflow/experiments/demo-rnnsearch.yaml", tmp_path / "workflow/experiments")
    over = {"tables": ["demo-rnnsearch"], "corpora": {"mine": corpus}, "scales": {"demo": {"corpus": "mine"}}}
    (tmp_path / "over.yaml").write_text(json.dumps(over))
    return rnmt("check-config", str(ROOT / "config.yaml"), "--configfile", str(tmp_path / "over.yaml"), "--root",
                str(tmp_path))


def test_check_config_names_missing_local_folders_and_files(tmp_path: Path, record) -> None:
    files = {"train": ["train.en", "train.de"], "dev": ["dev.en", "dev.de"], "test": ["test.en", "test.de"]}
    record.bad_input("a local: corpus whose folder does not exist (`rnmt check-config`)")
    gone = tmp_path / "no-such-folder"
    got = check_config_with(tmp_path, {"source": f"local:{gone}", "src_lang": "en", "tgt_lang": "de", "files": files})
    assert got.returncode == 2 and "Traceback" not in got.stderr, got.stderr[-2000:]
    assert (f"rnmt check-config: error: config corpora.mine.source: the folder {gone} (local:{gone}) does not "
            "exist; create it with the corpus' files, or correct the path") in got.stderr

    record.bad_input("a local: corpus (relative folder) missing two of its files (`rnmt check-config`)")
    (tmp_path / "mydata").mkdir()
    for name in ("train.en", "train.de", "dev.en", "dev.de", "test.en"):
        lines(tmp_path / "mydata" / name, ["a b"])
    got = check_config_with(tmp_path, {"source": "local:mydata", "src_lang": "en", "tgt_lang": "de",
                                       "files": {**files, "test": ["test.en", "test.de"], "dev": ["dev.en", "dv.de"]}})
    assert got.returncode == 2 and "Traceback" not in got.stderr, got.stderr[-2000:]
    for split, name in (("dev", "dv.de"), ("test", "test.de")):
        assert (f"config corpora.mine.files.{split}: {tmp_path / 'mydata' / name} does not exist; put the file there "
                f"or correct its name in files.{split}") in got.stderr
    assert "relative to the folder" in got.stderr
    lines(tmp_path / "mydata/test.de", ["x y"])
    lines(tmp_path / "mydata/dv.de", ["x y"])
    got = check_config_with(tmp_path, {"source": "local:mydata", "src_lang": "en", "tgt_lang": "de",
                                       "files": {**files, "dev": ["dev.en", "dv.de"]}})
    assert got.returncode == 0 and "config OK" in got.stdout, got.stderr[-2000:]


BODY = b"".join(b"line %d of text\n" % i for i in range(5000))


def archive(kind: str) -> tuple[bytes, int]:
    """An archive of two members (tar, gzipped or not, or zip) and the offset where its second member starts."""
    buf = io.BytesIO()
    if kind == "zip":
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("corpus/train.en", BODY)
            z.writestr("corpus/train.de", BODY)
        return buf.getvalue(), 0
    with tarfile.open(fileobj=buf, mode="w:gz" if kind == "tgz" else "w") as tar:
        for name in ("corpus/train.en", "corpus/train.de"):
            info = tarfile.TarInfo(name)
            info.size = len(BODY)
            tar.addfile(info, io.BytesIO(BODY))
            if name.endswith(".en"):
                boundary = tar.offset                   # a plain tar cut here still reads as a shorter archive
    return buf.getvalue(), boundary


@pytest.mark.parametrize("name,cut", [("a.tgz", "half"), ("a.tar.gz", "half"), ("a.tar.gz", "head"),
                                      ("a.zip", "half"), ("a.zip", "head"), ("a.tar", "half"),
                                      ("a.tar", "boundary")])
def test_truncated_archives_are_clear_errors_from_the_library(tmp_path: Path, record, name: str, cut: str) -> None:
    record.bad_input(f"a truncated {name} ({cut}) given to extract_member, list_members and extract_all")
    data, boundary = archive("zip" if name.endswith(".zip") else "tgz" if "gz" in name else "tar")
    end = {"half": len(data) // 2, "head": 100, "boundary": boundary}[cut]
    path = tmp_path / name
    path.write_bytes(data[:end])
    promise = rf"{path}: the archive is damaged or truncated \(.*\); delete it and rerun to download it again"
    with pytest.raises(InputError, match=promise):
        extract_member(path, "corpus/train.en", tmp_path / "out.en")
    with pytest.raises(InputError, match=promise):
        list_members(path)
    with pytest.raises(InputError, match=promise):
        extract_all(path, tmp_path / "all")
    assert not (tmp_path / "out.en").exists() and not (tmp_path / "all").exists()
