"""Every RNMT_* environment variable rnmt reads is a typed switch of rnmt.machine.switches, read nowhere else, checked
with a message that names it, and documented in the README."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rnmt.io import InputError
from rnmt.machine.switches import Switches, describe

ROOT = Path(__file__).resolve().parents[1]


def test_switches_are_typed_and_default_when_unset() -> None:
    s = Switches.read({"RNMT_TRITON": "0", "RNMT_JOBS_PER_GPU": "7", "RNMT_REGISTRY": "/m/corpora.yaml",
                       "RNMT_FASTPATH": "default", "RNMT_PYTHON": "python3"})
    assert (s.triton, s.jobs_per_gpu, s.registry, s.fastpath) == (False, 7, Path("/m/corpora.yaml"), "default")
    assert Switches.read({}) == Switches() and Switches().matmul == "auto" and Switches().malloc_tuning


@pytest.mark.parametrize("env, message", [
    ({"RNMT_MATMUL": "fast"}, "RNMT_MATMUL='fast': valid values are auto, onednn, blas"),
    ({"RNMT_TRITON": "off"}, "RNMT_TRITON='off': give 0 or 1"),
    ({"RNMT_ATR_PERSISTENT": "yes"}, "RNMT_ATR_PERSISTENT='yes': valid values are auto, 0, 1"),
    ({"RNMT_JOBS_PER_GPU": "0"}, "RNMT_JOBS_PER_GPU='0' must be a whole number >= 1"),
])
def test_a_bad_value_is_named_with_what_the_switch_takes(env: dict[str, str], message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        Switches.read(env)


def test_no_module_reads_an_rnmt_variable_itself_and_the_readme_names_each() -> None:
    readers = [str(p.relative_to(ROOT)) for p in (ROOT / "src/rnmt").rglob("*.py")
               if p.name != "switches.py" and re.search(r"os\.environ[^\n]*RNMT_|getenv\(\S*RNMT_", p.read_text())]
    assert readers == [], f"read RNMT_* through rnmt.machine.switches.Switches: {readers}"
    readme = (ROOT / "README.md").read_text()
    missing = [name for name, _, _ in describe() if not re.search(rf"\b{name}\b", readme)]
    assert missing == [], f"document these in the README: {missing}"
