"""Decode setting tf32: the search's cuBLAS products in TF32 on CUDA. Here (no GPU) what can be seen without
one: the flag it turns on only for CUDA and gives back, the setting's way from a table row, the command line
and a bundle to the search and into the metrics, which say what the products took. tests/test_cuda.py holds
its effect on a GPU (other numbers than float32's, near them, and graphs of their own)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rnmt.bench.runner import run_benchmark
from rnmt.cli import main
from rnmt.decode.bundle import Bundle, export
from rnmt.io import InputError
from rnmt.machine import hardware
from test_average_row import OWN, plan_with_row
from tinytrain import train_tiny

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def flag() -> bool:
    return torch.backends.cuda.matmul.allow_tf32


def test_the_flag_is_on_for_cuda_only_and_given_back_after_the_search() -> None:
    before = flag()
    with hardware.tf32_products(CUDA, True) as on:
        assert on and flag()
        with hardware.tf32_products(CUDA, False) as inner:      # a float32 search inside is float32
            assert not inner and not flag()
        assert flag()
    assert flag() == before
    torch.backends.cuda.matmul.allow_tf32 = True                # set by the user: a float32 search turns it off
    try:
        with hardware.tf32_products(CUDA, False):
            assert not flag()
        with hardware.tf32_products(CPU, True) as on:           # nothing of a CPU's products is TF32
            assert not on and not flag()
        with pytest.raises(RuntimeError), hardware.tf32_products(CUDA, True):
            raise RuntimeError("a search that fails")
        assert flag()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def test_a_row_asking_for_tf32_gets_it_in_its_translate_settings(tmp_path: Path) -> None:
    (variant,) = plan_with_row(tmp_path, **OWN, decode={"tf32": True}).variants.values()
    assert json.loads(variant.decode_settings())["tf32"] is True
    # rows without it keep the translate settings they had before the setting existed (no redecoding)
    (plain,) = plan_with_row(tmp_path).variants.values()
    assert "tf32" not in json.loads(plain.decode_settings())


@pytest.fixture(scope="module")
def model(corpus: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_tiny(corpus, tmp_path_factory.mktemp("tf32") / "model", max_steps=20)


def test_translate_records_asking_for_tf32_and_what_the_products_took(model: Path, corpus: dict[str, Path],
                                                                     tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    src = str(corpus["dev_src"])
    for name, args in (("float32", []), ("flag", ["--tf32"]), ("json", ["--settings", '{"tf32": true}'])):
        assert main(["-q", "translate", "--model", str(model), "--beam", "3", *args, "--speed-beams", "--metrics",
                     str(tmp_path / f"{name}.json"), src, str(tmp_path / f"{name}.txt")]) == 0
    metrics = {n: json.loads((tmp_path / f"{n}.json").read_text()) for n in ("float32", "flag", "json")}
    assert "tf32" not in metrics["float32"]["settings"] and metrics["json"]["settings"]["tf32"] is True
    assert [m["tf32"] for m in metrics.values()] == [False, True, True]
    # asked for on a CPU, the products were float32's, and so were the translations
    assert [m["products"] for m in metrics.values()] == ["float32"] * 3
    said = [r.getMessage() for r in caplog.records if "tf32" in r.getMessage()]
    assert said == ["decode setting tf32 applies on CUDA only: on cpu the products stay float32"] * 2
    assert (tmp_path / "flag.txt").read_text() == (tmp_path / "json.txt").read_text() == \
        (tmp_path / "float32.txt").read_text()


def test_a_bundle_carries_tf32_to_its_searches(model: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    export(tmp_path / "tf32", [model], "en", "en", {}, decode={"beam": 3, "tf32": True})
    export(tmp_path / "plain", [model], "en", "en", {}, decode={"beam": 3})
    with caplog.at_level("WARNING"):
        assert Bundle.load(tmp_path / "tf32").translator(CPU).options["tf32"] is True
    assert "tf32 applies on CUDA only" in caplog.text
    assert Bundle.load(tmp_path / "plain").translator(CPU).options["tf32"] is False
    line = ["the red house is big ."]
    assert Bundle.load(tmp_path / "tf32").translator(CPU)(line) == Bundle.load(tmp_path / "plain").translator(CPU)(line)


def test_bench_decode_asks_for_a_gpu_for_tf32(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"--tf32 multiplies on CUDA's tensor cores, and the device is cpu"):
        run_benchmark("decode", tmp_path, quick=True, device="cpu", tf32=True)
