"""A bad config stops the run before any job, with a message naming the key and what is allowed."""

import copy
import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, run_snakemake
from rnmt.config import ConfigError
from rnmt.planning.plan import Plan


@pytest.fixture
def config() -> dict:
    return yaml.safe_load((ROOT / "config.yaml").read_text())


def test_shipped_config_is_valid(config: dict) -> None:
    plan = Plan(config, ROOT)
    assert {"atr-table2", "srnmt-table2", "dtmt-table1", "ud-figure2"} <= set(plan.tables)
    assert plan.variants[("synthetic-demo", "atr-rnnsearch-gru")].model["cell"] == "gru"


def test_misspelled_key_names_it_and_suggests(config: dict) -> None:
    config["train"]["learning_rate"] = 0.1
    with pytest.raises(ConfigError) as e:
        Plan(config, ROOT)
    msg = str(e.value)
    assert "unknown key 'train.learning_rate'" in msg
    assert "did you mean 'lr'" in msg or "allowed keys here:" in msg
    assert "batch_size" in msg                       # lists what is allowed


def test_misspelled_top_level_key(config: dict) -> None:
    config["tabels"] = config.pop("tables")
    with pytest.raises(ConfigError) as e:
        Plan(config, ROOT)
    assert "unknown key 'tabels' (did you mean 'tables'?)" in str(e.value)
    assert "missing key 'tables'" in str(e.value)


def test_wrong_type_names_key_and_type(config: dict) -> None:
    config["train"]["batch_size"] = "eighty"
    with pytest.raises(ConfigError, match=r"'train.batch_size' must be of type integer, got str 'eighty'"):
        Plan(config, ROOT)


def test_bad_enum_lists_allowed_values(config: dict) -> None:
    config["decode"]["length_penalty"] = "gnmp"
    with pytest.raises(ConfigError, match="allowed values: average, gnmt, none"):
        Plan(config, ROOT)


def test_unknown_table_lists_known_ones(config: dict) -> None:
    config["tables"] = ["atr-tabel2"]
    with pytest.raises(ConfigError, match="known tables: .*atr-table2"):
        Plan(config, ROOT)


