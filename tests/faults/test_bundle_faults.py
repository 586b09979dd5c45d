"""A bundle is untrusted input: files it names must be its own, its manifest and checkpoints must be what
`rnmt export` and `rnmt train` write, and nothing it says may make rnmt read outside the folder or allocate
without bound. Each case ends in `rnmt translate: error: ...` (exit 2), never a traceback."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from faults.faultlib import ROOT
from faults.test_training_faults import trainer
from rnmt.data.bpe import learn
from rnmt.decode.bundle import export
from rnmt.models import checkpoint

pytestmark = pytest.mark.faults
SECRET = "root:x:0:0:a line that must never reach the console"


@pytest.fixture(scope="module")
def made(corpus: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working bundle of a tiny model, with BPE codes."""
    d = tmp_path_factory.mktemp("bundle")
    trainer(corpus, d / "model", max_steps=2).run()
    learn(Path(corpus["train_src"]).read_text().splitlines(), d / "codes", 20)
    export(d / "bundle", [d / "model" / "model.pt"], "en", "en", {}, codes=d / "codes")
    return d / "bundle"


def translate(bundle: Path, stdin: bytes = b"a small test .\n") -> subprocess.CompletedProcess[bytes]:
    """`rnmt translate --bundle` as a user runs it, in a process of its own."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "rnmt", "translate", "--bundle", str(bundle)], input=stdin,
                          capture_output=True, env=env, timeout=120)


def copy_of(made: Path, tmp_path: Path) -> Path:
    out = tmp_path / "b"
    out.mkdir()
    for f in made.iterdir():
        (out / f.name).write_bytes(f.read_bytes())
    (tmp_path / "secret").write_text(SECRET + "\n")
    return out


def manifest(**changes: object) -> Callable[[Path], None]:
    def change(b: Path) -> None:
        m = json.loads((b / "bundle.json").read_text())
        m.update(changes)
        (b / "bundle.json").write_text(json.dumps(m))
    return change


def codes_link(b: Path) -> None:
    (b / "codes.src").unlink()
    (b / "codes.src").symlink_to(b.parent / "secret")


def model(change: Callable[[dict], object]) -> Callable[[Path], None]:
    def edit(b: Path) -> None:
        ckpt = checkpoint.load(b / "model1.pt")
        torch.save(change(ckpt), b / "model1.pt")
    return edit


def config(ckpt: dict, value: object) -> dict:
    ckpt["model_config"] = value
    return ckpt


def codes_bytes(data: bytes) -> Callable[[Path], None]:
    def edit(b: Path) -> None:
        (b / "codes.src").write_bytes(data)
    return edit


CASES = {
    "models: ['<an absolute path outside>']": (lambda b: manifest(models=[str(b.parent / "secret")])(b),
                                              "leads outside the bundle folder"),
    "models: ['../secret']": (manifest(models=["../secret"]), "'../secret' leads outside the bundle folder"),
    "codes: '<an absolute path outside>'": (lambda b: manifest(codes=str(b.parent / "secret"))(b),
                                           "leads outside the bundle folder"),
    "codes.src a symbolic link to a file outside": (codes_link, "'codes.src' leads outside the bundle folder"),
    "models: [1]": (manifest(models=[1]), "'models' must be a list of checkpoint file names"),
    "models: 'model1.pt' (a string)": (manifest(models="model1.pt"), "'models' must be a list of checkpoint"),
    "preprocess: [1]": (manifest(preprocess=[1]), "'preprocess' must be an object of settings"),
    "a manifest that is a list": (lambda b: (b / "bundle.json").write_text("[1, 2]"), "not a bundle manifest"),
    "a tensor instead of a checkpoint": (model(lambda c: torch.zeros(3)), "not an rnmt checkpoint (it holds a Tensor"),
    "model_config: 'x'": (model(lambda c: config(c, "x")), "model_config is not a mapping"),
    "model_config with hidden 10^7 (would allocate gigabytes)": (
        model(lambda c: config(c, {**c["model_config"], "hidden": 10_000_000})), "the weights do not fit"),
    "a vocabulary that is not a list of tokens": (model(lambda c: {**c, "src_vocab": 5}), "src_vocab is not a list"),
    "invalid UTF-8 in codes.src": (codes_bytes(b"#version: 0.2\n\xff\xfe a\n"), "not a BPE codes file"),
}


@pytest.mark.parametrize("what", list(CASES))
def test_a_bad_bundle_is_refused_naming_the_problem(what: str, made: Path, tmp_path: Path, command, record,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    record.safety(f"a bundle with {what}")
    b = copy_of(made, tmp_path)
    change, message = CASES[what]
    change(b)
    code, err = command("translate", "--bundle", str(b))
    assert code == 2, err[-2000:]
    assert "rnmt translate: error:" in err and message in err, err[-2000:]
    assert SECRET not in err and SECRET not in capsys.readouterr().out


def test_the_bundle_made_here_translates(made: Path, tmp_path: Path) -> None:
    got = translate(copy_of(made, tmp_path))
    assert got.returncode == 0, got.stderr.decode()[-2000:]
    assert len(got.stdout.decode().splitlines()) == 1


def test_a_bundle_with_another_corpus_bpe_codes_is_warned_about(made: Path, corpus: dict[str, Path], tmp_path: Path,
                                                                command, record,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """Codes learned on other text split the source into subwords the model never saw: it translates
    noise with exit 0, so the share of unknown subwords is measured and a high one warned about."""
    record.bad_input("a bundle whose BPE codes were learned on another corpus")
    b = copy_of(made, tmp_path)
    manifest(codes=None)(b)                 # the tiny model is word level: its own text is known to it
    text = "".join(Path(corpus["train_src"]).read_text().splitlines(keepends=True)[:20]).encode()
    assert command("translate", "--bundle", str(b), stdin=text)[0] == 0
    assert "not in the model's vocabulary" not in caplog.text
    learn(["zq" * k + " xv" * k for k in range(1, 40)], b / "codes.src", 30)        # another "language"
    manifest(codes="codes.src")(b)
    code, _ = command("translate", "--bundle", str(b), stdin=text)
    assert code == 0
    assert re.search(r"bundle .*: [0-9.]+% of the source subwords are not in the model's vocabulary", caplog.text)


def test_invalid_utf8_on_standard_input_names_the_line(made: Path, tmp_path: Path, command, record) -> None:
    record.bad_input("invalid UTF-8 on the standard input of `rnmt translate --bundle`")
    code, err = command("translate", "--bundle", str(copy_of(made, tmp_path)), stdin=b"fine .\nbad \xff here\n")
    assert code == 2 and "rnmt translate: error: standard input, line 2: not valid UTF-8" in err


def test_export_never_replaces_a_users_own_files(made: Path, tmp_path: Path, command, record) -> None:
    record.safety("rnmt export --out into a folder holding the user's own codes.src")
    out = tmp_path / "mine"
    out.mkdir()
    (out / "codes.src").write_text("my own file\n")
    code, err = command("export", "--out", str(out), "--model", str(made / "model1.pt"), "--src-lang", "en",
                        "--tgt-lang", "en")
    assert code == 2 and "holds files and is not a bundle" in err
    assert (out / "codes.src").read_text() == "my own file\n"
    record.bad_input("rnmt export --preprocess '[1]'")
    code, err = command("export", "--out", str(tmp_path / "new"), "--model", str(made / "model1.pt"), "--src-lang",
                        "en", "--tgt-lang", "en", "--preprocess", "[1]")
    assert code == 2 and "take JSON objects" in err


def test_a_tensor_repeated_by_its_strides_is_not_averaged(made: Path, tmp_path: Path, command, record) -> None:
    record.safety("average-checkpoints given a stride-0 tensor of 10^6 x 10^6 values (8 TB once averaged)")
    ckpt = checkpoint.load(made / "model1.pt")
    ckpt["state_dict"]["huge"] = torch.zeros(1).expand(1_000_000, 1_000_000)
    torch.save(ckpt, tmp_path / "a.pt")
    code, err = command("average-checkpoints", str(tmp_path / "a.pt"), str(made / "model1.pt"), "--output",
                        str(tmp_path / "avg.pt"))
    assert code == 2, err[-2000:]
    assert "weight huge claims (1000000, 1000000) values but the file holds" in err
