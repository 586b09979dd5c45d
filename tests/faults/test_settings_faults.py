"""Bad settings, wherever they are written (config, override, a table's settings, a row's own or its
scales), stop the workflow before any job with the key, the place and the fix."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import run_snakemake
from faults.faultlib import ROOT, rnmt
from rnmt.config import ConfigError, load_schema, load_yaml
from rnmt.planning.plan import Plan

pytestmark = pytest.mark.faults
TABLE = "atr-table4"


def table_with(tmp_path: Path, change: Any) -> Path:
    """A copy of ATR Table 4's experiment file, changed by `change(exp)`, in a folder of its own; returns
    a config file naming it."""
    exp = yaml.safe_load((ROOT / f"workflow/experiments/{TABLE}.yaml").read_text())
    change(exp)
    d = tmp_path / "tables"
    d.mkdir(exist_ok=True)
    (d / f"{TABLE}.yaml").write_text(yaml.safe_dump(exp, sort_keys=False))
    cfg = tmp_path / "my.yaml"
    cfg.write_text(yaml.safe_dump({"experiments_dir": str(d), "tables": [TABLE], "run": "t"}))
    return cfg


def plan_error(cfg: Path) -> str:
    config = load_yaml(ROOT / "config.yaml")
    config.update(load_yaml(cfg))
    with pytest.raises(ConfigError) as e:
        Plan(config, ROOT).check_models()
    return str(e.value)


def defined_in_place(r: dict, **settings: Any) -> dict:
    """Row `r` defining its system itself (the shipped system's definition with `settings` over it), under
    a name of its own: a row's settings are checked as the systems files' are."""
    shipped = yaml.safe_load((ROOT / "workflow/systems/atr.yaml").read_text())["systems"][r["variant"]]
    return {**r, **shipped, **settings, "variant": f"{r['variant']}-mine"}


def row(i: int, **settings: Any) -> Any:
    def change(exp: dict) -> None:
        exp["rows"][i] = defined_in_place(exp["rows"][i], **settings)
    return change


def rename(i: int, variant: str, **own: Any) -> Any:
    def change(exp: dict) -> None:
        exp["rows"][i] = {**exp["rows"][i], "variant": variant, **own}
    return change


BAD_ROWS = {
    "decode: {beem: 3}": (row(0, decode={"beem": 3}), "unknown key 'rows.0(RNNSearch+GRU).decode.beem' (did you "
                                                      "mean 'beam'?)"),
    "train: {learning_rate: 0.01}": (row(1, train={"learning_rate": 0.01}), "train.learning_rate' (did you mean "
                                                                           "'lr'?)"),
    "train: {lr: '0.01'} (a string)": (row(1, train={"lr": "0.01"}), "train.lr' must be of type number, got str "
                                                                    "'0.01'"),
    "model: {hidden: 0}": (row(2, model={"hidden": 0}), "model.hidden': 0 is less than the minimum of 1"),
    "model: {emb: -8} at the demo scale": (row(2, scales={"demo": {"model": {"emb": -8}}}),
                                           "scales.demo.model.emb': -8 is less than the minimum of 1"),
    "model: {layers: 2} for rnnsearch": (row(0, model={"layers": 2}), "model.layers is not a setting of "
                                                                      "architecture 'rnnsearch'"),
    "model: {heads: 4} for dtmt that 4 heads cannot split": (
        lambda exp: exp["rows"].append({"system": "DTMT", "variant": "dtmt-odd", "arch": "dtmt",
                                        "cell": "gru", "model": {"emb": 30, "hidden": 30, "heads": 4}}),
        "variant 'dtmt-odd': architecture 'dtmt': 4 heads must divide"),
    "a misspelled system": (rename(0, "atr-rnnsearch-gruu"),
                            "variant 'atr-rnnsearch-gruu' is no system of the systems files (did you mean "
                            "'atr-rnnsearch-gru'?); name one of theirs, or give the row 'arch'"),
    "a shipped system redefined in a row": (rename(0, "atr-rnnsearch-gru", cell="lstm"),
                                            "variant 'atr-rnnsearch-gru' is a system of "
                                            f"{ROOT / 'workflow/systems/atr.yaml'}, which defines it; remove cell "
                                            "from the row"),
    "a repeated seed": (rename(0, "atr-rnnsearch-gru", seeds=[1, 1]), "has non-unique elements"),
    "a negative seed": (rename(0, "atr-rnnsearch-gru", seeds=[-1]), "-1 is less than the minimum of 0"),
    "an ensemble of one seed": (rename(0, "atr-rnnsearch-gru", seeds=[1], ensemble=True),
                                "'ensemble: true' decodes the models of several seeds as one; give the row two or "
                                "more seeds"),
    "a paper without a systems file": (lambda exp: exp.update(systems="atrr"),
                                       f"'systems: atrr' names no systems file; {ROOT / 'workflow/systems'} "
                                       "holds atr, demo, dtmt, srnmt, ud"),
}


@pytest.mark.parametrize("what", list(BAD_ROWS))
def test_a_bad_row_or_system_name_stops_the_plan(what: str, tmp_path: Path, record) -> None:
    record.bad_input(f"an experiment file with {what}")
    change, message = BAD_ROWS[what]
    assert message in plan_error(table_with(tmp_path, change))


def test_override_sizes_are_bounded(tmp_path: Path, record) -> None:
    record.bad_input("override: {model: {hidden: 0}} (a size of zero forced on every row)")
    cfg = tmp_path / "zero.yaml"
    cfg.write_text("override: {model: {hidden: 0}}\n")
    assert "'override.model.hidden': 0 is less than the minimum of 1" in plan_error(cfg)
    record.bad_input("scales.demo.model.hidden negative")
    cfg.write_text("scales: {demo: {model: {hidden: -64}}}\n")
    assert "'scales.demo.model.hidden': -64 is less than the minimum of 1" in plan_error(cfg)


def test_snakemake_and_check_config_stop_before_any_job(tmp_path: Path, record) -> None:
    record.bad_input("a row's misspelled decode setting, given to `snakemake -n` and `rnmt check-config`")
    cfg = table_with(tmp_path, row(0, decode={"beem": 3}))
    got = run_snakemake(["-n", "--configfile", str(cfg)], tmp_path)
    out = got.stdout + got.stderr
    assert got.returncode != 0
    assert "rnmt: error:" in out and "decode.beem' (did you mean 'beam'?)" in out
    assert "Traceback" not in out and 'File "' not in out
    assert "rule train" not in out and not (tmp_path / "results").exists()
    got = rnmt("check-config", str(ROOT / "config.yaml"), "--configfile", str(cfg), "--root", str(ROOT))
    assert got.returncode == 2 and "Traceback" not in got.stderr
    assert "rnmt check-config: error:" in got.stderr and "decode.beem' (did you mean 'beam'?)" in got.stderr


def test_every_unknown_table_is_named(tmp_path: Path, record) -> None:
    record.bad_input("two misspelled table names in config 'tables'")
    cfg = tmp_path / "t.yaml"
    cfg.write_text("tables: [atr-tabel2, atr-table4, srnmt-tabel1]\n")
    msg = plan_error(cfg)
    assert "'atr-tabel2' (did you mean 'atr-table2'?)" in msg and "'srnmt-tabel1' (did you mean 'srnmt-table1'?)" in msg


def test_a_failed_jobs_error_reaches_the_console_without_a_profile(tmp_path: Path, record) -> None:
    record.bad_input("a local: corpus whose two sides differ in length, run with plain `snakemake` (no profile)")
    data = tmp_path / "mine"
    data.mkdir()
    (data / "train.en").write_text("".join(f"a house number {i}\n" for i in range(60)))
    (data / "train.de").write_text("".join(f"ein haus nummer {i}\n" for i in range(59)))
    cfg = {"run": "t", "corpora": {"mine": {"source": f"local:{data}", "src_lang": "en", "tgt_lang": "de",
                                            "files": {"train": ["train.en", "train.de"]},
                                            "holdout": {"dev": 5, "test": 5}}}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    got = run_snakemake(["results/t/data/mine/tok/train.src", "--cores", "1", "--configfile", "c.yaml",
                         "--workflow-profile", "none"], tmp_path)
    assert got.returncode != 0
    console = got.stdout + got.stderr
    assert "error: parallel files differ in length" in console and "train.de has 59;" in console, console[-3000:]


def test_a_variant_defined_differently_in_two_tables_names_both_and_the_difference(tmp_path: Path, record) -> None:
    record.bad_input("one variant name with two different settings in two tables")
    d = tmp_path / "tables"
    d.mkdir()
    for name, hidden in (("mine-a", 32), ("mine-b", 48)):
        exp = yaml.safe_load((ROOT / f"workflow/experiments/{TABLE}.yaml").read_text())
        exp["table"], exp["rows"] = name, [defined_in_place(exp["rows"][0], model={"hidden": hidden})]
        exp.pop("baseline", None)
        exp.pop("claims", None)             # they compare the rows this table no longer has
        exp["metrics"] = ["bleu"]
        (d / f"{name}.yaml").write_text(yaml.safe_dump(exp, sort_keys=False))
    cfg = tmp_path / "two.yaml"
    cfg.write_text(yaml.safe_dump({"experiments_dir": str(d), "tables": ["mine-a", "mine-b"]}))
    msg = plan_error(cfg)
    assert f"{d / 'mine-a.yaml'} and in {d / 'mine-b.yaml'}" in msg and "model.hidden: 32 → 48" in msg


def test_the_readme_shows_the_config_error_the_tool_prints(tmp_path: Path, record) -> None:
    record.bad_input("the README's example of a misspelled key (train.learning_rate)")
    readme = (ROOT / "README.md").read_text()
    shown = readme.split("## Configuration", 1)[1].split("```\n", 2)[1].splitlines()
    assert shown[0] == "config is invalid:" and shown[1].endswith(", ...")
    cfg = tmp_path / "lr.yaml"
    cfg.write_text("train: {learning_rate: 0.01}\n")
    msg = plan_error(cfg).splitlines()
    assert msg[0] == shown[0] and msg[1].startswith(shown[1].removesuffix("..."))


def test_rnmt_train_itself_refuses_a_setting_of_the_wrong_type(corpus: dict[str, Path], tmp_path: Path,
                                                               record) -> None:
    record.bad_input("`rnmt train --settings '{\"lr\": \"0.01\"}'` (a string), run without the workflow")
    c = corpus
    files = [x for k in ("train_src", "train_tgt", "dev_src", "dev_tgt", "src_vocab", "tgt_vocab")
             for x in (f"--{k.replace('_', '-')}", str(c[k]))]
    got = rnmt("train", "--model", '{"arch": "rnnsearch", "emb": 8, "hidden": 8}', "--settings", '{"lr": "0.01"}',
               *files, "--out-dir", str(tmp_path))
    assert got.returncode == 2 and "Traceback" not in got.stderr
    assert "rnmt train: error: training setting lr must be float, not str '0.01'" in got.stderr


def _functions_taking(block: str) -> list:
    """The functions whose keyword defaults stand for a block's settings (they must be the class's)."""
    from rnmt.data.bpe import learn
    from rnmt.data.clean import Preparer
    from rnmt.data.vocab import Vocab
    from rnmt.decode.beam import beam_search
    from rnmt.decode.translate import translate_file, translate_ids

    return {"decode": [translate_ids, translate_file, beam_search], "preprocess": [Preparer], "bpe": [learn],
            "vocab": [Vocab.build]}.get(block, [])


@pytest.mark.parametrize("block, cls", [("train", "rnmt.train.settings.TrainSettings"),
                                         ("decode", "rnmt.decode.settings.DecodeSettings"),
                                         ("preprocess", "rnmt.data.settings.PreprocessSettings"),
                                         ("bpe", "rnmt.data.settings.BPESettings"),
                                         ("vocab", "rnmt.data.settings.VocabSettings"),
                                         ("parse", "rnmt.parse.settings.ParseSettings")])
def test_a_default_is_written_once_in_its_settings_class(block: str, cls: str) -> None:
    """The typed settings classes hold every training, decoding and data default. The schema's blocks are
    generated from them (the file holds no setting of its own), config.yaml holds only values that differ
    from a default (a copy there would be a second place to change it), and the functions and commands
    that take such a setting take their defaults from the class."""
    import inspect

    from rnmt.cli import parser
    from rnmt.settings import defaults

    module, _, name = cls.rpartition(".")
    settings_class = getattr(__import__(module, fromlist=[name]), name)
    written = load_yaml(ROOT / "workflow/schemas/config.schema.yaml")["$defs"][block]
    assert set(written) == {"x-generated-from"} and written["x-generated-from"] == cls
    schema = load_schema(ROOT / "workflow/schemas/config.schema.yaml")["$defs"][block]["properties"]
    own = defaults(settings_class)
    assert {k: v["default"] for k, v in schema.items()} == own
    config = load_yaml(ROOT / "config.yaml").get(block) or {}
    copies = {k: v for k, v in config.items() if own[k] == v}
    assert copies == {}, f"config.yaml {block}: repeats {name}'s defaults {copies}"
    renamed = {"penalty": "length_penalty", "steps_pos": "train_steps_pos", "steps_depparse": "train_steps_depparse"}
    for fn in _functions_taking(block):
        for p in inspect.signature(fn).parameters.values():
            key = renamed.get(p.name, p.name)
            if key in own and p.default is not inspect.Parameter.empty:
                assert p.default == own[key], (fn.__name__, p.name)
    commands = {"bpe": ["bpe", "learn", "--merges", "1", "--codes", "c", "in"], "vocab": ["vocab", "in", "out"],
                "parse": ["parse", "train-models", "--lang", "en", "--train", "t", "--dev", "d", "--model-dir", "m"]}
    if block in commands:            # the command a rule runs with the block's settings, given none of them
        given = vars(parser().parse_args(commands[block]))
        typed = {a.lstrip("-").replace("-", "_") for a in commands[block] if a.startswith("--")}   # given here
        flags = {renamed.get(k, k): v for k, v in given.items() if renamed.get(k, k) in own and k not in typed}
        assert flags and flags == {k: own[k] for k in flags}, (block, flags)


def test_the_schemas_model_settings_are_the_architectures_own() -> None:
    """A model setting and its default live in the architecture's constructor (each paper's sizes); the
    schema's model block names exactly the settings some architecture takes, with the constructor's type,
    so a setting the schema accepts is one a model is built with, and a new one is refused nowhere."""
    import inspect
    import typing

    import rnmt.models  # noqa: F401  (fills the registry)
    from rnmt.models.registry import MODELS, accepted_settings

    json_types = {int: "integer", float: "number", bool: "boolean", str: "string", dict: "object"}
    taken: dict[str, set[str]] = {}
    for arch, cls in MODELS.items():
        names = accepted_settings(arch)
        assert names is not None, arch
        for klass in cls.__mro__:
            init = vars(klass).get("__init__")
            if init is None or klass is object:
                continue
            hints = typing.get_type_hints(init)
            for name in inspect.signature(init).parameters:
                if name not in names:
                    continue
                hint = hints[name]
                args = [a for a in typing.get_args(hint) if a is not type(None)]
                base = typing.get_origin(args[0]) or args[0] if isinstance(hint, types.UnionType) else hint
                kind = [json_types[base], "null"] if isinstance(hint, types.UnionType) else json_types[base]
                taken.setdefault(name, set()).add(str(kind))
    schema = load_schema(ROOT / "workflow/schemas/config.schema.yaml")["$defs"]["model"]["properties"]
    assert set(schema) == set(taken)
    for name, kinds in taken.items():
        assert kinds == {str(schema[name]["type"])}, (name, kinds, schema[name]["type"])


def test_settings_the_trainer_would_refuse_stop_the_workflow_at_its_start() -> None:
    """A combination no training job accepts is found when the plan is built, naming the table and row,
    not hours later in the job."""
    config = load_yaml(ROOT / "config.yaml")
    config["override"] = {"train": {"select_by": "bleu", "valid_bleu": False}}
    with pytest.raises(ConfigError, match=r"table atr-table2, row '.+' \(variant atr-.+\): select_by: bleu needs "
                                          r"the dev BLEU of every validation"):
        Plan(config, ROOT)



def test_a_system_defined_in_two_systems_files_names_both(tmp_path: Path, record) -> None:
    record.bad_input("one system name defined in two systems files")
    d = tmp_path / "systems"
    d.mkdir()
    for path in (ROOT / "workflow/systems").glob("*.yaml"):
        (d / path.name).write_text(path.read_text())
    (d / "mine.yaml").write_text("systems:\n  atr-rnnsearch-gru: {arch: rnnsearch, cell: lstm}\n")
    cfg = tmp_path / "my.yaml"
    cfg.write_text(yaml.safe_dump({"systems_dir": str(d)}))
    assert f"system 'atr-rnnsearch-gru' is defined in {d / 'atr.yaml'} and in {d / 'mine.yaml'}" in plan_error(cfg)


NAMES = {
    "run: '..'": ({"run": ".."}, "'run' is '..'; expected a run name"),
    "run: '.'": ({"run": "."}, "'run' is '.'; expected a run name"),
    "run: 'tiny\\n' (a final newline)": ({"run": "tiny\n"}, "'run' is 'tiny\\n'; expected a run name"),
    "run: '-dash' (read as an option)": ({"run": "-dash"}, "'run' is '-dash'; expected a run name"),
    "run: 'a/b'": ({"run": "a/b"}, "'run' is 'a/b'; expected a run name"),
    "a corpus named '-mc'": ({"corpora": {"-mc": {"source": "synthetic:demo", "src_lang": "en", "tgt_lang": "en"}}},
                             "the name '-mc' in 'corpora' is not allowed; expected a corpus name"),
    "a corpus named 'a;b'": ({"corpora": {"a;b": {"source": "synthetic:demo", "src_lang": "en", "tgt_lang": "en"}}},
                             "the name 'a;b' in 'corpora' is not allowed"),
    "a table named '../exp/one'": ({"tables": ["../exp/one"]}, "'tables.0' is '../exp/one'; expected the name of a "
                                                               "file in workflow/experiments/"),
}


@pytest.mark.parametrize("what", list(NAMES))
def test_names_that_would_leave_their_folder_or_read_as_options_are_refused(what: str, tmp_path: Path,
                                                                             record) -> None:
    record.safety(f"{what} in the config")
    change, message = NAMES[what]
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(yaml.safe_dump(change))
    assert message in plan_error(cfg)


@pytest.mark.parametrize("variant", ["-gru", "gru\n"], ids=["leading dash", "final newline"])
def test_a_variant_name_is_matched_whole(variant: str, tmp_path: Path, record) -> None:
    record.safety(f"a row's variant {variant!r}")
    message = plan_error(table_with(tmp_path, rename(0, variant)))
    assert f"'rows.0(RNNSearch+GRU).variant' is {variant!r}; expected a name" in message
