"""The conda environments pin exactly what pyproject.toml pins, so `--sdm conda` runs the same tools."""

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _name(spec: str) -> str:
    return re.split(r"[<>=!~ \[]", spec, maxsplit=1)[0].lower()


def pyproject_specs() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        specs += extra
    return {_name(s): s.replace(" ", "") for s in specs}


def test_every_env_pin_equals_pyproject() -> None:
    pins = pyproject_specs()
    envs = sorted((ROOT / "envs").glob("*.yaml"))
    assert {p.stem for p in envs} >= {"data", "parse", "train"}
    for env in envs:
        deps = yaml.safe_load(env.read_text())["dependencies"]
        pip = next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)
        for spec in pip:
            name = _name(spec)
            assert name in pins, f"{env.name}: {name} is not a dependency in pyproject.toml"
            assert spec.replace(" ", "") == pins[name], f"{env.name}: {spec} but pyproject.toml has {pins[name]}"


def test_every_rule_names_an_existing_env() -> None:
    for smk in (ROOT / "workflow/rules").glob("*.smk"):
        text = smk.read_text()
        rules = re.findall(r"^rule (\w+):", text, flags=re.M)
        envs = re.findall(r'conda:\s*\n\s*"([^"]+)"', text)
        assert len(envs) == len(rules), f"{smk.name}: every rule needs a conda: environment"
        for e in envs:
            assert (smk.parent / e).resolve().is_file(), f"{smk.name}: {e} does not exist"


def test_pyproject_tools_are_pinned_exactly() -> None:
    for name, spec in pyproject_specs().items():
        if name != "torch":       # a range, so cluster users keep their CUDA build
            assert "==" in spec, f"{spec} is not pinned"


def test_the_license_file_is_the_license_pyproject_declares() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]
    text = (ROOT / "LICENSE").read_text()
    assert declared == "MIT" and text.startswith("MIT License") and "WITHOUT WARRANTY OF ANY KIND" in text
