"""Paper tables as Snakemake targets: every table plans at every scale, a real tiny run of ATR Tables
1 and 4 and Figure 3 gives CSVs that match their experiment files, and editing one row reruns only
that row's jobs."""

import base64
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import ROOT, jobs, run_snakemake

EXPERIMENTS = ROOT / "workflow/experiments"
SYSTEMS = ROOT / "workflow/systems"
ALL_TABLES = yaml.safe_load((ROOT / "config.yaml").read_text())["tables"]
NIST = [t for t in ALL_TABLES if "nist" in yaml.safe_load((EXPERIMENTS / f"{t}.yaml").read_text()).get("corpus", "")]
TINY_TABLES = ["atr-table1", "atr-table4", "atr-figure3"]


def test_every_shipped_table_is_in_the_default_config() -> None:
    shipped = {p.stem for p in EXPERIMENTS.glob("*.yaml")} - {"demo-rnnsearch"}
    assert shipped == set(ALL_TABLES)
    assert {"atr-table5", "dtmt-table1", "dtmt-table3"} <= set(NIST)


@pytest.mark.workflow
@pytest.mark.parametrize("scale", ["demo", "mini", "small", "paper"])
def test_dry_run_plans_every_table(scale: str, tmp_path: Path) -> None:
    tables = ALL_TABLES if scale in ("demo", "mini") else [t for t in ALL_TABLES if t not in NIST]
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"run": scale, "scale": scale, "tables": tables}))
    r = run_snakemake(["-n", "--configfile", "c.yaml"], tmp_path, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    counts = jobs(r.stdout)
    assert counts["table"] == len(tables)
    assert counts["figure"] == sum(1 for t in tables if "figure" in t)
    assert counts["train"] >= 40 and counts["translate"] >= counts["train"] - 10
    if scale == "demo":
        assert counts["synthetic_corpus"] == 1 and "download" not in counts
    elif scale == "mini":     # Multi30k En-De and En-Fr ({train, val, 3 test sets} x {en, de, fr}); ud-labels'
        assert counts["download"] == 15 and counts["merge_chunks"] == 3       # synthetic pair (gold labels)
    else:
        assert counts["download"] >= 1 and counts["merge_chunks"] >= 4       # the papers' corpora, fetched
        if scale == "small":
            assert "--max-pairs 300000" in run_snakemake(
                ["-n", "-p", "--configfile", "c.yaml", "--forcerun", "merge_chunks"], tmp_path).stdout


@pytest.mark.workflow
def test_nist_tables_at_paper_scale_name_the_missing_ldc_files(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"run": "p", "scale": "paper", "tables": ["dtmt-table1"]}))
    r = run_snakemake(["-n", "--configfile", "c.yaml"], tmp_path)
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert "Linguistic Data Consortium" in out and "data/ldc/nist-zh-en/mt02.src.sgm" in out
    assert "manual_dir" in out


def test_the_gate_correlation_is_the_recurrent_units_whatever_the_file_order() -> None:
    """ATR Figure 3 reports eq. 13's unit that recurs over target positions (dec_lower), not whichever unit
    the statistics file happens to list first."""
    from rnmt.io import InputError
    from rnmt.report.tables import metric_value

    two = {"dec_higher": {"pearson_r": -0.79}, "dec_lower": {"pearson_r": -0.91}}
    assert metric_value({"gates": two}, "gate_pearson_r") == -0.91
    assert metric_value({"gates": {"enc": {"pearson_r": 0.2}}}, "gate_pearson_r") == 0.2
    with pytest.raises(InputError, match="none is 'dec_lower'"):
        metric_value({"gates": {"a": {"pearson_r": 0.1}, "b": {"pearson_r": 0.2}}}, "gate_pearson_r")


def test_a_cells_table_without_its_counts_names_the_command_that_makes_them() -> None:
    from rnmt.io import InputError
    from rnmt.planning.table import load_table
    from rnmt.report.tables import tidy

    table = load_table(EXPERIMENTS / "atr-table1.yaml")
    with pytest.raises(InputError, match="row 'LSTM' needs the counts of cell 'lstm': rnmt cell-counts --cell lstm"):
        tidy(table, {}, "r", "demo", {})