def test_a_table_target_outside_tables_says_how_to_add_it(config: dict, tmp_path: Path) -> None:
    config["tables"] = ["demo-rnnsearch"]
    plan = Plan(config, ROOT)
    add = r"'atr-table2' is not in this run's `tables:` .*--config tables='\[atr-table2\]'"
    with pytest.raises(ConfigError, match=add):
        plan.metrics_paths("atr-table2")
    with pytest.raises(ConfigError, match="did you mean 'atr-table2'"):
        plan.table("atr-tabel2")
    # through Snakemake: asking for the CSV of a table the config does not list names it and the fix
    (tmp_path / "one.yaml").write_text(yaml.safe_dump({"tables": ["demo-rnnsearch"]}))
    r = run_snakemake(["-n", "results/demo/tables/atr-table2.csv", "--configfile", "one.yaml"], tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "'atr-table2' is not in this run's `tables:`" in out
    assert "KeyError" not in out


def test_the_readmes_nested_config_overrides_reach_the_jobs_typed(tmp_path: Path) -> None:
    """Snakemake keeps the nested values of `--config key='{...}'` as strings; the README's override
    lines must still plan, and every training job must get the overridden setting as a number."""
    readme = (ROOT / "README.md").read_text()
    lines = re.findall(r"snakemake --cores all --config [^\n#]*", readme)
    lines += ["snakemake --config " + m for m in re.findall(r"`--config (override='[^`]*')`", readme)]
    assert len(lines) == 2
    for line in lines:
        args = [a for a in shlex.split(line)[1:] if a not in ("--cores", "all")]
        forced = yaml.safe_load(next(a for a in args if a.startswith("override=")).split("=", 1)[1])["train"]
        r = run_snakemake(["-n", "-p", *args], tmp_path)
        assert r.returncode == 0, line + "\n" + r.stderr[-2000:]
        trains = [c for c in r.stdout.splitlines() if " -m rnmt train " in c]
        assert trains, line
        for key, value in forced.items():
            assert all(f'"{key}": {json.dumps(value)},' in c for c in trains), (line, key)
    r = run_snakemake(["-n", "--config", "train={lr: fast}"], tmp_path)
    assert r.returncode != 0 and "'train.lr' must be of type number, got str 'fast'" in r.stdout + r.stderr


def test_experiment_errors_name_the_file(config: dict, tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "workflow/experiments").mkdir(parents=True)
    (root / "workflow/schemas").symlink_to(ROOT / "workflow/schemas")
    exp = yaml.safe_load((ROOT / "workflow/experiments/demo-rnnsearch.yaml").read_text())
    bad = copy.deepcopy(exp)
    bad["rows"][0]["seed"] = [1]
    (root / "workflow/experiments/demo-rnnsearch.yaml").write_text(yaml.safe_dump(bad))
    config["tables"] = ["demo-rnnsearch"]
    with pytest.raises(ConfigError) as e:
        Plan(config, root)
    assert "demo-rnnsearch.yaml is invalid" in str(e.value)
    assert "unknown key 'rows.0(RNNSearch + GRU).seed' (did you mean 'seeds'?)" in str(e.value)


def test_a_key_written_twice_in_a_systems_definition_is_refused(config: dict, tmp_path: Path) -> None:
    """YAML keeps the last of two equal keys: a system with two `model:` entries would lose the first's
    settings (a cell option) without a word."""
    root = tmp_path / "repo"
    (root / "workflow/systems").mkdir(parents=True)
    (root / "workflow/schemas").symlink_to(ROOT / "workflow/schemas")
    (root / "workflow/experiments").symlink_to(ROOT / "workflow/experiments")
    for path in (ROOT / "workflow/systems").glob("*.yaml"):
        (root / "workflow/systems" / path.name).write_text(path.read_text())
    text = (ROOT / "workflow/systems/demo.yaml").read_text()
    text = text.replace("    cell: gru\n", "    cell: gru\n    model: {hidden: 32}\n    model: {emb: 32}\n", 1)
    (root / "workflow/systems/demo.yaml").write_text(text)
    with pytest.raises(ConfigError, match=r"demo.yaml: line \d+: key 'model' appears twice"):
        Plan({**config, "tables": ["demo-rnnsearch"]}, root)


def test_snakemake_stops_before_any_job(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("train:\n  lr: fast\n")
    r = run_snakemake(["-n", "--configfile", "bad.yaml"], tmp_path)
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert "'train.lr' must be of type number, got str 'fast'" in out
    assert "rule synthetic_corpus" not in out
    assert not (tmp_path / "results").exists()


def test_check_config_merges_overrides_like_snakemake(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from rnmt.cli import main

    (tmp_path / "over.yaml").write_text("train:\n  lr: 0.01\n")
    assert main(["check-config", str(ROOT / "config.yaml"), "--configfile", str(tmp_path / "over.yaml"),
                 "--root", str(ROOT)]) == 0
    (tmp_path / "bad.yaml").write_text("train:\n  lr: fast\n")
    assert main(["check-config", str(ROOT / "config.yaml"), "--configfile", str(tmp_path / "bad.yaml"),
                 "--root", str(ROOT)]) == 2
    assert "'train.lr' must be of type number" in capsys.readouterr().err


def test_every_scale_budgets_training_in_steps_and_the_demo_sizes_them_per_system(config: dict) -> None:
    """A wall-clock budget makes a table depend on how busy the machine was: no scale may have one as
    its budget, and the demo's step budgets of the systems that learn slower (their `scales: {demo: ...}`
    in the systems files) reach their rows, over the scale's."""
    for scale in config["scales"]:
        plan = Plan({**config, "scale": scale}, ROOT)
        for v in plan.variants.values():
            assert v.train.get("max_steps", 0) > 0 or v.train.get("max_epochs", 0) > 0, (scale, v.name)
    demo = Plan(config, ROOT)
    for v in demo.variants.values():
        assert v.train["max_minutes"] == 0, v.name
    dtmt = yaml.safe_load((ROOT / "workflow/systems/dtmt.yaml").read_text())["systems"]
    for name in ("dtmt-4", "dtmt-1-gru"):
        assert demo.variants[("synthetic-demo", name)].train["max_steps"] == \
            dtmt[name]["scales"]["demo"]["train"]["max_steps"] > config["scales"]["demo"]["train"]["max_steps"]
    assert demo.variants[("synthetic-demo", "atr-rnnsearch-gru")].train["max_steps"] == \
        config["scales"]["demo"]["train"]["max_steps"]
    config = copy.deepcopy(config)
    config["scales"]["demo"]["train"]["max_stpes"] = 5
    with pytest.raises(ConfigError, match="max_stpes' \\(did you mean 'max_steps'"):
        Plan(config, ROOT)


def test_each_paper_selects_and_stops_as_it_did(config: dict) -> None:
    """At paper scale DTMT validates every 2K steps and keeps and stops by dev BLEU, on the paper's
    effective batch (its GPUs' worth of 4,096-token batches an update); SR-NMT keeps the best dev
    perplexity; the UD paper's Figure 2 records every minibatch's cost over the paper's 215 minibatches
    of 40, and every scale of that figure logs each minibatch."""
    tables = [p.stem for p in sorted((ROOT / "workflow/experiments").glob("*.yaml"))]
    plan = Plan({**config, "scale": "paper", "tables": tables}, ROOT)
    seen = set()
    for (_, name), v in plan.variants.items():
        t = v.train
        if name.startswith("dtmt-"):
            seen.add("dtmt")
            assert (t["select_by"], t["valid_every"], t["valid_bleu"]) == ("bleu", 2000, True), name
            assert t["max_steps"] == t["decay_end"] and t["replicas"] in (2, 8) and t["batch_tokens"] == 4096
        elif name.startswith("srnmt-"):
            seen.add("srnmt")
            assert t.get("select_by", "loss") == "loss" and t["patience"] == 5, name
    assert seen == {"dtmt", "srnmt"}
    for scale in config["scales"]:
        figure = Plan({**config, "scale": scale, "tables": ["ud-figure2"]}, ROOT)
        for v in figure.variants.values():
            assert v.train["log_every"] == 1, (scale, v.name)
            if scale == "paper":
                assert (v.train["max_steps"], v.train["batch_size"]) == (215, 40), v.name


def test_each_table_trains_its_papers_cells(config: dict) -> None:
    """ATR's tables train ATR as its eq. 6 (no biases; GNMT's stack passes tanh(h) on, its state eq. 9's)
    and the GRU as its eq. 4 (U(r ⊙ h)) on pairs up to 80 words; DTMT's GRUs keep the reset gate outside
    the product (its eq. 7)."""
    tables = [p.stem for p in sorted((ROOT / "workflow/experiments").glob("*.yaml"))]
    plan = Plan({**config, "scale": "paper", "tables": tables}, ROOT)
    cells = set()
    for key, v in plan.variants.items():
        name, paper = v.name, Path(plan.owner[key]).name.split("-")[0]
        cell, options = v.model.get("cell"), v.model.get("cell_options") or {}
        if paper == "atr" and cell in ("atr", "gru"):
            cells.add(("atr", cell))
            gnmt = {"output_tanh": True} if cell == "atr" and v.model.get("arch") == "gnmt" else {}   # tanh(h) on
            assert options == ({"bias": False, **gnmt} if cell == "atr" else {"reset": "before"}), name
            assert (v.train["max_len"], v.train["max_len_unit"]) == (80, "words"), name
        elif paper == "dtmt" and cell == "gru":
            cells.add(("dtmt", cell))
            assert options.get("reset", "after") == "after", name
    assert cells == {("atr", "atr"), ("atr", "gru"), ("dtmt", "gru")}


def readme_commands() -> list[str]:
    """The commands of the README's bash blocks, comments and leading environment assignments
    (`RNMT_JOBS_PER_GPU=7 snakemake ...`) dropped."""
    readme = (ROOT / "README.md").read_text()
    return [re.sub(r"^([A-Z_][A-Z0-9_]*=\S* )+", "", line.split(" #")[0].strip())
            for block in re.findall(r"```bash\n(.*?)```", readme, re.S)
            for line in re.sub(r"\\\n\s*", "", block).splitlines()            # a line continued with \\
            if line.strip() and not line.strip().startswith("#")]


def test_every_command_the_readme_shows_runs_as_written(tmp_path: Path) -> None:
    """Snakemake lines plan (a dry run; the `--config` overrides have their own test, `--report`, which
    needs a finished run, tests/test_tables.py), `rnmt` lines parse with their arguments, `make` targets
    exist; shell set-up lines (source, cd, sha256sum) are left out."""
    import shutil
    import subprocess

    from rnmt.cli import parser

    commands = readme_commands()
    snakemake = [c for c in commands if c.startswith("snakemake") and "--config" not in c]
    targets = [a for c in snakemake for a in shlex.split(c)[1:] if a.startswith("results/")]
    assert len(targets) >= 4
    r = run_snakemake(["-n", *targets], tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert run_snakemake(["-n"], tmp_path).returncode == 0
    for c in commands:                                                  # another scale's or run's targets
        if (c.startswith("snakemake") and "--report" not in c
                and re.search(r"--config (scale|run)=\w+( (scale|run)=\w+)*$", c)):
            r = run_snakemake(["-n", *shlex.split(c)[1:]], tmp_path)
            assert r.returncode == 0, c + "\n" + r.stderr[-2000:]
    for c in snakemake:
        args = shlex.split(c)[1:]
        if "--sdm" in args and shutil.which("conda") is None:
            r = run_snakemake(["-n", *args], tmp_path)
            assert "Is conda installed" in r.stdout + r.stderr       # the line needs conda, which says so
    for c in commands:
        part = c.split("|")[-1].strip()
        if part.startswith("rnmt "):
            parser().parse_args(shlex.split(part)[1:])                # exits on an unknown option
        elif part.startswith("make "):
            m = subprocess.run(["make", "-n", *shlex.split(part)[1:]], cwd=ROOT, capture_output=True, text=True)
            assert m.returncode == 0, m.stderr
    assert {c.split()[0] for c in commands} <= {"make", "source", "snakemake", "rnmt", "echo", "cd", "tail"}, commands


def test_tables_take_their_papers_settings_with_their_own_over_them(config: dict) -> None:
    """One definition a paper: DTMT's WMT En-De table keeps the paper's shared training settings (Zh-En's)
    and puts its own dropout and schedule over them; ATR's Zh-En table drops dropout only."""
    plan = Plan({**config, "scale": "paper", "run": "p", "tables": ["dtmt-table1", "dtmt-table2", "atr-table4",
                                                                   "atr-table5"]}, ROOT)
    by_table = {t: plan.variant(plan.tables[t].corpus, plan.tables[t].trained_rows[-1].variant)
                for t in plan.tables}
    zh, de = by_table["dtmt-table1"], by_table["dtmt-table2"]
    assert (zh.model["rnn_dropout"], zh.train["lr"], zh.train["decay_end"]) == (0.3, 0.001, 64000)
    assert (de.model["rnn_dropout"], de.train["lr"], de.train["decay_end"]) == (0.1, 0.0001, 1200000)
    assert zh.train["init_scale"] == de.train["init_scale"] == 0.08 and zh.decode == de.decode
    en_de, zh_en = by_table["atr-table4"], by_table["atr-table5"]
    assert (en_de.model["dropout"], zh_en.model["dropout"]) == (0.2, 0.0)
    assert en_de.train == zh_en.train and en_de.model["hidden"] == zh_en.model["hidden"] == 1000


def test_every_shipped_system_is_defined_once_and_trained_by_a_table() -> None:
    """The shipped tables name their systems (no row defines one in place) and no systems file keeps a
    system that no table trains."""
    experiments = [yaml.safe_load(p.read_text()) for p in (ROOT / "workflow/experiments").glob("*.yaml")]
    named = {r["variant"] for e in experiments for r in e["rows"] if "variant" in r}
    in_place = [r["system"] for e in experiments for r in e["rows"] if "arch" in r]
    assert not in_place, f"rows that define their system in place: {in_place}"
    defined = [name for p in (ROOT / "workflow/systems").glob("*.yaml")
               for name in yaml.safe_load(p.read_text())["systems"]]
    assert len(defined) == len(set(defined)) and set(defined) == named
