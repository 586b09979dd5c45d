"""A run's recorded config (rnmt.planning.runconfig): later commands build with it; contradictions are refused."""

from pathlib import Path

import pytest
import yaml

from rnmt.io import InputError
from rnmt.planning.runconfig import record_path, resolve, update_record

BUILT = {"run": "r", "scale": "demo", "tables": ["atr-table2"], "train": {"lr": 0.002, "batch_size": 64},
         "override": {"train": {"max_steps": 40}}}


def built_run(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    assert update_record(results / "r", BUILT) == record_path(results / "r")
    return results


def test_without_a_record_the_command_config_is_used_and_then_recorded(tmp_path: Path) -> None:
    config, notes = resolve(BUILT, {"run": "r"}, tmp_path / "results")
    assert config == BUILT and notes == []
    results = built_run(tmp_path)
    text = record_path(results / "r").read_text()
    assert text.startswith("# The config results/r was built with.")
    assert yaml.safe_load(text) == BUILT
    assert update_record(results / "r", BUILT) is None            # unchanged: not written again


def test_a_later_command_naming_only_the_run_gets_the_recorded_settings(tmp_path: Path) -> None:
    results = built_run(tmp_path)
    file_config = {"run": "r", "scale": "demo", "tables": ["atr-table1", "atr-table2", "atr-table3"],
                   "train": {"lr": 0.002, "batch_size": 64}}          # config.yaml, without the override
    config, notes = resolve(file_config, {"run": "r"}, results)
    assert config["override"] == {"train": {"max_steps": 40}} and config["tables"] == ["atr-table2"]
    assert notes == []


def test_a_contradicting_override_names_each_difference_and_the_fix(tmp_path: Path) -> None:
    results = built_run(tmp_path)
    given = {"run": "r", "override": {"train": {"max_steps": 10}}, "train": {"lr": 0.002, "dropout": 0.3}}
    with pytest.raises(InputError) as e:
        resolve({**BUILT, **given}, given, results)
    msg = str(e.value)
    assert "override.train.max_steps: the run has 40, this command gives 10" in msg
    assert "train.dropout: the run has (not set), this command gives 0.3" in msg
    assert "train.lr" not in msg                                    # the same value is no contradiction
    assert "run=<new name>" in msg and "delete results/r" in msg


def test_tables_may_change_and_are_added_to_the_record(tmp_path: Path) -> None:
    results = built_run(tmp_path)
    given = {"run": "r", "tables": ["atr-table3"]}
    config, _ = resolve({**BUILT, **given}, given, results)
    assert config["tables"] == ["atr-table3"] and config["override"] == BUILT["override"]
    update_record(results / "r", config)
    assert yaml.safe_load(record_path(results / "r").read_text())["tables"] == ["atr-table2", "atr-table3"]


def test_a_changed_config_yaml_keeps_the_run_as_built_and_says_so(tmp_path: Path) -> None:
    results = built_run(tmp_path)
    edited = {**BUILT, "train": {"lr": 0.01, "batch_size": 64}}
    config, notes = resolve(edited, {"run": "r"}, results)
    assert config["train"]["lr"] == 0.002
    assert notes[0] == "config.yaml's train.lr is 0.01 but results/r was built with 0.002"
    assert "--config run=<new name>" in notes[-1]


def test_a_damaged_record_is_named_with_the_fix(tmp_path: Path) -> None:
    results = tmp_path / "results"
    record_path(results / "r").parent.mkdir(parents=True)
    record_path(results / "r").write_text("run: [r\n")
    with pytest.raises(InputError, match=r"(?s)config record is not readable YAML.*delete it"):
        resolve(BUILT, {"run": "r"}, results)
    record_path(results / "r").write_text("- a list\n")
    with pytest.raises(InputError, match="not a mapping"):
        resolve(BUILT, {"run": "r"}, results)


def test_a_run_name_outside_the_schema_reads_no_record(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("run: x\n")      # what results/../config.yaml would name
    config, notes = resolve({**BUILT, "run": ".."}, {"run": ".."}, tmp_path / "results")
    assert config["run"] == ".." and notes == []


def test_a_run_grows_to_more_seeds_a_row_without_a_new_run(tmp_path: Path) -> None:
    """A run of one seed a row takes 3 (or an ensemble's second member) later: the seed counts are recorded
    anew, every other setting stays the run's, and a command naming only the run then gets the new counts."""
    built = {**BUILT, "scale": "mini", "scales": {"mini": {"seeds": 1, "max_seeds": 1, "model": {"hidden": 256}}}}
    results = tmp_path / "results"
    update_record(results / "r", built)
    given = {"run": "r", "scales": {"mini": {"seeds": 3, "max_seeds": 3}}}
    config, notes = resolve({**built, **given}, given, results)
    assert config["scales"]["mini"] == {"seeds": 3, "max_seeds": 3, "model": {"hidden": 256}}
    assert notes == []
    assert update_record(results / "r", config) == record_path(results / "r")
    assert yaml.safe_load(record_path(results / "r").read_text())["scales"]["mini"]["seeds"] == 3
    again, notes = resolve(built, {"run": "r"}, results)           # config.yaml's 1: the record's 3 wins
    assert again["scales"]["mini"]["max_seeds"] == 3
    assert notes[0] == "config.yaml's scales.mini.seeds is 1 but results/r was built with 3"
    assert "seeds: N, max_seeds: N" in notes[-1]
    with pytest.raises(InputError, match="scales.mini.model.hidden: the run has 256, this command gives 512"):
        given = {"run": "r", "scales": {"mini": {"seeds": 2, "model": {"hidden": 512}}}}
        resolve({**built, **given}, given, results)
