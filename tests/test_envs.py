"""pyproject.toml states ranges, requirements.lock pins the tested set inside them, and the conda
environments (envs/*.yaml) pin what the lock pins, so `--sdm conda` runs the tools the tests ran."""

import re
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def _name(spec: str) -> str:
    return re.split(r"[<>=!~ \[]", spec, maxsplit=1)[0].lower()


def pyproject_specs() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        specs += extra
    return {_name(s): s.replace(" ", "") for s in specs}


def lock_pins() -> dict[str, str]:
    lines = (ROOT / "requirements.lock").read_text().splitlines()
    pins = [line.split("==") for line in lines if line and not line.startswith("#")]
    return {canonicalize_name(name): version for name, version in pins}


def test_every_env_pin_is_the_locked_version() -> None:
    pins, lock = pyproject_specs(), lock_pins()
    envs = sorted((ROOT / "envs").glob("*.yaml"))
    assert {p.stem for p in envs} >= {"data", "parse", "train"}
    for env in envs:
        deps = yaml.safe_load(env.read_text())["dependencies"]
        pip = next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)
        for spec in pip:
            name = _name(spec)
            assert name in pins, f"{env.name}: {name} is not a dependency in pyproject.toml"
            if name == "torch":       # a range, so that pip picks the CUDA build on a GPU node
                assert spec.replace(" ", "") == pins[name]
            else:
                assert spec == f"{name}=={lock[canonicalize_name(name)]}", f"{env.name}: {spec}, lock: {lock[name]}"


def test_pyproject_states_ranges_the_lock_satisfies() -> None:
    lock = lock_pins()
    for name, spec in pyproject_specs().items():
        req = Requirement(spec)
        ops = {s.operator for s in req.specifier}
        assert ">=" in ops and "<" in ops and "==" not in ops, f"{spec}: not a range with both ends"
        if name not in ("torch", "triton"):       # a GPU node keeps its own build of these
            assert req.specifier.contains(lock[canonicalize_name(name)]), f"the lock's {name} is outside {spec}"


def test_the_installed_set_is_the_lock() -> None:
    """make setup installs with the lock as constraints: the tests run on exactly the locked set."""
    from importlib import metadata

    differ = {name: (version, metadata.version(name)) for name, version in lock_pins().items()
              if metadata.version(name) != version}
    assert differ == {}, f"installed versions differ from requirements.lock (locked, installed): {differ}; " \
                         "rerun make setup, or make lock after testing a new set"


def test_every_rule_names_an_existing_env() -> None:
    for smk in (ROOT / "workflow/rules").glob("*.smk"):
        text = smk.read_text()
        rules = re.findall(r"^rule (\w+):", text, flags=re.M)
        envs = re.findall(r'conda:\s*\n\s*"([^"]+)"', text)
        assert len(envs) == len(rules), f"{smk.name}: every rule needs a conda: environment"
        for e in envs:
            assert (smk.parent / e).resolve().is_file(), f"{smk.name}: {e} does not exist"


def test_every_command_a_rule_runs_has_the_rules_environment() -> None:
    """The import guard that runs the tests' workflow jobs (tests/envguard) knows each command's env."""
    import envblock

    commands = envblock.rule_commands()
    assert {"train", "translate", "score", "table", "parse", "corpus", "bpe"} <= set(commands)
    assert all("" not in envs for envs in commands.values()), commands


def test_the_license_file_is_the_license_pyproject_declares() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]
    text = (ROOT / "LICENSE").read_text()
    assert declared == "MIT" and text.startswith("MIT License") and "WITHOUT WARRANTY OF ANY KIND" in text
