"""The Snakemake DAG for real, at a tiny size: dry run, one table target, no-op rerun, table contents."""

import base64
import contextlib
import json
import math
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
import sacrebleu
import torch
import yaml

import envblock
from conftest import guard_log, jobs, run_snakemake
from rnmt.decode import DECODED_BY, POSTPROCESSED_BY
from rnmt.evaluate import SCORED_BY
from rnmt.provenance import source_digest

TINY = {
    "run": "tiny",
    "tables": ["demo-rnnsearch"],
    "corpora": {"synthetic-demo": {"sizes": {"train": 400, "dev": 30, "test": 40}}},
    "bpe": {"merges": 150},
    "override": {
        "model": {"emb": 16, "hidden": 24},
        "train": {"max_steps": 150, "max_epochs": 100, "valid_every": 75, "max_minutes": 0, "threads": 1,
                  "batch_size": 32},
        "decode": {"beam": 3, "threads": 1},
    },
}
TABLE = "results/tiny/tables/demo-rnnsearch.csv"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("wf")
    (d / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    return d


@pytest.mark.workflow
def test_dry_run_lists_the_dag(workdir: Path) -> None:
    r = run_snakemake(["-n", "--configfile", "tiny.yaml"], workdir)
    assert r.returncode == 0, r.stderr
    counts = jobs(r.stdout)
    assert counts == {"synthetic_corpus": 1, "chunk_index": 1, "clean_chunk": 1, "merge_chunks": 1, "tokenize": 4,
                      "learn_bpe": 2, "apply_bpe": 3, "apply_bpe_train": 1, "vocab": 2,
                      "train": 3, "translate": 4, "postprocess": 4, "score": 4, "table": 1, "table_curves": 1,
                      "runs": 1, "all": 1}     # GRU seed 1, ATR seeds 1 and 2, and the ATR ensemble of both
    assert not (workdir / "results/tiny/config.yaml").exists()       # a dry run records no config


@pytest.mark.workflow
def test_a_data_target_needs_no_training(workdir: Path) -> None:
    r = run_snakemake(["results/tiny/data/synthetic-demo/bpe/dev.src", "-n", "--configfile", "tiny.yaml"],
                      workdir)
    assert r.returncode == 0, r.stderr
    # tokenize: dev and test (cleaning counts the test sentences found in the training data)
    assert jobs(r.stdout) == {"synthetic_corpus": 1, "chunk_index": 1, "clean_chunk": 1, "merge_chunks": 1,
                              "tokenize": 2, "learn_bpe": 1, "apply_bpe": 1}


@pytest.mark.workflow
def test_table_target_runs_for_real_and_rerun_does_nothing(workdir: Path) -> None:
    # paths measured (RNMT_FASTPATH wins over the demo scale's `fast_paths: default`): every job of the
    # run must take the run's first choice of each, kept in its folder (asserted below)
    r = run_snakemake([TABLE, "--cores", "2", "--configfile", "tiny.yaml"], workdir,
                      extra_env={"RNMT_FASTPATH": "measure"})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "profiles/default for setting default command line arguments" in r.stderr   # read with no flag
    df = pd.read_csv(workdir / TABLE)
    exp = yaml.safe_load((Path(__file__).parents[1] / "workflow/experiments/demo-rnnsearch.yaml").read_text())
    assert list(df.metric) == exp["metrics"] * len(exp["rows"])      # every row has every metric
    assert list(dict.fromkeys(df.system)) == [r["system"] for r in exp["rows"]]
    # the paper's row order and what each row's numbers come from (rnmt compare pairs systems by these)
    assert list(dict.fromkeys(zip(df.row, df.system, df.members, strict=True))) == [
        (1, "RNNSearch + GRU", "seed1"), (2, "RNNSearch + ATR", "seed1;seed2"),
        (3, "RNNSearch + ATR (ensemble of 2)", "ens1-2")]
    assert set(df.run) == {"tiny"} and set(df.scale) == {"demo"}
    assert df.ours.map(math.isfinite).all()
    ours = df[df.system == "RNNSearch + GRU"].set_index("metric").ours

    # the table's numbers are the run's numbers: BLEU recomputed from the files, params from the weights
    run_dir = workdir / "results/tiny"
    hyp = (run_dir / "translations/synthetic-demo/rnnsearch-gru/seed1/test.txt").read_text().splitlines()
    ref = (run_dir / "data/synthetic-demo/raw/test.tgt").read_text().splitlines()
    assert len(hyp) == len(ref) == 40
    assert ours["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyp, [ref]).score)
    state = torch.load(run_dir / "models/synthetic-demo/rnnsearch-gru/seed1/model.pt", weights_only=True)["state_dict"]
    assert ours["params_m"] == pytest.approx(sum(t.numel() for t in state.values()) / 1e6)
    assert set(df[df.metric == "bleu"].signature.str[:33]) == {"nrefs:1|case:mixed|eff:no|tok:13a"}
    # the report's HTML table: each BLEU column's scorer as a numbered footnote on its header
    page = (workdir / TABLE).with_suffix(".html").read_text()
    for metric, name in (("bleu", "BLEU"), ("tok_bleu", "tok BLEU")):
        sig = df[df.metric == metric].signature.iloc[0]
        notes = re.findall(r"<li>(.*?)</li>", page)
        k = notes.index(f"Scored with <code>{sig}</code>") + 1
        assert f">{name}<sup>{k}</sup></th>" in page

    # two seeds: mean ± std; their ensemble: one decoding with both models, whose parameters add up
    atr = df[df.system == "RNNSearch + ATR"].set_index("metric")
    ens = df[df.system == "RNNSearch + ATR (ensemble of 2)"].set_index("metric")
    assert atr.n_seeds["bleu"] == 2 and math.isfinite(atr["std"]["bleu"]) and ens.n_seeds["bleu"] == 1
    assert ens.ours["params_m"] == pytest.approx(2 * atr.ours["params_m"])
    ens_hyp = (run_dir / "translations/synthetic-demo/rnnsearch-atr/ens1-2/test.txt").read_text().splitlines()
    assert ens.ours["bleu"] == pytest.approx(sacrebleu.corpus_bleu(ens_hyp, [ref]).score)
    ens_metrics = json.loads((run_dir / "metrics/synthetic-demo/rnnsearch-atr/ens1-2/test.json").read_text())
    assert ens_metrics["seeds"] == [1, 2] and ens_metrics["decode"]["models"] == 2
    metrics = json.loads((run_dir / "metrics/synthetic-demo/rnnsearch-gru/seed1/test.json").read_text())
    assert metrics["train"]["steps"] == 150 and metrics["train"]["stop_reason"] == "max_steps"
    # the CLI kept freed memory mapped (rnmt.machine.allocator) in the training and the decoding job
    assert metrics["train"]["hardware"]["malloc_tuned"] is sys.platform.startswith("linux")
    assert metrics["decode"]["hardware"]["malloc_tuned"] is sys.platform.startswith("linux")
    # and recorded how much else shared the machine while it was timed (a speed table's note reads it)
    if sys.platform.startswith("linux"):
        assert metrics["train"]["hardware"]["load_avg"] >= 0 and metrics["decode"]["hardware"]["load_avg"] >= 0
    # the decoding says why its steps were not replayed as CUDA graphs (the decode setting is on by default)
    assert metrics["decode"]["cuda_graphs"] == {"off": "the device is cpu, not CUDA"}
    # each job's paths are the run's: one choice per computation, kept in results/<run>/fast_paths.json
    fixed = json.loads((run_dir / "fast_paths.json").read_text())["paths"]
    assert {key.split("[")[0] for key in fixed} >= {"cell GRU", "cell ATR"}
    for path in run_dir.glob("metrics/*/*/seed*/test.json"):
        for part in ("train", "decode"):
            hw = json.loads(path.read_text())[part]["hardware"]
            assert hw["fast_path_mode"] == "measure"
            taken = dict(entry.split(" | ")[-1].rsplit(": ", 1) for entry in hw["fast_paths"])
            assert taken and all(fixed[key] == value for key, value in taken.items()), (path, part, taken)
    train_log = run_dir / "models/synthetic-demo/rnnsearch-gru/seed1/train.jsonl"
    log = [json.loads(x) for x in train_log.read_text().splitlines()]
    assert [x["step"] for x in log if x["kind"] == "valid"] == [75, 150]

    md = (workdir / TABLE).with_suffix(".md").read_text()
    assert "| System | BLEU | tok BLEU | chrF | #Params (M) |" in md
    assert "| RNNSearch + GRU |" in md and "| RNNSearch + ATR (ensemble of 2) |" in md

    again = run_snakemake([TABLE, "-n", "--configfile", "tiny.yaml"], workdir)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr


@contextlib.contextmanager
def made_by_other_code(workdir: Path, path: str, digest: str) -> Iterator[None]:
    """Snakemake's record of the file at `path` as if an earlier rnmt had made it (`digest`, the code's digest
    among the rule's params, replaced), put back afterwards: the file is newer than its inputs, so only that
    param tells it is stale."""
    record = workdir / ".snakemake/metadata" / base64.urlsafe_b64encode(path.encode()).decode()
    original = record.read_text()
    assert original.count(json.dumps(repr(digest))) == 1
    try:
        record.write_text(original.replace(json.dumps(repr(digest)), json.dumps(repr("0" * 64))))
        yield
    finally:
        record.write_text(original)


@pytest.mark.workflow
def test_a_table_or_a_score_made_by_other_code_is_made_again(workdir: Path) -> None:
    scored = "results/tiny/metrics/synthetic-demo/rnnsearch-gru/seed1/test.json"
    decoded = "results/tiny/translations/synthetic-demo/rnnsearch-gru/seed1/test.bpe"
    for path, digest, made_again in ((TABLE, source_digest(), {"table": 1}),     # no model, decoding or score
                                     (scored, source_digest(*SCORED_BY), {"score": 1, "table": 1}),
                                     (decoded, source_digest(*DECODED_BY),         # decoded again, not trained
                                      {"translate": 1, "postprocess": 1, "score": 1, "table": 1}),
                                     (decoded.replace(".bpe", ".txt"), source_digest(*POSTPROCESSED_BY),
                                      {"postprocess": 1, "score": 1, "table": 1})):
        with made_by_other_code(workdir, path, digest):
            r = run_snakemake([TABLE, "-n", "--configfile", "tiny.yaml"], workdir)
            assert r.returncode == 0, r.stderr
            assert jobs(r.stdout) == made_again
            assert "Params have changed since last execution" in r.stdout
    again = run_snakemake([TABLE, "-n", "--configfile", "tiny.yaml"], workdir)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr


@pytest.mark.workflow
def test_rows_are_tested_against_the_reference_row_as_sacrebleu_tests_them(workdir: Path) -> None:
    """The table's p-values are sacrebleu's paired bootstrap of each row against RNNSearch + GRU (the
    table's baseline) on the files scored: ATR's two seeds each against GRU's one seed (the larger p
    counts where both differ one way, else 1), the ensemble's one decoding against it."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    if not (workdir / TABLE).is_file():
        pytest.skip("needs test_table_target_runs_for_real_and_rerun_does_nothing's run")
    run_dir = workdir / "results/tiny"
    ref = (run_dir / "data/synthetic-demo/raw/test.tgt").read_text().splitlines()

    def hyp(variant: str, member: str) -> list[str]:
        return (run_dir / f"translations/synthetic-demo/{variant}/{member}/test.txt").read_text().splitlines()

    def sacrebleu_p(system: list[str]) -> tuple[float, float]:
        _, results = PairedTest([("base", hyp("rnnsearch-gru", "seed1")), ("system", system)], {"BLEU": BLEU()},
                                [ref], test_type="bs", n_samples=1000)()
        base, other = results["BLEU"]
        return (1.0 if base.score == other.score else other.p_value), other.score - base.score

    bleu = pd.read_csv(workdir / TABLE).query("metric == 'bleu'").set_index("system").p_value
    assert math.isnan(bleu["RNNSearch + GRU"])
    (p1, d1), (p2, d2) = (sacrebleu_p(hyp("rnnsearch-atr", s)) for s in ("seed1", "seed2"))
    assert bleu["RNNSearch + ATR"] == pytest.approx(max(p1, p2) if (d1 > 0) == (d2 > 0) else 1.0, abs=1e-12)
    assert bleu["RNNSearch + ATR (ensemble of 2)"] == pytest.approx(sacrebleu_p(hyp("rnnsearch-atr", "ens1-2"))[0],
                                                                     abs=1e-12)
    md = (workdir / TABLE).with_suffix(".md").read_text()
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1] for line in md.splitlines() if line.startswith("| RNN")}
    for system, p in bleu.items():
        assert rows[system].endswith("*") == (p < 0.05), (system, p, rows[system])
    assert "BLEU marked * differs from RNNSearch + GRU's at p < 0.05" in md


@pytest.mark.workflow
def test_a_built_run_remembers_its_config_and_reports_what_it_built(workdir: Path) -> None:
    """The second day: later commands on the run name only the run; the report shows the one table built."""
    if not (workdir / TABLE).is_file():
        pytest.skip("needs test_table_target_runs_for_real_and_rerun_does_nothing's run")
    record = yaml.safe_load((workdir / "results/tiny/config.yaml").read_text())
    assert record["override"] == TINY["override"] and record["tables"] == TINY["tables"]

    # without the configfile, config.yaml's settings would retrain every model of the run
    again = run_snakemake([TABLE, "-n", "--config", "run=tiny"], workdir)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "Nothing to be done" in again.stdout + again.stderr
    # a contradicting setting stops before any job, naming the difference and the way to a new run
    other = run_snakemake([TABLE, "-n", "--config", "run=tiny", "override={train: {max_steps: 10}}"], workdir)
    assert other.returncode != 0
    assert "override.train.max_steps: the run has 150, this command gives 10" in other.stderr
    assert "add run=<new name> to --config" in other.stderr and "Traceback" not in other.stderr

    # the report covers what the run built (one table, no learning curves, no runs.csv)
    r = run_snakemake(["--report", "report.html", "--config", "run=tiny"], workdir)
    assert r.returncode == 0, r.stderr[-2000:]
    added = sorted(re.findall(r"Adding (\S+) \(", r.stderr))
    assert added == ["demo-rnnsearch.csv", "demo-rnnsearch.html"], added
    assert (workdir / "report.html").stat().st_size > 10_000


@pytest.mark.workflow
def test_every_job_ran_with_only_its_rules_conda_environment(workdir: Path) -> None:
    """The run above went through the import guard (conftest.run_snakemake): each job's rnmt command could
    import only what its rule's envs/*.yaml installs, so `snakemake --sdm conda` has what every job needs."""
    ran = envblock.guarded(guard_log(workdir))
    if not ran:
        pytest.skip("needs test_table_target_runs_for_real_and_rerun_does_nothing's run")
    started = [r for r in ran if "env" in r]
    assert [r for r in started if r["env"] is None] == []            # every rnmt command is a rule's
    by_env: dict[str, set[str]] = {r["env"]: set() for r in started}
    for r in started:
        by_env[r["env"]].add(r["command"])
    # the guard did hide packages: torch probes for pandas, which the training environment lacks
    assert {"command": "train", "absent": "pandas"} in [{k: r[k] for k in ("command", "absent")}
                                                        for r in ran if "absent" in r]
    assert by_env == {"data": {"synth", "corpus", "bpe", "vocab", "postprocess", "score", "table"},
                      "train": {"train", "translate"}}


def test_every_profile_paces_the_scheduler_and_reruns_killed_jobs_alike(root: Path) -> None:
    """The rate limiter's timespan (profiles/default says why it is 10 s) is set in each profile, and to
    the same value; Snakemake accepts it. Each profile reruns a killed job's incomplete outputs, so that
    the same command resumes training from its checkpoint (README, Reliability)."""
    from snakemake.settings.types import MaxJobsPerTimespan

    files = sorted(root.glob("profiles/*/config.v8+.yaml"))
    profiles = {f.parent.name: yaml.safe_load(f.read_text()) for f in files}
    values = {name: profile.get("max-jobs-per-timespan") for name, profile in profiles.items()}
    assert set(values) == {"default", "local", "slurm"}
    assert len(set(values.values())) == 1, values
    assert MaxJobsPerTimespan.parse_choice(values["default"]).timespan >= 10
    assert {name: profile.get("rerun-incomplete") for name, profile in profiles.items()} == dict.fromkeys(
        profiles, True)


@pytest.mark.workflow
def test_snakemakes_linter_finds_nothing(workdir: Path) -> None:
    """`snakemake --lint`: rules hold only rules, values reach shells as params, paths are relative."""
    r = run_snakemake(["--lint", "--configfile", "tiny.yaml"], workdir)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert "Lints for" not in r.stdout + r.stderr

