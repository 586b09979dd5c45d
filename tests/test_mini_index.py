"""The index of the `mini` results committed in benchmarks/multi30k/ says what those files say: a table
collected without writing the index again, or a table renamed, would leave a reader with a stale answer to
"which tables were trained, and which claims hold"."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "benchmarks/multi30k"


def _collect():                                     # the script, loaded as a module (benchmarks/ is no package)
    spec = importlib.util.spec_from_file_location("mini_collect", FOLDER / "collect.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_index_is_the_one_the_committed_tables_give() -> None:
    assert _collect().index() == (FOLDER / "README.md").read_text(), (
        "benchmarks/multi30k/README.md is stale: run python benchmarks/multi30k/collect.py --index")


def test_the_index_lists_every_table_once_and_counts_a_partial_table_as_such() -> None:
    text = _collect().index()
    experiments = [p.stem for p in (ROOT / "workflow/experiments").glob("*.yaml") if not p.stem.startswith("demo")]
    for name in experiments:
        assert text.count(f"(`{name}`)") == 1, name
        line = next(x for x in text.splitlines() if f"(`{name}`)" in x)
        md = FOLDER / f"{name}.md"
        if not md.is_file():
            assert line.startswith("- "), name                            # in the list of tables not trained
        else:                                                             # its table's own Markdown says partial
            assert ("(partial)" in line) == ("Partial table" in md.read_text()), name
