"""The index of the `mini` results committed in benchmarks/multi30k/ says what those files say: a table
collected without writing the index again, or a table renamed, would leave a reader with a stale answer to
"which tables were trained, and which claims hold"."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
from pathlib import Path

import pandas as pd

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


def test_the_index_lists_a_committed_row_made_with_earlier_settings_than_a_run_gives_now(tmp_path: Path) -> None:
    """A setting changed after a table was collected (DTMT's warm-up at `mini`) leaves its committed numbers
    those of the earlier models: the index must say which rows and what changed, not count them as the run's."""
    from rnmt.planning.current import expected
    from rnmt.planning.table import member_seeds

    collect = _collect()
    folder = tmp_path / "multi30k"
    shutil.copytree(FOLDER, folder)
    plan = collect._plan("mini")
    table = plan.table("atr-table4")
    bleu = pd.read_csv(folder / "atr-table4-bleu.csv")

    def made(variant: str, member: str, lr: float | None = None) -> str:
        now = expected(plan.variant(table.corpus, variant))
        train = {**now["train"], "seed": member_seeds(member)[0], **({"lr": lr} if lr is not None else {})}
        return json.dumps({"train": {"model_config": now["model"], "train_settings": train},
                           "decode": {"settings": now["search"]}})

    bleu["made_with"] = [made(v, m) for v, m in zip(bleu.variant, bleu.member, strict=True)]
    bleu.to_csv(folder / "atr-table4-bleu.csv", index=False)
    line = next(x for x in collect.index(folder).splitlines() if "(`atr-table4`)" in x)
    assert "| yes |" in line
    gru = bleu.index[bleu.variant == "atr-rnnsearch-gru"][0]
    lr = expected(plan.variant(table.corpus, "atr-rnnsearch-gru"))["train"]["lr"]
    bleu.loc[gru, "made_with"] = made("atr-rnnsearch-gru", bleu.member[gru], lr=0.25)
    bleu.to_csv(folder / "atr-table4-bleu.csv", index=False)
    text = collect.index(folder)
    assert f"| no: 1 of {len(bleu)} (below) |" in next(x for x in text.splitlines() if "(`atr-table4`)" in x)
    assert f"| `atr-table4` | RNNSearch+GRU (seed1) | training lr: 0.25 → {lr!r} |" in text


def test_collect_makes_the_gate_statistics_again_when_their_model_was_trained_again(tmp_path: Path) -> None:
    # ATR Figure 3's gates beside a model that a table sharing it trained again: the figure must not pair the
    # new model's row with the old model's gates (collect's last Snakemake call runs the table's rules only)
    collect = _collect()
    results = "results/mini"
    gates = {v: f"{results}/analysis/c/{v}/seed1/gates.test.json" for v in ("fresh", "stale", "missing", "kept")}
    model = {v: tmp_path / results / "models/c" / v / "seed1/model.pt" for v in ("fresh", "stale", "missing")}
    for path, when in ((model["fresh"], 100), (tmp_path / gates["fresh"], 200),  # made from this model
                       (model["stale"], 200), (tmp_path / gates["stale"], 100),  # its model trained since
                       (model["missing"], 100),                                  # no gates yet
                       (tmp_path / gates["kept"], 100)):                         # kept gates, no model here
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
        os.utime(path, (when, when))
    everyone = list(gates.values())
    for partial in (False, True):
        assert collect.gates_to_make(everyone, results, partial, set(), tmp_path) == [gates["stale"], gates["missing"]]
    model["missing"].unlink()
    assert collect.gates_to_make(everyone, results, False, set(), tmp_path) == [gates["stale"], gates["missing"]]
    assert collect.gates_to_make(everyone, results, True, set(), tmp_path) == [gates["stale"]]   # --partial trains none
    # a member whose metrics are stale is trained again in the same call: its gates too (with --partial, neither)
    training = {("fresh", "seed1")}
    assert collect.gates_to_make(everyone, results, False, training, tmp_path) == [
        gates["fresh"], gates["stale"], gates["missing"]]
    assert collect.gates_to_make(everyone, results, True, training, tmp_path) == [gates["stale"]]


def test_a_table_not_trained_names_the_rows_with_no_model_kept(tmp_path: Path) -> None:
    # DTMT Table 3 shares ShallowRNMT's cells with Tables 1-2: a row whose model is kept needs no training,
    # and the list of what is left must say so, or a session plans hours it need not spend
    collect = _collect()
    folder = tmp_path / "multi30k"
    shutil.copytree(FOLDER, folder)

    def line() -> str:
        return next(x for x in collect.index(folder).splitlines() if "(`dtmt-table3`)" in x)

    for built in folder.glob("dtmt-table3[.-]*"):       # the table not built (yet, or any more)
        built.unlink()
    kept = folder / "rows/metrics/multi30k-en-de/dtmt-shallow-lau"
    assert kept.is_dir(), "DTMT Tables 1-3 share ShallowRNMT + LAU: its seed-1 row member is kept in rows/"
    assert "`dtmt-shallow-lau`" not in line()
    shutil.rmtree(kept)
    assert "`dtmt-shallow-lau`" in line()


def test_an_ensemble_not_kept_counts_its_models_as_left_to_train(tmp_path: Path) -> None:
    # rows/ keeps metrics, not models: ATR Table 2's ensemble of the three ATR + CA seeds is decoded from
    # models that a session trains again, kept single rows or not, and "left to train" must count them
    collect = _collect()
    folder = tmp_path / "multi30k"
    shutil.copytree(FOLDER, folder)
    for kept in folder.glob("rows/*/multi30k-en-de/atr-rnnsearch-atr-ca/ens*"):
        shutil.rmtree(kept)
    seeds = folder / "rows/metrics/multi30k-en-de/atr-rnnsearch-atr-ca"
    assert sorted(p.name for p in seeds.iterdir()) == ["seed1", "seed2", "seed3"]
    left = re.search(r"^\| `atr-table2` \| (\d+) of \d+ \|", collect.index(folder), re.M)
    assert left and int(left[1]) >= 3, left         # ATR + CA's three seeds, though each is kept


def test_the_index_has_a_not_trained_section_only_while_a_table_is_not_built(tmp_path: Path) -> None:
    """With every table built, an empty 'Not trained yet' heading and its recipe would read as if something
    were left unbuilt; with one table's files gone, the section names it and says how it is made."""
    collect = _collect()
    folder = tmp_path / "multi30k"
    shutil.copytree(FOLDER, folder, ignore=shutil.ignore_patterns("rows"))
    built = collect.index(folder)
    assert "## Not trained yet" not in built or re.search(r"## Not trained yet \([1-9]", built), "no empty section"
    for f in folder.glob("dtmt-table4*"):
        f.unlink()
    section = collect.index(folder).split("## Not trained yet (", 1)[1].split("\n## ")[0]
    assert "(`dtmt-table4`)" in section and "Each is made by `snakemake" in section