TINY = {
    "run": "tiny",
    "tables": TINY_TABLES,
    "corpora": {"synthetic-demo": {"sizes": {"train": 300, "dev": 20, "test": 30}}},
    "bpe": {"merges": 100},
    "scales": {"demo": {"corpus": "synthetic-demo", "max_seeds": 1}},
    "override": {
        "model": {"emb": 16, "hidden": 16, "d_model": 16, "ffn": 32},
        "train": {"max_steps": 12, "max_epochs": 100, "valid_every": 12, "max_minutes": 0, "batch_size": 32,
                  "valid_bleu": False},
        "decode": {"beam": 2},
    },
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("tables")
    shutil.copytree(EXPERIMENTS, d / "experiments")
    shutil.copytree(SYSTEMS, d / "systems")
    (d / "tiny.yaml").write_text(yaml.safe_dump({**TINY, "experiments_dir": str(d / "experiments"),
                                                 "systems_dir": str(d / "systems")}))
    r = run_snakemake(["--cores", "2", "--configfile", "tiny.yaml"], d, timeout=1200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return d


@pytest.mark.workflow
def test_csv_has_every_row_and_metric_of_its_experiment(built: Path) -> None:
    for name in TINY_TABLES:
        exp = yaml.safe_load((EXPERIMENTS / f"{name}.yaml").read_text())
        df = pd.read_csv(built / f"results/tiny/tables/{name}.csv")
        assert list(df.metric) == exp["metrics"] * len(exp["rows"])
        assert list(dict.fromkeys(df.system)) == [r["system"] for r in exp["rows"]]
        for row in exp["rows"]:
            sub = df[df.system == row["system"]].set_index("metric")
            for metric, value in (row.get("paper") or {}).items():
                if metric in exp["metrics"] and value is not None:
                    assert sub.paper[metric] == pytest.approx(value)
            filled = sub.ours.notna() | (sub.why_empty.astype("string").fillna("") != "")
            assert filled.all(), f"{name}/{row['system']}: an empty cell must say why"
        assert set(df.scale) == {"demo"} and set(df.run) == {"tiny"}


@pytest.mark.workflow
def test_speed_ratios_and_counts_come_from_the_runs(built: Path) -> None:
    t4 = pd.read_csv(built / "results/tiny/tables/atr-table4.csv").set_index(["system", "metric"])
    exp = yaml.safe_load((EXPERIMENTS / "atr-table4.yaml").read_text())
    base = exp["baseline"]
    paper = {r["system"]: r["paper"] for r in exp["rows"]}
    for system in paper:
        ours = t4.ours[(system, "train_tgt_words_per_s")] / t4.ours[(base, "train_tgt_words_per_s")]
        assert t4.ours[(system, "train_tgt_words_per_s_ratio")] == pytest.approx(ours)
        theirs = paper[system]["train_tgt_words_per_s"] / paper[base]["train_tgt_words_per_s"]
        assert t4.paper[(system, "train_tgt_words_per_s_ratio")] == pytest.approx(theirs)
    assert t4.ours[(base, "train_tgt_words_per_s_ratio")] == pytest.approx(1.0)
    # parameter counts are the trained models' own, and ATR has fewer than GRU at the same size
    assert t4.ours[("RNNSearch+ATR", "params_m")] < t4.ours[("RNNSearch+GRU", "params_m")]

    t1 = pd.read_csv(built / "results/tiny/tables/atr-table1.csv").set_index(["system", "metric"])
    assert t1.ours[("ATR", "weight_matrices")] == 2 and t1.ours[("LSTM", "matrix_transformations")] == 8
    assert (t1["diff"] == 0).all()                                   # ATR Table 1 reproduces exactly


@pytest.mark.workflow
def test_markdown_latex_figure_and_runs_csv(built: Path) -> None:
    out = built / "results/tiny"
    md = (out / "tables/atr-table4.md").read_text()
    assert md.startswith("# ATR Table 4")
    header = md.splitlines()[4]
    assert header.startswith("| System | #Params (M) (paper) | #Params (M) (ours) |")
    assert "| RNNSearch+ATR |" in md and "Run `tiny` at scale `demo`" in md
    # what the rows ran with, from their metrics: the override's 12 steps, not the demo's 600
    assert "Ran on corpus `synthetic-demo`, scale `demo`: 7 models trained 12 steps (max_steps 12" in md
    assert "Forced on every row by the run's override" in md and "train.max_steps 12;" in md
    tex = (out / "tables/atr-table4.tex").read_text()
    assert r"\begin{tabular}" in tex and r"\toprule" in tex and "RNNSearch+ATR" in tex
    assert tex.count(r"\\") >= 1 + len(yaml.safe_load((EXPERIMENTS / "atr-table4.yaml").read_text())["rows"])
    png = (out / "figures/atr-figure3.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    for pdf in ("figures/atr-figure3.pdf", "plots/atr-table4.curves.pdf"):           # each figure also as PDF
        assert (out / pdf).read_bytes()[:5] == b"%PDF-", pdf
    fig3 = pd.read_csv(out / "tables/atr-figure3.csv")
    r = fig3[fig3.metric == "gate_pearson_r"].ours.iloc[0]
    gates = json.loads(next((out / "analysis").glob("*/atr-rnnsearch-atr/seed1/gates.test.json")).read_text())
    assert r == pytest.approx(gates["dec_lower"]["pearson_r"], abs=1e-4)    # eq. 13's recurrent unit, by name
    assert gates["dec_higher"]["pearson_r"] != pytest.approx(r, abs=1e-4)
    r = run_snakemake(["--report", "report.html", "--configfile", "tiny.yaml"], built)
    assert r.returncode == 0, r.stderr[-2000:]
    html = (built / "report.html").read_text(errors="replace")
    assert "atr-table4" in html and "atr-figure3" in html
    # the rendered tables are in it (as data URIs), and the figures' captions
    page = base64.b64encode((out / "tables/atr-table4.html").read_bytes()).decode()
    assert page in html
    assert "correlation of the input and forget gates" in html
    runs = pd.read_csv(out / "runs.csv")
    assert len(runs) == len({(v, m) for v, m in zip(runs.variant, runs.member, strict=True)}) >= 7
    assert {"scores.bleu", "train.params", "train.train_settings.lr", "decode.beam"} <= set(runs.columns)


@pytest.mark.workflow
def test_editing_one_system_reruns_only_its_row(built: Path) -> None:
    path = built / "systems/atr.yaml"
    original, stat = path.read_text(), path.stat()
    doc = yaml.safe_load(original)
    ran = doc["systems"]["atr-rnnsearch-ran"]
    ran["train"] = {**(ran.get("train") or {}), "lr": 0.003}
    path.write_text(yaml.safe_dump(doc))
    try:
        r = run_snakemake(["-n", "--configfile", "tiny.yaml"], built)
        assert r.returncode == 0, r.stderr[-2000:]
        counts = jobs(r.stdout)
        assert counts["train"] == 1 and counts["translate"] == 1 and counts["table"] == 1
        assert "atr-rnnsearch-ran" in r.stdout and "atr-rnnsearch-gru/seed1/model.pt" not in r.stdout
    finally:
        path.write_text(original)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    again = run_snakemake(["-n", "--configfile", "tiny.yaml"], built)
    assert "Nothing to be done" in again.stdout + again.stderr


@pytest.mark.workflow
def test_a_run_cut_short_by_the_time_cap_is_named_under_its_table(built: Path, tmp_path: Path) -> None:
    """Steps are the budget; a `max_minutes` safety cap that ends a run first makes its numbers depend
    on the machine, and the table must say so (the tiny runs end by their step budget: no such note)."""
    import subprocess
    import sys

    assert "time cap" not in (built / "results/tiny/tables/atr-table4.md").read_text()
    files = sorted((built / "results/tiny/metrics/synthetic-demo").glob("*/seed*/test.json"))
    cut = next(f for f in files if f.parts[-3] == "atr-rnnsearch-lstm")
    m = json.loads(cut.read_text())
    assert m["train"]["stop_reason"] == "max_steps"
    m["train"]["stop_reason"] = "max_minutes"
    m["train"]["train_settings"]["max_minutes"] = 0.5
    changed = cut.with_name("test-cut-short.json")        # beside it: the files it scored are found from there
    changed.write_text(json.dumps(m))
    inputs = [str(changed) if f == cut else str(f) for f in files]
    try:
        r = subprocess.run([sys.executable, "-m", "rnmt", "table", "--experiment",
                            str(EXPERIMENTS / "atr-table4.yaml"), "--run", "tiny", "--scale", "demo", "--max-seeds",
                            "1", "--csv", str(tmp_path / "t.csv"), "--md", str(tmp_path / "t.md"), "--", *inputs],
                           capture_output=True, text=True)
    finally:
        changed.unlink()
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "t.md").read_text()
    assert "Stopped by the time cap (`max_minutes`)" in md
    assert f"RNNSearch+LSTM (atr-rnnsearch-lstm, seed 1: step {m['train']['steps']}, 0.5 min)" in md
    assert "RNNSearch+GRU (" not in md


@pytest.mark.parametrize("scale", ["demo", "mini", "small", "paper"])
def test_every_row_builds_its_model_at_every_scale(scale: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Each trained row's settings at each scale make a model (on the meta device: shapes, no memory)."""
    from rnmt.planning.plan import Plan

    monkeypatch.setenv("RNMT_MODEL_CATALOG", str(tmp_path))     # built here, whatever an earlier test built

    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    plan = Plan({**config, "scale": scale}, ROOT)
    plan.check_models()
    assert len(plan.variants) >= 50
    transformer = next(v for (_, name), v in plan.variants.items() if name == "atr-transformer")
    assert "emb" not in transformer.model                            # settings it does not take are left out
    if scale == "paper":
        assert transformer.model["d_model"] == 512 and transformer.model["layers"] == 4
        gru = plan.variants[("atr-wmt14-en-de", "atr-rnnsearch-gru")]
        assert (gru.model["emb"], gru.model["hidden"], gru.train["lr"]) == (620, 1000, 0.0005)


PLAN_RUN = """
import sys, yaml
from pathlib import Path
from rnmt.planning.plan import Plan
config = yaml.safe_load(Path("config.yaml").read_text())
config.update(scale="demo", **yaml.safe_load(sys.argv[1]))
Plan(config, Path(".")).check_models()
print("torch imported" if "torch" in sys.modules else "torch not imported")
"""


def test_planning_imports_torch_only_when_the_code_or_the_models_settings_are_new(tmp_path: Path) -> None:
    """Every `snakemake` command plans the run: rows checked against each architecture's settings, every
    model built on the meta device. What the architectures take, and settings that built, are kept per rnmt
    source and torch version (rnmt.models.catalog), so planning the same run again imports no torch."""
    env = {**os.environ, "RNMT_MODEL_CATALOG": str(tmp_path / "catalog"), "PYTHONPATH": str(ROOT / "src")}

    def plan(override: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", PLAN_RUN, override], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=300)

    assert plan("{}").stdout.strip() == "torch imported"
    assert plan("{}").stdout.strip() == "torch not imported"
    assert plan("{model: {hidden: 48}}").stdout.strip() == "torch imported"        # new settings: built
    assert plan("{model: {hidden: 48}}").stdout.strip() == "torch not imported"
    # settings that do not build stop planning every time: never noted as built
    for _ in range(2):
        bad = plan("{model: {heads: 7}}")          # the schema takes it; no 64-wide attention splits in 7
        assert bad.returncode != 0 and "variant" in bad.stderr, bad.stderr[-2000:]
    (folder,) = (tmp_path / "catalog").iterdir()          # one rnmt source, one torch
    assert len(list((folder / "built").iterdir())) == 2
    kept = json.loads((folder / "architectures.json").read_text())
    assert "emb" not in kept["transformer"] and {"emb", "hidden", "cell"} <= set(kept["rnnsearch"])


@pytest.mark.parametrize("scale", ["demo", "mini", "small", "paper"])
def test_every_scale_budgets_training_in_updates_never_in_minutes(scale: str) -> None:
    """What a table says must not depend on how busy the machine was: at every scale every model's run
    ends at a number of steps or epochs, with no wall-clock cap (a user's `max_minutes` is a safety cap,
    and the table reports the runs it cut short)."""
    from rnmt.planning.plan import Plan

    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    plan = Plan({**config, "scale": scale}, ROOT)
    for (corpus, name), v in plan.variants.items():
        assert v.train["max_minutes"] == 0, (scale, corpus, name)
        assert v.train["max_steps"] > 0 or v.train["max_epochs"] <= 100, (scale, corpus, name)


def test_the_mini_scale_runs_each_table_on_the_multi30k_pair_of_its_papers_languages() -> None:
    """mini: En-De for the papers' En-De and Zh-En, En-Fr for En-Fr, En-Ro and the UD paper (English to
    French, as that paper translated); each table decodes with its paper's search; the notes say so."""
    from rnmt.planning.plan import Plan

    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    plan = Plan({**config, "scale": "mini"}, ROOT)
    want = {"atr-table2": "multi30k-en-de", "atr-table3": "multi30k-en-fr", "atr-table5": "multi30k-en-de",
            "srnmt-table3": "multi30k-en-fr", "dtmt-table1": "multi30k-en-de", "dtmt-table2-en-fr": "multi30k-en-fr",
            "ud-figure2": "multi30k-en-fr", "ud-labels": "synthetic-demo"}
    assert {t: plan.tables[t].corpus for t in want} == want
    decode = {name: v.decode for (_, name), v in plan.variants.items()}
    assert (decode["atr-rnnsearch-atr"]["beam"], decode["atr-rnnsearch-atr"]["length_penalty"]) == (10, "average")
    assert (decode["dtmt-4"]["beam"], decode["dtmt-4"]["length_penalty"]) == (4, "gnmt")
    assert decode["srnmt-4l"]["length_penalty"] == "none"
    note = config["scales"]["mini"]["note"]
    assert "Multi30k" in note
    from rnmt.planning.table import load_table

    table = load_table(EXPERIMENTS / "atr-table4.yaml", "multi30k-en-de", scale_note=note)
    assert table.notes.startswith(note.strip()) and "TITAN X" in table.notes     # then the table's own notes


def test_the_fidelity_register_covers_every_papers_experiment() -> None:
    """docs/fidelity.md is where a user learns how a table differs from its paper: a paper's experiment
    file that it does not name (a table added later) is a table whose deviations nobody wrote down."""
    register = (ROOT / "docs/fidelity.md").read_text()
    for paper in ("## ATR", "## SR-NMT", "## DTMT", "## UD"):
        assert paper in register
    missing = [p.name for p in sorted((ROOT / "workflow/experiments").glob("*.yaml"))
               if not p.name.startswith("demo-") and f"`{p.name}`" not in register]
    assert not missing, f"docs/fidelity.md names no {missing}"


@pytest.mark.workflow
def test_an_exported_bundle_translates_raw_text_as_the_pipeline_does(built: Path, tmp_path: Path) -> None:
    """`results/<run>/bundles/...` holds a model with its BPE codes and preprocessing settings: raw text in
    (a file or standard input), the pipeline's detokenized translation out, line for line."""
    import subprocess
    import sys

    target = "results/tiny/bundles/synthetic-demo/atr-rnnsearch-atr/seed1/bundle.json"
    r = run_snakemake(["--cores", "1", target, "--configfile", "tiny.yaml"], built)
    assert r.returncode == 0, r.stderr[-3000:]
    bundle = (built / target).parent
    raw = built / "results/tiny/data/synthetic-demo/raw/test.src"
    pipeline = (built / "results/tiny/translations/synthetic-demo/atr-rnnsearch-atr/seed1/test.txt").read_text()
    rnmt = [sys.executable, "-m", "rnmt", "-q", "translate", "--bundle", str(bundle), "--threads", "1"]
    from_file = subprocess.run([*rnmt, str(raw), str(tmp_path / "out.txt")], capture_output=True, text=True)
    assert from_file.returncode == 0, from_file.stderr
    assert (tmp_path / "out.txt").read_text() == pipeline
    piped = subprocess.run(rnmt, input=raw.read_text(), capture_output=True, text=True)
    assert piped.returncode == 0 and piped.stdout == pipeline
    one = subprocess.run(rnmt, input="A sentence never seen.\n", capture_output=True, text=True)
    assert one.returncode == 0 and len(one.stdout.splitlines()) == 1
    both = subprocess.run([*rnmt, "--model", str(bundle / "model1.pt")], input="x\n", capture_output=True, text=True)
    assert both.returncode == 2 and "give either --bundle DIR" in both.stderr
    (bundle / "codes.src").unlink()
    broken = subprocess.run(rnmt, input="x\n", capture_output=True, text=True)
    assert broken.returncode == 2 and "codes.src listed in bundle.json but missing" in broken.stderr


@pytest.mark.workflow
def test_the_readmes_report_command_builds_a_report_of_a_finished_run(built: Path) -> None:
    r = run_snakemake(["--report", "report.html", "--configfile", "tiny.yaml"], built)
    assert r.returncode == 0, r.stderr[-3000:]
    html = (built / "report.html").read_text(errors="replace")
    assert "atr-table4" in html


def test_latex_escapes_what_latex_would_misprint() -> None:
    """A sacrebleu signature's `|`, a metric's `_` and a `%` must print as themselves in the paper's LaTeX."""
    from rnmt.report.tables import _tex

    assert _tex("nrefs:4|case:lc 12% tok_bleu") == r"nrefs:4\textbar{}case:lc 12\% tok\_bleu"
    # a title's commands print as text, never run: \input would read a file, \write18 run a shell command
    assert _tex(r"\input{/etc/passwd} \write18{rm x}") == \
        r"\textbackslash{}input\{/etc/passwd\} \textbackslash{}write18\{rm x\}"
    assert _tex("a<b> ~^ ± –") == r"a\textless{}b\textgreater{} \textasciitilde{}\textasciicircum{} $\pm$ --"


def test_tables_and_figures_say_what_their_rows_ran_with_not_what_was_configured() -> None:
    """The budget, the steps trained, the corpus, the scale and the run's override come from the metrics
    files: a run forced to 200 steps says 200, whatever its scale's note says."""
    from rnmt.report import ran

    def metrics(variant: str, seed: int, steps: int, stop: str = "max_steps") -> dict:
        train = {"steps": steps, "stop_reason": stop,
                 "train_settings": {"seed": seed, "max_steps": 200, "max_epochs": 100, "batch_size": 64,
                                    "lr": 0.002, "schedule": "constant"}}
        return {"corpus": "multi30k-en-de", "scale": "mini", "run": "quick", "variant": variant,
                "train": train, "override": {"train": {"max_steps": 200}}}

    ms = [metrics("gru", 1, 200), metrics("gru", 2, 200), metrics("atr", 1, 150, "patience")]
    ensemble = {**ms[0], "member": "ens1-2", "train": {"members": [ms[0]["train"], ms[1]["train"]]}}
    assert ran.summary([*ms, ensemble]) == (
        "Ran on corpus `multi30k-en-de`, scale `mini`: 3 models trained 150–200 steps (max_steps 200, "
        "max_epochs 100; stopped by max_steps ×2, patience ×1), batches of 64 sentences, learning rate constant "
        "0.002.")
    warm = {"lr": 0.001, "schedule": "rnmt_plus", "replicas": 2, "warmup_steps": 500}
    dtmt = [{**m, "train": {**m["train"], "train_settings": {**m["train"]["train_settings"], **warm}}} for m in ms]
    assert ran.summary([*dtmt, {**ms[0], "variant": "shallow"}]).endswith(
        "learning rate 0.001 rising to 0.002 over 1,000 steps, falling from step 4,000 to 0.0005 at step 32,000 "
        "(RNMT+ schedule), constant 0.002.")
    assert ran.override(ms) == ("Forced on every row by the run's override, over the settings the notes "
                                "describe: train.max_steps 200.")
    assert ran.override([{**m, "override": {}} for m in ms]) == ""
    assert ran.subtitle(ms).startswith("ours: run `quick`, corpus `multi30k-en-de`, scale `mini`: 3 models")
    assert ran.subtitle(ms).endswith("; overridden: train.max_steps 200")


def test_a_table_names_the_models_that_went_back_to_a_checkpoint_at_a_lower_rate() -> None:
    """DTMT Table 5's GRU row sat on the word-frequency plateau until the plateau rule took it back to step
    500's checkpoint at half the rate at step 2,000: it trained two thirds of its budget slower than the
    learning-rate sentence says, and its table must say so, by row and seed; an ensemble's members once."""
    from rnmt.report import ran

    def metrics(variant: str, seed: int, retrained: list[dict] | None, retrains: int = 0) -> dict:
        train = {"steps": 6000, "retrains": len(retrained) if retrained is not None else retrains,
                 "train_settings": {"seed": seed}} | ({"retrained": retrained} if retrained is not None else {})
        return {"variant": variant, "train": train}

    gru = metrics("dtmt-4-gru", 1, [{"step": 2000, "from_step": 500, "lr_factor": 0.5},
                                    {"step": 5000, "from_step": 4500, "lr_factor": 0.25}])
    old = metrics("atr", 3, None, retrains=1)       # trained before train.json kept the steps
    ensemble = {"variant": "atr", "member": "ens1-3", "train": {"members": [old["train"]]}}
    assert ran.retrained([gru, old, ensemble, metrics("dtmt-4", 1, [])]) == (
        "Went back to their best checkpoint at a lower rate when their dev score stopped improving "
        "(`plateau_retrains`): atr seed 3 once; dtmt-4-gru seed 1 at step 2,000 to step 500's checkpoint at 0.5 × "
        "the rate, at step 5,000 to step 4,500's checkpoint at 0.25 × the rate.")
    assert ran.retrained([metrics("dtmt-4", 1, [])]) == "", "no model went back: nothing to say"
    assert ran.notes({("dtmt-4-gru", "seed1"): gru}, ["tok_bleu"])[1] == ran.retrained([gru])


def test_a_table_names_the_rows_still_improving_when_their_budget_ended() -> None:
    """LSTM 5L at `mini` kept its 6,000th step's checkpoint, its dev BLEU still rising, where SR-NMT 4L
    levelled off at 5,500: the first row's number is what the budget gave, and a reader weighing "LSTM 5L is
    worse than SR-NMT 4L" must be told. Only a row whose every seed ended on its best step by its budget is
    named (one of three seeds on its last step is a plateau's chance); a patience stop or an unlearned model is
    not, and an ensemble's models count once."""
    from rnmt.report import ran

    def metrics(variant: str, seed: int, best: int, steps: int = 6000, stop: str = "max_steps", **more) -> dict:
        return {"corpus": "c", "variant": variant, "member": f"seed{seed}", "train": {
            "steps": steps, "best_step": best, "stop_reason": stop, "train_settings": {"seed": seed}, **more}}

    lstm5 = [metrics("srnmt-lstm-5l", s, 6000) for s in (1, 2, 3)]
    sr4 = [metrics("srnmt-4l", 1, 6000), metrics("srnmt-4l", 2, 5500), metrics("srnmt-4l", 3, 5500)]
    one = [metrics("srnmt-5l", 1, 3000, steps=3000, stop="max_minutes")]
    patient = [metrics("dtmt-1", 1, 4000, steps=4000, stop="patience")]
    stuck = [metrics("dtmt-4", 2, 6000, learned=False), metrics("dtmt-4", 1, 6000)]
    ensemble = {"corpus": "c", "variant": "srnmt-lstm-5l", "member": "ens1-3",
                "train": {"members": [m["train"] for m in lstm5]}}
    said = ran.still_improving([*lstm5, *sr4, *one, *patient, *stuck, ensemble])
    assert said == (
        "Still improving when their budget ended (each seed's best dev score at its last step; longer training "
        "may reorder these rows against the others): dtmt-4 (seed 1); srnmt-5l (seed 1); "
        "srnmt-lstm-5l (seeds 1, 2, 3).")
    assert ran.still_improving([*sr4, *patient]) == "", "levelled off or stopped by patience: nothing to say"
    rows = {(m["variant"], m["member"]): m for m in [*lstm5, *sr4]}
    assert ran.notes(rows, ["tok_bleu"])[2] == ran.still_improving([*lstm5, *sr4]) != ""


def test_a_table_names_the_rows_whose_seeds_ran_different_code() -> None:
    """SR-NMT 1L's seed 1 was trained a session before its seeds 2 and 3, by another commit; a row's mean is
    one system's only where no commit between changed its training, so the table names the row and each
    seed's commits (a resumed model's both), and says nothing where each row ran one commit."""
    from rnmt.report import ran, trainings

    def metrics(variant: str, seed: int, *commits: str, dirty: bool = False) -> dict:
        code = [{"from_step": 100 * i, "git_commit": c, "git_dirty": dirty} for i, c in enumerate(commits)]
        return {"variant": variant, "train": {"steps": 6000, "train_settings": {"seed": seed}, "code": code,
                                              "git_commit": commits[-1]}}

    same = [metrics("srnmt-2l", s, "b" * 40) for s in (1, 2, 3)]
    assert trainings.mixed_code(same) == ""
    resumed = [metrics("srnmt-4l", 1, "b" * 40, "c" * 40)]        # one seed resumed: the train warning's to say
    assert trainings.mixed_code(resumed) == ""
    rows = [metrics("srnmt-1l", 1, "a" * 40), *(metrics("srnmt-1l", s, "b" * 40) for s in (2, 3)),
            metrics("srnmt-3l", 1, "b" * 40, "c" * 40, dirty=True), metrics("srnmt-3l", 2, "b" * 40), *same,
            *resumed, {"variant": "old", "train": {"steps": 5, "git_commit": "d" * 40}}]     # no seed recorded
    assert trainings.mixed_code(rows) == (
        "Rows whose seeds were trained by different commits of rnmt (one system only where no commit between them "
        "changed its training; `+`: with uncommitted changes): srnmt-1l (seed 1 aaaaaaaaaa, seed 2 bbbbbbbbbb, "
        "seed 3 bbbbbbbbbb); srnmt-3l (seed 1 bbbbbbbbbb+ then cccccccccc+, seed 2 bbbbbbbbbb).")
    assert ran.notes({("srnmt-1l", f"seed{i}"): m for i, m in enumerate(rows[:3], 1)}, ["bleu"])[-2] == \
        trainings.mixed_code(rows[:3])


def test_a_table_names_an_ensemble_of_other_trainings_than_its_seeds_rows() -> None:
    """ATR Table 2's ATR+CA row kept its three seeds from a session on a Xeon; models are not kept, so the
    ensemble row's run trained seeds 1 and 2 again on an EPYC: other draws of the same settings. The notes
    name the ensemble, its seeds trained again and where each side was trained, count those models apart
    from the row's, and say nothing where an ensemble averages its rows' own models."""
    from rnmt.report import ran, trainings

    def train(seed: int, cpu: str, commit: str) -> dict:
        return {"steps": 6000, "stop_reason": "max_steps", "train_seconds": 1400.0 + seed + len(cpu),
                "train_settings": {"seed": seed, "max_steps": 6000, "batch_size": 64, "lr": 0.002},
                "hardware": {"device": "cpu", "cpu": cpu, "cpu_isa": "avx512", "torch_threads": 1},
                "git_commit": commit, "code": [{"from_step": 0, "git_commit": commit, "git_dirty": False}]}

    rows = {("atr-ca", f"seed{s}"): {"corpus": "c", "variant": "atr-ca", "member": f"seed{s}",
                                     "train": train(s, "Xeon", "a" * 40)} for s in (1, 2, 3)}
    again = [train(1, "EPYC", "c" * 40), train(2, "EPYC", "b" * 40), rows["atr-ca", "seed3"]["train"]]
    ensemble = {"corpus": "c", "variant": "atr-ca", "member": "ens1-2-3", "train": {"members": again}}
    said = ran.other_trainings({**rows, ("atr-ca", "ens1-2-3"): ensemble})
    assert said == (
        "Ensembles of other trainings of their seeds than the seeds' own rows report (trained again with the same "
        "settings: other draws, so an ensemble's gain over its row is not over its own members): atr-ca "
        "(ens1-2-3) averages seeds 1, 2 trained on cpu EPYC (avx512), 1 thread by bbbbbbbbbb, cccccccccc, the row's "
        "own trained on cpu Xeon (avx512), 1 thread by aaaaaaaaaa.")
    assert ran.summary([*rows.values(), ensemble]).startswith("Ran on corpus `c`: 5 models trained 6,000 steps")
    assert trainings.mixed_code([*rows.values(), ensemble]) == (
        "Rows whose seeds were trained by different commits of rnmt (one system only where no commit between them "
        "changed its training; `+`: with uncommitted changes): atr-ca (seed 1 aaaaaaaaaa, seed 1 of ens1-2-3 "
        "cccccccccc, seed 2 aaaaaaaaaa, seed 2 of ens1-2-3 bbbbbbbbbb, seed 3 aaaaaaaaaa).")
    assert ran.notes({**rows, ("atr-ca", "ens1-2-3"): ensemble}, ["bleu"])[-1] == said
    own = {**ensemble, "train": {"members": [m["train"] for m in rows.values()]}}
    assert ran.other_trainings({**rows, ("atr-ca", "ens1-2-3"): own}) == "", "the rows' own models: nothing to say"
    assert ran.summary([*rows.values(), own]).startswith("Ran on corpus `c`: 3 models")
    alone = {("atr-ca", "ens1-2-3"): ensemble}      # no row of its seeds in the table: nothing to compare with
    assert ran.other_trainings(alone) == ""


def test_a_table_names_the_rows_whose_seeds_trained_in_different_precisions() -> None:
    """SR-NMT Table 3's 4L kept seed 1 from a CPU with bfloat16 and trained seeds 2 and 3 on one without: the
    same `amp` setting, run as bfloat16 autocast and as float32. The notes say so per row, name a model
    resumed on the other kind of machine, and say nothing where a row's seeds share one precision or a model
    did not record its machine."""
    from rnmt.report import ran, trainings

    def row(variant: str, seed: int, *bf16: bool | None) -> dict:
        hardware = [{"device": "cpu", "cpu": "AMD EPYC", **({} if b is None else {"bf16_autocast": b})} for b in bf16]
        train = {"steps": 6000, "train_settings": {"seed": seed, "max_steps": 6000}, "hardware": hardware[-1],
                 **({"machines": hardware} if len(hardware) > 1 else {})}
        return {"corpus": "c", "variant": variant, "member": f"seed{seed}", "train": train}

    rows = [row("srnmt-4l", 1, True), row("srnmt-4l", 2, False), row("srnmt-4l", 3, False),
            row("srnmt-2l", 1, True), row("srnmt-2l", 2, True, False), row("srnmt-2l", 3, True),
            row("srnmt-1l", 1, True), row("srnmt-1l", 2, True), row("srnmt-1l", 3, None)]
    said = trainings.mixed_precision(rows)
    assert said == (
        "Rows whose seeds trained in different precisions (`amp`'s bfloat16 autocast where the machine multiplies "
        "bfloat16 in hardware, float32 where not): srnmt-2l (seeds 1, 3 in bfloat16 autocast, seed 2 in bfloat16 "
        "autocast, then float32); srnmt-4l (seed 1 in bfloat16 autocast, seeds 2, 3 in float32).")
    assert said in ran.notes({(r["variant"], r["member"]): r for r in rows}, ["bleu"])
    assert trainings.mixed_precision(rows[6:]) == "", "seed 3 recorded no machine: nothing to compare it with"
    assert trainings.mixed_precision([row("lstm", s, False) for s in (1, 2, 3)]) == ""


def test_a_tables_speeds_say_whether_its_rows_trained_on_the_same_kind_of_path() -> None:
    """ATR Table 4's speed ratios compare cells only if both cells ran on the same kind of path (issue: cuDNN's
    GRU against rnmt's ATR kernel compares engineering); the note says which, from train.json's `paths`."""
    from rnmt.report import ran

    def metrics(variant: str, *labels: str) -> dict:
        return {"variant": variant, "train": {"paths": {f"cell {i}": label for i, label in enumerate(labels)}}}

    same = [metrics("gru", "rnmt kernel", "step loop"), metrics("atr", "step loop", "rnmt kernel")]
    speeds = ["tok_bleu", "train_tgt_words_per_s"]
    assert ran.paths(same, speeds) == ("Speeds: every row's recurrences trained on the same kind of path "
                                       "(rnmt kernel, step loop), so the speeds compare the cells.")
    differ = [metrics("gru", "torch layer (cuDNN)", "step loop"), same[1]]
    assert ran.paths(differ, speeds) == (
        "Speeds compare implementations as well as cells, the rows' recurrences having trained on different kinds "
        "of path: atr: rnmt kernel, step loop; gru: step loop, torch layer (cuDNN).")
    assert ran.paths(differ, ["tok_bleu"]) == "", "no speed shown: nothing to say"
    assert ran.paths(differ, ["bleu", "train_minutes"]).startswith(
        "Times compare implementations as well as cells"), "training minutes are timed too (UD Figure 2)"
    assert ran.paths([{"variant": "gru", "train": {"steps": 5}}], speeds) == "", "runs made before paths were kept"


@pytest.mark.workflow
def test_html_table_in_the_papers_order_with_differences_and_signatures(built: Path) -> None:
    """What the report shows: systems in the experiment's order; per metric with a paper number the
    paper's, ours and ours − paper; each metric's scorer signature a numbered footnote."""
    from rnmt.report.layout import fmt as _fmt
    from rnmt.report.layout import signed

    page = (built / "results/tiny/tables/atr-table4.html").read_text()
    df = pd.read_csv(built / "results/tiny/tables/atr-table4.csv")
    rows = re.findall(r"<tr><td>(.*?)</td>(.*?)</tr>", page)
    exp = yaml.safe_load((EXPERIMENTS / "atr-table4.yaml").read_text())
    assert [re.sub(r"<sup>.*?</sup>", "", name) for name, _ in rows] == [r["system"] for r in exp["rows"]]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", rows[1][1])                # RNNSearch+LSTM
    lstm = df[df.system == rows[1][0]].set_index("metric")
    first = exp["metrics"][0]
    assert cells[:3] == [_fmt(lstm.paper[first]), _fmt(lstm.ours[first]), signed(lstm.ours[first] - lstm.paper[first])]
    t1 = (built / "results/tiny/tables/atr-table1.html").read_text()      # exact counts: Δ 0 everywhere
    deltas = re.findall(r'<td class="diff[^"]*">(.*?)</td>', t1)
    assert len(deltas) == 2 * len(yaml.safe_load((EXPERIMENTS / "atr-table1.yaml").read_text())["rows"])
    assert set(deltas) == {"+0.00"}


@pytest.mark.workflow
def test_latex_tables_compile_and_fit_the_page(built: Path, tmp_path: Path) -> None:
    """Every table compiles in a plain article with booktabs and adjustbox, without a line wider than the
    text (LaTeX's "Overfull \\hbox"); needs pdflatex (texlive-latex-extra)."""
    if not shutil.which("pdflatex") or subprocess.run(["kpsewhich", "adjustbox.sty"], capture_output=True,
                                                      text=True).stdout.strip() == "":
        pytest.skip("pdflatex with adjustbox is not installed (apt-get install texlive-latex-extra)")
    for name in TINY_TABLES:
        doc = tmp_path / f"{name}-doc.tex"
        doc.write_text("\\documentclass{article}\n\\usepackage[T1]{fontenc}\n\\usepackage{booktabs}\n"
                       "\\usepackage{adjustbox}\n\\begin{document}\n"
                       f"\\input{{{built / 'results/tiny/tables' / name}.tex}}\n\\end{{document}}\n")
        r = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
        log = (tmp_path / f"{name}-doc.log").read_text(errors="replace")
        assert r.returncode == 0, log[-2000:]
        assert "Overfull \\hbox" not in log, name


def test_the_metrics_a_table_may_list_are_the_labelled_ones() -> None:
    """The experiment schema's metric names come from METRIC_LABELS: a labelled metric is accepted, with
    tok_ where it is a BLEU, and an unlabelled one is refused."""
    from rnmt.config import ConfigError, validate
    from rnmt.evaluate.metric_names import METRIC_LABELS

    schema = ROOT / "workflow/schemas/experiment.schema.yaml"
    exp = yaml.safe_load((EXPERIMENTS / "atr-table4.yaml").read_text())
    for metric in [*METRIC_LABELS, "tok_bleu", "bleu@nist-mt02", "tok_bleu_len@10-20", "bleu_len@60-inf"]:
        validate({**exp, "metrics": [metric]}, schema, "t")
    for metric in ("train_hours", "tok_chrf", "bleu@"):
        with pytest.raises(ConfigError, match=f"'metrics.0' is '{metric}'"):
            validate({**exp, "metrics": [metric]}, schema, "t")


def test_a_published_number_has_one_metric_in_every_table_that_quotes_it() -> None:
    """ATR Table 5 and DTMT Table 1 quote the same NIST systems (DeepLAU's 39.35 on MT03): a number is
    tokenized or detokenized BLEU in both, never one in one table and the other in the next."""
    named: dict[tuple[str, float], set[str]] = {}
    for path in EXPERIMENTS.glob("*.yaml"):
        for row in yaml.safe_load(path.read_text())["rows"]:
            for metric, value in (row.get("paper") or {}).items():
                if value is not None and "@nist-" in metric:
                    named.setdefault((metric.split("@")[1], value), set()).add(metric)
    assert named[("nist-mt03", 39.35)] == {"tok_bleu@nist-mt03"}
    assert [k for k, metrics in named.items() if len(metrics) > 1] == []



@pytest.mark.workflow
def test_a_partial_table_shows_the_finished_rows_and_says_which_are_missing(built: Path, tmp_path: Path,
                                                                             capsys: pytest.CaptureFixture) -> None:
    """A run that ended early (a GPU loan's time cap, a killed session) still gives the table of what it
    finished, with `--rows finished`; without it a missing metrics file is refused by name."""
    from rnmt.cli import main

    files = sorted((built / "results/tiny/metrics/synthetic-demo").glob("*/seed*/test.json"))
    left = ("atr-rnnsearch-lstm", "atr-transformer")
    planned = [str(tmp_path / "unfinished" / f.parts[-3] / "seed1/test.json") if f.parts[-3] in left else str(f)
               for f in files]
    args = ["table", "--experiment", str(EXPERIMENTS / "atr-table4.yaml"), "--run", "tiny", "--scale", "demo",
            "--max-seeds", "1", "--csv", str(tmp_path / "t.csv"), "--md", str(tmp_path / "t.md")]
    assert main([*args, "--", *planned]) == 2
    assert "unfinished/atr-rnnsearch-lstm/seed1/test.json" in capsys.readouterr().err
    assert main([*args, "--rows", "finished", "--", *planned]) == 0
    df = pd.read_csv(tmp_path / "t.csv").set_index(["system", "metric"])
    whole = pd.read_csv(built / "results/tiny/tables/atr-table4.csv").set_index(["system", "metric"])
    lstm = df.loc["RNNSearch+LSTM"]
    assert lstm.ours.isna().all() and lstm.paper.notna().all()
    assert (lstm.why_empty == "not finished in run tiny: no metrics of atr-rnnsearch-lstm seed1").all()
    # the finished rows' numbers are the whole table's, ratios to the baseline included
    done = [k for k in whole.index if k[0] not in ("RNNSearch+LSTM", "Transformer")]
    assert df.loc[done].ours.tolist() == pytest.approx(whole.loc[done].ours.tolist(), nan_ok=True)
    assert df.loc[("RNNSearch+ATR", "train_tgt_words_per_s_ratio"), "ours"] > 0
    md = (tmp_path / "t.md").read_text()
    assert md.splitlines()[0].endswith("(WMT14 En-De, beam 1) (partial: 5 of 7 rows)")
    assert "Partial table: 5 of the 7 rows this run trains had finished" in md
    assert "; 1 seed a row." in md                                    # as this run trained them
    assert "RNNSearch+LSTM, Transformer have no numbers yet" in md


@pytest.mark.workflow
def test_a_partial_table_leaves_out_a_row_made_with_other_settings_and_says_what_changed(built: Path,
                                                                                        tmp_path: Path) -> None:
    """A partial table reads the files that exist, and a model trained before one of its settings changed
    has them: its row must not show the old model's numbers as the run's, nor start its retraining."""
    from rnmt.planning.current import outdated, table_expected
    from rnmt.planning.plan import Plan

    plan = Plan(yaml.safe_load((built / "results/tiny/config.yaml").read_text()), ROOT)
    assert {t: outdated(table_expected(plan, t), built) for t in TINY_TABLES} == {t: {} for t in TINY_TABLES}
    d = tmp_path / "run"
    shutil.copytree(built, d)
    lstm = d / "results/tiny/metrics/synthetic-demo/atr-rnnsearch-lstm/seed1/test.json"
    m = json.loads(lstm.read_text())
    lr = m["train"]["train_settings"]["lr"]
    m["train"]["train_settings"]["lr"] = 0.25               # as a model trained at another rate records it
    lstm.write_text(json.dumps(m))
    r = run_snakemake(["results/tiny/tables/partial/atr-table4.csv", "--cores", "1", "--configfile", "tiny.yaml"], d)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "rule train:" not in r.stdout + r.stderr                  # nothing retrained by a partial table
    df = pd.read_csv(d / "results/tiny/tables/partial/atr-table4.csv").set_index(["system", "metric"])
    row = df.loc["RNNSearch+LSTM"]
    assert row.ours.isna().all()
    assert (row.why_empty == "made with other settings than run tiny's now, to be retrained: atr-rnnsearch-lstm "
                             f"seed1 (training lr: 0.25 → {lr!r})").all()
    whole = pd.read_csv(built / "results/tiny/tables/atr-table4.csv").set_index(["system", "metric"])
    assert df.loc["RNNSearch+GRU"].ours.tolist() == pytest.approx(whole.loc["RNNSearch+GRU"].ours.tolist())
    # Snakemake keeps that model's provenance unchanged (as for files copied from another machine), so only
    # the file tells: the whole table refuses it, naming the file, what changed and the command that retrains
    r = run_snakemake(["results/tiny/tables/atr-table4.csv", "--cores", "1", "--forcerun", "table",
                       "--configfile", "tiny.yaml"], d)
    log = (d / "results/tiny/logs/table/atr-table4.log").read_text()
    assert r.returncode != 0 and "Traceback" not in log
    assert (f"results/tiny/metrics/synthetic-demo/atr-rnnsearch-lstm/seed1/test.json: training lr: 0.25 → {lr!r}"
            in log)
    assert ("snakemake --cores all --forcerun train results/tiny/metrics/synthetic-demo/atr-rnnsearch-lstm/seed1/"
            "test.json") in log


def test_what_a_table_expects_of_its_files_fits_in_one_command_line_argument() -> None:
    """The table rule gives `rnmt table` its rows' settings as one argument, which Linux caps at 128 KiB: each
    row's settings are given once, whatever its seeds (8 a row here, the ATR paper's ensemble)."""
    from rnmt.planning.current import table_expected
    from rnmt.planning.plan import Plan

    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["scales"]["mini"] = {**config["scales"]["mini"], "seeds": 8, "max_seeds": 8}
    plan = Plan({**config, "scale": "mini", "run": "mini"}, ROOT)
    sizes = {t: len(json.dumps(table_expected(plan, t))) for t in plan.tables}
    assert max(sizes.values()) < 64 * 1024, sizes


def test_what_a_metrics_file_was_made_with_is_compared_with_the_rows_settings_now() -> None:
    """Model, training (each model of an ensemble with its own seed) and search; a decoding recorded before
    the search's settings were kept is not current."""
    from rnmt.planning.current import differences, expected
    from rnmt.planning.plan import Variant

    v = Variant("v", "c", {"arch": "rnnsearch", "hidden": 8}, {"lr": 0.001, "max_steps": 10},
                {"beam": 5, "cuda_graphs": True, "threads": 1}, (1, 2))
    made = {"model_config": {"arch": "rnnsearch", "hidden": 8}, "train_settings": {"lr": 0.001, "max_steps": 10}}
    seed = {1: {**made, "train_settings": {**made["train_settings"], "seed": 1}},
            2: {**made, "train_settings": {**made["train_settings"], "seed": 2}}}
    now = {"train": seed[1], "decode": {"settings": {"beam": 5, "cuda_graphs": True}}}
    assert differences(expected(v), "seed1", now) == []
    assert differences(expected(v), "seed2", now) == ["training seed: 1 → 2"]
    # recorded before the search kept its settings: its beam is the plan's, but what it left out (its length
    # penalty, say) may not be, so it is not current
    old = {"train": seed[1], "decode": {"beam": 5, "cuda_graphs": {"off": "the device is cpu, not CUDA"}}}
    assert differences(expected(v), "seed1", old) == [
        "search settings not recorded (an older rnmt decoded it): decode it again"]
    wider = {**seed[2], "model_config": {"arch": "rnnsearch", "hidden": 16}}
    ens = {"train": {"members": [seed[1], wider]}, "decode": {"settings": {"beam": 5, "cuda_graphs": True}}}
    assert differences(expected(v), "ens1-2", ens) == ["model hidden: 16 → 8"]
    assert differences(expected(v), "ens1-2", {**ens, "train": seed[1]}) == ["1 trained model(s) for 2 seed(s)"]
    labelled = Variant("v", "c", {"arch": "rnnsearch", "factors": {"dims": [4]}}, {"lr": 0.001}, {"beam": 5}, (1,))
    trained = {"model_config": {"arch": "rnnsearch", "factors": {"dims": [4], "vocab_sizes": [37]}},   # derived
               "train_settings": {"lr": 0.001, "seed": 1}}
    assert differences(expected(labelled), "seed1", {"train": trained, "decode": {"settings": {"beam": 5}}}) == []
    trained["model_config"]["factors"]["dims"] = [8]
    assert differences(expected(labelled), "seed1", {"train": trained, "decode": {"settings": {"beam": 5}}}) == [
        "model factors: {'dims': [8], 'vocab_sizes': [37]} → {'dims': [4]}"]


def test_a_length_table_and_figure_say_how_many_sentences_each_column_rests_on(tmp_path: Path) -> None:
    """DTMT Figure 3 on a test split of short sentences: the 'longer than 30 words' point is a BLEU over a
    handful of sentences, and the table and the figure must say so rather than draw it as a trend."""
    from rnmt.evaluate.metrics import write_metrics
    from rnmt.planning.table import table_from_experiment
    from rnmt.report.figures import length
    from rnmt.report.tables import build

    words = ["a", "cat", "sat", "on", "the", "mat", "and", "dog", "ran", "in", "park", "with", "red", "ball"]
    src = [" ".join(words[:5])] * 25 + [" ".join(words * 2)[:60]] * 4 + [" ".join(words * 3)] * 1
    lengths = [len(s.split()) for s in src]
    refs = [" ".join(words[i % 7: i % 7 + 6]) for i in range(len(src))]
    (tmp_path / "src.txt").write_text("\n".join(src) + "\n")
    for name in ("ref.txt", "ref.tok"):
        (tmp_path / name).write_text("\n".join(refs) + "\n")
    files = []
    for k, variant in enumerate(("dtmt-4", "dtmt-1", "dtmt-shallow-gru")):
        hyps = [r if i % 3 != k else " ".join(r.split()[:3]) for i, r in enumerate(refs)]
        d = tmp_path / variant / "seed1"                 # metrics/<corpus>/<variant>/<member>/, as the workflow's
        d.mkdir(parents=True)
        for ext in ("txt", "tok"):
            (d / f"test.{ext}").write_text("\n".join(hyps) + "\n")
        write_metrics(str(d / "test.json"), str(d / "test.txt"), [str(tmp_path / "ref.txt")], str(d / "test.tok"),
                      [str(tmp_path / "ref.tok")], src=str(tmp_path / "src.txt"),
                      meta={"variant": variant, "member": "seed1"})
        files.append(d / "test.json")
    path = ROOT / "workflow/experiments/dtmt-figure3.yaml"
    table = table_from_experiment(yaml.safe_load(path.read_text()), path)
    build(table, files, "r", "mini", tmp_path / "t.csv", tmp_path / "t.md")
    longer = {t: sum(n > t for n in lengths) for t in (0, 10, 20, 30, 40, 50, 60)}
    md = (tmp_path / "t.md").read_text()
    counts = "; ".join(f"tok len >{t}: {n:,}" for t, n in longer.items() if n)      # >50 and >60: none
    assert f"Test sentences in each length column: {counts}." in md
    assert "fewer than 100 sentences, too few for a BLEU to mean much" in md
    length(table, files, tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 0


def _timed(variant: str, speed: float, load: float | None = 1.0, **hw: object) -> dict:
    """A metrics file of a row timed on a CPU: its training speed and the machine train.json recorded."""
    hardware = {"device": "cpu", "cpu": "AMD EPYC", "cpu_isa": "avx512", "torch_threads": 1,
                "bf16_autocast": True, **({"load_avg": load} if load is not None else {}), **hw}
    return {"variant": variant, "member": "seed1", "corpus": "c", "scale": "mini",
            "train": {"steps": 10, "params": 1000, "train_tgt_words_per_s": speed, "hardware": hardware}}


def test_a_tables_speeds_say_which_machine_and_load_they_were_timed_at() -> None:
    """SR-NMT Table 1 and ATR Table 4 compare speeds: rows timed on different machines (a CPU with AVX-512
    beside one without, bf16 beside float32, another GPU) do not compare, and rows that shared the machine with
    different work compare less closely; the note says which, from each metrics file's `hardware`."""
    from rnmt.report import ran

    speeds = ["tok_bleu", "train_tgt_words_per_s_ratio"]
    same = {("a", "seed1"): _timed("a", 100, 2.0), ("b", "seed1"): _timed("b", 50, 2.1)}
    assert ran.machines(same, speeds) == ("Timed on one machine: cpu AMD EPYC (avx512), 1 thread, bf16. Load "
                                          "average 2.0–2.1.")
    assert ran.apart(same[("a", "seed1")], same[("b", "seed1")], "train_tgt_words_per_s") == ""
    assert ran.machines(same, ["tok_bleu"]) == "", "no speed shown: nothing to say"
    loaded = {**same, ("b", "seed1"): _timed("b", 50, 1.0), ("c", "seed1"): _timed("c", 70, None)}
    assert ran.machines(loaded, speeds) == (
        "Timed on one machine: cpu AMD EPYC (avx512), 1 thread, bf16. The rows shared the machine with different "
        "work (load averages a 2.0, b 1.0), so their speeds compare less closely than their cells. No load "
        "recorded for c: their speeds do not compare with those of the rows that recorded theirs.")
    unknown = _timed("c", 70, None)
    assert ran.apart(same[("a", "seed1")], unknown, "train_tgt_words_per_s") == (
        "trained at load average 2.0 against a run that did not record what else shared the machine")
    assert ran.apart(unknown, _timed("d", 1, None), "train_tgt_words_per_s") == "", "neither recorded it"
    older = {**same, ("b", "seed1"): _timed("b", 50, cpu_isa=None)}
    assert ran.apart(older[("a", "seed1")], older[("b", "seed1")], "train_tgt_words_per_s") == (
        "trained on cpu AMD EPYC (avx512), 1 thread, bf16 against cpu AMD EPYC (vector instructions not "
        "recorded), 1 thread, bf16")
    assert ran.apart(older[("a", "seed1")], older[("b", "seed1")], "tok_bleu") == "", "BLEU is not timed"
    zen5, zen4 = (_timed(v, 50, 2.0, cpu_family_model=f) for v, f in (("a", "family 26, model 2"),
                                                                       ("b", "family 25, model 17")))
    assert ran.apart(zen5, zen4, "train_tgt_words_per_s") == (
        "trained on cpu AMD EPYC (family 26, model 2; avx512), 1 thread, bf16 against cpu AMD EPYC (family 25, "
        "model 17; avx512), 1 thread, bf16"), "one name, two generations"
    gpus = {("a", "seed1"): _timed("a", 1, device="cuda:0", gpu="NVIDIA H200"),
            ("b", "seed1"): _timed("b", 1, device="cuda:3", gpu="NVIDIA H200")}
    assert ran.apart(gpus[("a", "seed1")], gpus[("b", "seed1")], "train_tgt_words_per_s") == "", \
        "two jobs on two GPUs of one kind compare"
    assert ran.machines({**gpus, ("c", "seed1"): _timed("c", 1)}, speeds).startswith(
        "Timed on different machines, so the speeds of rows on different ones do not compare: c on cpu AMD EPYC "
        "(avx512), 1 thread, bf16; a, b on cuda NVIDIA H200, bf16.")


def test_training_and_decoding_speeds_timed_on_one_machine_are_not_called_different_machines() -> None:
    """ATR Table 4 shows training and decoding speeds: rows trained under bfloat16 autocast and decoded in
    float32 on one GPU were timed on one machine; the note says where each kind was timed, and names rows
    apart only within a kind."""
    from rnmt.report import ran

    def row(variant: str, gpu: str = "NVIDIA H200") -> dict:
        m = _timed(variant, 100, 6.3, device="cuda:0", gpu=gpu)
        m["decode"] = {"decode_words_per_s_beam1": 5000.0,
                       "hardware": {"device": "cuda:0", "gpu": gpu, "bf16_autocast": False, "load_avg": 6.3}}
        return m

    shown = ["train_tgt_words_per_s_ratio", "decode_words_per_s_beam1_ratio"]
    table = {("a", "seed1"): row("a"), ("b", "seed1"): row("b")}
    assert ran.machines(table, shown) == ("Timed on one machine: training on cuda NVIDIA H200, bf16; decoding on "
                                          "cuda NVIDIA H200. Load average 6.3.")
    assert ran.apart(table[("a", "seed1")], table[("b", "seed1")], "decode_words_per_s_beam1") == ""
    table[("c", "seed1")] = row("c", gpu="NVIDIA H100 80GB HBM3")
    assert ran.machines(table, shown) == (
        "Timed on different machines, so the speeds of rows on different ones do not compare: training: c on "
        "cuda NVIDIA H100 80GB HBM3, bf16; a, b on cuda NVIDIA H200, bf16; decoding: c on cuda NVIDIA H100 80GB "
        "HBM3; a, b on cuda NVIDIA H200. Load average 6.3.")


def test_a_speed_claim_and_ratio_across_machines_are_not_comparable(tmp_path: Path) -> None:
    """A speed measured on two machines says nothing about the cells: the table gives no ratio to the
    baseline for such a row and its claim reads 'not comparable', with why; on one machine both stand."""
    from rnmt.planning.table import Row, Table
    from rnmt.report import claims
    from rnmt.report.tables import build

    said = [{"says": "fast beats base", "metric": "train_tgt_words_per_s", "kind": "higher", "row": "Fast",
             "than": "Base"}]
    table = Table("t", tmp_path / "t.yaml", "T", "c", "test", ["train_tgt_words_per_s",
                                                               "train_tgt_words_per_s_ratio"],
                  [Row("Base", "base", {}, (1,)), Row("Fast", "fast", {}, (1,))], baseline="Base", claims=said)

    def built(fast: dict, name: str) -> tuple[pd.DataFrame, pd.DataFrame, str]:
        files = []
        for m in (_timed("base", 100.0), fast):
            path = tmp_path / name / m["variant"] / "test.json"
            path.parent.mkdir(parents=True)
            path.write_text(json.dumps(m))
            files.append(path)
        out = tmp_path / name
        df = build(table, files, "r", "mini", out / "t.csv", out / "t.md", out_claims=out / "t.claims.csv")
        return df.set_index(["system", "metric"]), pd.read_csv(out / "t.claims.csv"), (out / "t.md").read_text()

    df, checked, _ = built(_timed("fast", 150.0), "one")
    assert df.loc[("Fast", "train_tgt_words_per_s_ratio"), "ours"] == pytest.approx(1.5)
    assert checked.verdict.tolist() == [claims.HOLDS]
    df, checked, md = built(_timed("fast", 150.0, cpu_isa="avx2"), "two")
    assert math.isnan(df.loc[("Fast", "train_tgt_words_per_s_ratio"), "ours"])
    assert df.loc[("Fast", "train_tgt_words_per_s_ratio"), "why_empty"] == (
        "not comparable with the baseline 'Base': trained on cpu AMD EPYC (avx2), 1 thread, bf16 against cpu AMD "
        "EPYC (avx512), 1 thread, bf16")
    assert df.loc[("Fast", "train_tgt_words_per_s"), "ours"] == 150.0, "the measured speed itself stays"
    assert checked.verdict.tolist() == [claims.APART] and checked.claim_verdict.tolist() == [claims.APART]
    assert "fast beats base (not comparable)" in md and "not comparable: trained on cpu AMD EPYC (avx2)" in md
    assert "Timed on different machines" in md
