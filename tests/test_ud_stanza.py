"""The stanza parse stage for real, offline: a tiny POS tagger and dependency parser trained with
stanza's own training code on the synthetic language's gold trees, then the parse stage (stanza.Pipeline
on pretokenized text, in two chunks) on held-out sentences, scored against their gold trees."""

import hashlib
import json
import time
from pathlib import Path

import pytest
import torch

import envblock
from httpserver import Files, serve
from rnmt.cli import main
from rnmt.data import conll, labels
from rnmt.data.synthetic import write_corpus
from rnmt.parse.models import missing_message
from udcorpus import run


@pytest.fixture(scope="module")
def parsed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    torch.set_num_threads(1)
    d = tmp_path_factory.mktemp("stanza")
    write_corpus(d / "raw", {"train": 400, "dev": 60, "test": 120}, seed=5, max_words=16)
    t0 = time.perf_counter()
    run("parse", "train-models", "--lang", "en", "--train", d / "raw/train.src.conllu", "--dev",
        d / "raw/dev.src.conllu", "--model-dir", d / "models", "--steps-pos", "60", "--steps-depparse", "60")
    train_s = time.perf_counter() - t0
    run("tokenize", "--lang", "en", d / "raw/test.src", d / "tok/test.src")
    t0 = time.perf_counter()
    for k in range(2):
        run("parse", "run", "--lang", "en", "--model-dir", d / "models", "--chunk", k, "--chunks", 2,
            d / "tok/test.src", d / f"chunks/test.{k}.conllu")
    run("parse", "merge", "--output", d / "stanza/test.conllu", d / "chunks/test.0.conllu", d / "chunks/test.1.conllu")
    parse_s = time.perf_counter() - t0
    run("labels", "gold", "--conllu", d / "raw/test.src.conllu", "--text", d / "tok/test.src",
        "--output", d / "gold/test.conllu")
    print(f"\nstanza tagger+parser trained in {train_s:.0f} s; 120 sentences parsed (2 chunks) in {parse_s:.1f} s")
    return {"d": d, "models": d / "models", "pred": d / "stanza/test.conllu", "gold": d / "gold/test.conllu",
            "tok": d / "tok/test.src"}


def test_trained_models_parse_held_out_sentences_accurately(parsed: dict[str, Path]) -> None:
    manifest = json.loads((parsed["models"] / "rnmt-en.json").read_text())
    assert manifest["layout"] == "paths" and (parsed["models"] / manifest["depparse"]).is_file()
    gold, pred = conll.read(parsed["gold"]), conll.read(parsed["pred"])
    assert len(pred) == len(gold) == 120
    assert [s.forms for s in pred] == [line.split() for line in parsed["tok"].read_text().splitlines()]
    scores = conll.attachment_scores(gold, pred)
    print(f"\nheld-out synthetic sentences: UAS {scores['uas']:.4f}, LAS {scores['las']:.4f} "
          f"over {scores['words']} words")
    assert scores["las"] >= 0.8
    assert main(["parse", "score", "--output", str(parsed["d"] / "scores.json"), str(parsed["gold"]),
                 str(parsed["pred"])]) == 0


def test_predicted_labels_project_onto_subwords(parsed: dict[str, Path], tmp_path: Path) -> None:
    lines = parsed["tok"].read_text().splitlines()
    bpe = [" ".join(w[:2] + "@@ " + w[2:] if len(w) > 3 else w for w in line.split()) for line in lines]
    (tmp_path / "test.bpe").write_text("\n".join(bpe) + "\n")
    run("labels", "project", "--conllu", parsed["pred"], "--bpe", tmp_path / "test.bpe", "--output",
        tmp_path / "test.bpe.lab")
    lab = (tmp_path / "test.bpe.lab").read_text().splitlines()
    assert [len(x.split()) for x in lab] == [len(x.split()) for x in bpe]
    first = conll.read(parsed["pred"])[0]
    assert lab[0].split() == labels.project(labels.word_labels(first), bpe[0], "s1")


