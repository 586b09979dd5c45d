"""`rnmt explain RUN VARIANT`: where each setting of a row comes from, file and key, from the same layers
the plan builds the row's jobs from."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rnmt.planning.experiments import takes
from rnmt.planning.layers import explain
from rnmt.planning.plan import Plan

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def checkout(tmp_path: Path) -> Path:
    """The repository's config and workflow files, without any built run."""
    (tmp_path / "workflow").symlink_to(ROOT / "workflow")
    shutil.copy(ROOT / "config.yaml", tmp_path / "config.yaml")
    return tmp_path


def rnmt(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rnmt", *args], cwd=cwd, capture_output=True, text=True)


def test_explain_names_where_lr_batch_size_and_max_steps_come_from(checkout: Path) -> None:
    """At mini, ATR's rows take the scale's rate; at paper scale the ATR systems file's."""
    got = rnmt("explain", "mini", "atr-rnnsearch-atr", "lr", "batch_size", "max_steps", "--corpus", "multi30k-en-de",
               cwd=checkout)
    assert got.returncode == 0, got.stderr
    out = got.stdout
    assert "run mini at scale mini (config: config.yaml at scale mini (the run is not built yet))" in out
    assert "lr         = 0.002       from config.yaml scales.mini.train" in out
    assert "over default: 0.0005" in out
    assert "batch_size = 64          from config.yaml scales.mini.train" in out
    assert "max_steps  = 6000        from config.yaml scales.mini.train" in out
    paper = rnmt("explain", "paper", "atr-rnnsearch-atr", "lr", "--corpus", "atr-wmt14-en-de", cwd=checkout).stdout
    assert "lr = 0.0005      from workflow/systems/atr.yaml settings.paper.train" in paper
    assert "over config.yaml train: 0.002" in paper


def test_a_rows_cell_is_named_with_the_system_that_sets_it(checkout: Path) -> None:
    """A system names its cell beside its architecture: the explanation gives that cell and its file, not
    the architecture's default cell (RNNSearch's GRU for the ATR + CA row)."""
    got = rnmt("explain", "mini", "atr-rnnsearch-atr-ca", "cell", "--corpus", "multi30k-en-de", cwd=checkout)
    assert got.returncode == 0, got.stderr
    assert "cell = 'atr'       from workflow/systems/atr.yaml systems.atr-rnnsearch-atr-ca.cell" in got.stdout
    assert "over default: 'gru'" in got.stdout
    every = rnmt("explain", "mini", "srnmt-sru-3l", "--corpus", "multi30k-en-de", "--all", cwd=checkout).stdout
    cells = [line for line in every.splitlines() if line.strip().startswith("cell ")]
    assert len(cells) == 1 and "'sru'" in cells[0], every


def test_a_built_run_is_explained_from_its_record_and_its_override_wins(checkout: Path) -> None:
    config = yaml.safe_load((checkout / "config.yaml").read_text())
    record = {**config, "run": "r1", "override": {"train": {"lr": 0.01}, "model": {"emb": 64}}}
    (checkout / "results/r1").mkdir(parents=True)
    (checkout / "results/r1/config.yaml").write_text(yaml.safe_dump(record))
    got = rnmt("explain", "r1", "atr-transformer", "lr", "emb", cwd=checkout)
    assert got.returncode == 0, got.stderr
    assert "(config: its record results/r1/config.yaml)" in got.stdout
    assert "lr = 0.01" in got.stdout
    assert "from results/r1/config.yaml override.train (forced on every row)" in got.stdout
    # the Transformer takes no `emb`: each layer that gave one is named, and said to be left out
    assert ("emb = 64 from results/r1/config.yaml override.model (forced on every row): left out, the "
            "architecture does not take it") in got.stdout


def test_an_unknown_variant_is_named_with_the_closest(checkout: Path) -> None:
    got = rnmt("explain", "demo", "atr-rnnsearch-atx", cwd=checkout)
    assert got.returncode == 2
    assert "no table of run demo trains variant 'atr-rnnsearch-atx' (did you mean 'atr-rnnsearch-atr'?)" in got.stderr


@pytest.mark.parametrize("scale", ["demo", "mini", "paper"])
def test_every_explained_value_is_the_value_its_jobs_run_with(scale: str) -> None:
    """For every variant of every table: each setting's explained source holds the value the plan gives
    the variant's jobs, so the explanation cannot drift from what runs."""
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    plan = Plan({**config, "scale": scale, "run": "x", "override": {"train": {"clip": 1.0}}}, ROOT)
    for key, v in plan.variants.items():
        resolved = {"model": {k: x for k, x in v.model.items() if k not in ("arch", "cell")}, "train": v.train,
                    "decode": v.decode}
        records = explain(plan.layers[key], takes(v.model["arch"]), resolved,
                          {s: ("default", {}) for s in ("model", "train", "decode")})
        for r in records:
            if r["dropped"] or r["from"].startswith("default"):      # left at the settings class's default
                continue
            layer = next(x for x in reversed(plan.layers[key]) if x.where.format(s=r["section"]) == r["from"])
            assert layer.values[r["section"]][r["key"]] == resolved[r["section"]][r["key"]], (key, r)
        clip = next(r for r in records if r["key"] == "clip")
        assert clip["from"] == "config.yaml override.train (forced on every row)"


def test_at_mini_every_dtmt_system_warms_up_as_the_paper_at_minis_batch() -> None:
    """DTMT's deep transitions could sit at the word-frequency loss for a whole `mini` run at a constant
    2e-3 from step 0; every system of the DTMT tables (ShallowRNMT too, so a table compares like with like)
    takes the paper's eq. 17 warm-up, 1e-3 rising to 2e-3 over n·p = 1,000 steps, an update one batch of 64,
    and Adam's eps 1e-8 (under the paper's 1e-6 the deep transitions' small gradients stayed still), while the
    other papers' rows keep their constant rates."""
    from rnmt.train.schedules import get

    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    plan = Plan({**config, "scale": "mini", "run": "x"}, ROOT)
    dtmt = {v for (_, v) in plan.variants if v.startswith("dtmt-")}
    assert {"dtmt-1", "dtmt-4", "dtmt-shallow-gru"} <= dtmt
    for (corpus, variant), v in plan.variants.items():
        t = v.train
        if variant not in dtmt:
            assert t.get("schedule", "constant") == "constant", (corpus, variant)
            continue
        assert (t["schedule"], t["lr"], t["eps"], t["batch_size"], t["accumulate"]) == (
            "rnmt_plus", 0.001, 1e-8, 64, 1), (corpus, variant)
        rate = get(t["schedule"], **{k: t[k] for k in ("replicas", "warmup_steps") if k in t})
        assert [round(t["lr"] * rate(step, 0), 6) for step in (0, 500, 1000, 3000)] == [0.001, 0.0015, 0.002, 0.002]