def test_a_manifest_naming_a_model_outside_its_folder_is_refused(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    models = tmp_path / "models"
    models.mkdir()
    (tmp_path / "elsewhere.pt").write_bytes(b"not a model")
    for name in ("pos.pt", "pretrain.pt"):
        (models / name).write_bytes(b"")
    (tmp_path / "t.src").write_text("the dog sleeps .\n")
    for depparse, says in (("../elsewhere.pt", "its depparse model '../elsewhere.pt' lies outside the model folder"),
                           (str(tmp_path / "elsewhere.pt"), "lies outside the model folder"),
                           (None, "names no depparse model")):
        (models / "rnmt-en.json").write_text(json.dumps({"layout": "paths", "pos": "pos.pt",
                                                          "pretrain": "pretrain.pt", "depparse": depparse}))
        rc = main(["parse", "run", "--lang", "en", "--model-dir", str(models), str(tmp_path / "t.src"),
                   str(tmp_path / "t.conllu")])
        assert rc == 2 and not (tmp_path / "t.conllu").exists()
        assert says in capsys.readouterr().err


def test_a_missing_model_names_the_folder_and_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "t.src").write_text("the dog sleeps .\n")
    rc = main(["parse", "run", "--lang", "en", "--model-dir", str(tmp_path / "none"), str(tmp_path / "t.src"),
               str(tmp_path / "t.conllu")])
    err = capsys.readouterr().err
    assert rc == 2
    assert missing_message(tmp_path / "none", "en") in err
    assert f"rnmt parse download --lang en --model-dir {tmp_path / 'none'}" in err


def test_stanza_downloader_fills_a_model_folder_from_a_mirror(parsed: dict[str, Path], tmp_path: Path) -> None:
    """stanza's own downloader against a local mirror serving the tiny models (as a site's mirror of the hub
    would); the downloaded folder, in stanza's layout, parses exactly as the models did before."""
    from stanza.resources.common import DEFAULT_RESOURCES_VERSION

    files, res = Files(), {"en": {"lang_name": "English", "default_processors": {"pos": "rnmt", "depparse": "rnmt"},
                                  "default_dependencies": {}}}
    for proc in ("pos", "depparse", "pretrain"):
        body = (parsed["models"] / "en" / proc / "rnmt.pt").read_bytes()
        files.content[f"/models/en/{proc}/rnmt.pt"] = body
        res["en"][proc] = {"rnmt": {"md5": hashlib.md5(body).hexdigest(),
                                    **({"dependencies": [{"model": "pretrain", "package": "rnmt"}]}
                                       if proc != "pretrain" else {})}}
    with serve(files) as url:
        res["url"] = url + "/models/{lang}/{filename}"
        files.content[f"/resources_{DEFAULT_RESOURCES_VERSION}.json"] = json.dumps(res).encode()
        run("parse", "download", "--lang", "en", "--package", "rnmt", "--processors", "pos,depparse",
            "--resources-url", url, "--model-dir", tmp_path / "hub")
    assert files.count("/models/en/depparse/rnmt.pt") == 1
    assert (tmp_path / "hub/resources.json").is_file() and (tmp_path / "hub/en/pos/rnmt.pt").is_file()
    assert json.loads((tmp_path / "hub/rnmt-en.json").read_text())["layout"] == "stanza"
    run("parse", "run", "--lang", "en", "--model-dir", tmp_path / "hub", parsed["tok"], tmp_path / "test.conllu")
    assert (tmp_path / "test.conllu").read_text() == parsed["pred"].read_text()


def test_the_parse_environment_holds_what_parsing_needs(parsed: dict[str, Path], tmp_path: Path) -> None:
    """`rnmt parse run` with only envs/parse.yaml's packages importable, as under `snakemake --sdm conda`,
    parses as it does with every package installed."""
    log = tmp_path / "guard.jsonl"
    out = tmp_path / "test.0.conllu"
    r = envblock.run_guarded(["parse", "run", "--lang", "en", "--model-dir", parsed["models"], "--chunk", 0,
                              "--chunks", 2, parsed["tok"], out], log, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert out.read_text() == (parsed["d"] / "chunks/test.0.conllu").read_text()
    assert {"command": "parse", "env": "parse"} in [{k: v for k, v in x.items() if k != "pid"}
                                                    for x in envblock.guarded(log)]
    plan = json.loads((tmp_path / "envguard-plan.json").read_text())["commands"]["parse"]
    assert {"sacrebleu", "pandas", "matplotlib"} <= set(plan["blocked"])      # packages the parse env lacks
