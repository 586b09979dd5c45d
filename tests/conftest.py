import os
import subprocess
import sys
import tempfile
from collections import Counter
from functools import cache
from pathlib import Path

import pytest
import torch

import envblock

ROOT = Path(__file__).resolve().parents[1]
# No test measures which implementation is fastest (rnmt.machine.fastpath): every path gives the same numbers and
# a test must not depend on the machine's speed (tests/test_fastpath.py tests the choice with a given clock;
# RNMT_FASTPATH=measure in the environment runs the suite measured).
os.environ.setdefault("RNMT_FASTPATH", "default")
# Whatever a test does measure is kept in a file of the test session's, never in the user's ~/.cache/rnmt.
os.environ["RNMT_FASTPATH_CACHE"] = str(Path(tempfile.mkdtemp(prefix="rnmt-fastpath-")) / "fastpath.json")
os.environ["RNMT_MODEL_CATALOG"] = tempfile.mkdtemp(prefix="rnmt-models-")
# What a process that a test starts with an environment of its own must still get.
SESSION_ENV = {k: os.environ[k] for k in ("RNMT_FASTPATH", "RNMT_FASTPATH_CACHE", "RNMT_MODEL_CATALOG")}


# The files that take minutes (a Snakemake build, a cluster, a retrained demo), longest first. Handed out
# first, they run beside the many short files rather than after them: `make test` runs xdist with
# --no-loadscope-reorder, whose default would order files by their number of tests and so leave these
# last (the suite then took 22 min 35 s, its SLURM file starting at minute 20). Durations in
# benchmarks/README.md.
LONG_FIRST = ("test_demo_findings.py", "test_tables.py", "test_slurm.py", "faults/test_finished_run_faults.py",
              "test_corpora_workflow.py", "test_workflow.py", "test_config.py", "faults/test_training_faults.py",
              "faults/test_rerun_workflow.py", "test_ud_stanza.py", "test_train.py", "test_multigpu.py",
              "test_bench.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    tests = ROOT / "tests"

    def key(item: pytest.Item) -> int:
        path = Path(str(item.fspath))
        return rank.get(path.relative_to(tests).as_posix(), len(rank)) if path.is_relative_to(tests) else len(rank)

    items.sort(key=key)            # stable: every file keeps its own order, the others theirs


@cache
def _guard_plan() -> Path:
    return envblock.plan_file(Path(tempfile.mkdtemp(prefix="rnmt-envguard-")))


def guard_log(cwd: Path) -> Path:
    return cwd / ".snakemake/envguard.jsonl"


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny tokenized synthetic corpus (70 training, 20 dev pairs) with its vocabularies."""
    from rnmt.data.synthetic import generate_pairs
    from rnmt.data.tokenize import tokenize
    from rnmt.data.vocab import Vocab
    from rnmt.io import write_lines

    d = tmp_path_factory.mktemp("corpus")
    pairs = list(generate_pairs(9, 90, max_words=10))
    paths = {}
    for split, part in (("train", pairs[:70]), ("dev", pairs[70:])):
        for side, texts in (("src", [p.source_text for p in part]), ("tgt", [p.target_text for p in part])):
            paths[f"{split}_{side}"] = d / f"{split}.{side}"
            write_lines(paths[f"{split}_{side}"], [tokenize(t, "en") for t in texts])
    for side in ("src", "tgt"):
        paths[f"{side}_vocab"] = d / f"vocab.{side}"
        Vocab.build(paths[f"train_{side}"].read_text().splitlines()).save(paths[f"{side}_vocab"])
    return paths


def run_snakemake(args: list[str], cwd: Path, timeout: int = 900,
                  extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run this repository's Snakefile from `cwd` with the test's Python environment on PATH. Every job's
    rnmt command runs under the import guard (tests/envguard): only its rule's conda environment's packages
    import, as under `snakemake --sdm conda`; what each job ran with is logged to `guard_log(cwd)`."""
    env = {**os.environ, **envblock.guard_env(_guard_plan(), guard_log(cwd)), **(extra_env or {})}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def root() -> Path:
    return ROOT


def jobs(dry_run_output: str) -> Counter[str]:
    """Job counts from the 'Job stats' block of a dry run."""
    lines = dry_run_output.split("Job stats:")[1].splitlines()
    counts: Counter[str] = Counter()
    for line in lines[3:]:
        parts = line.split()
        if len(parts) != 2 or parts[0] == "total":
            break
        counts[parts[0]] = int(parts[1])
    return counts


def greedy_loop(model, src, mask, steps: int) -> list[int]:
    """Greedy decoding of one padded sentence written out step by step (a reference for beam search)."""
    from rnmt.data.vocab import BOS_ID, EOS_ID

    state = model.start(src, mask)
    prev, out = torch.tensor([BOS_ID]), []
    for _ in range(steps):
        logp, state = model.step(prev, state)
        tok = int(logp.argmax(-1))
        if tok == EOS_ID:
            break
        out.append(tok)
        prev = torch.tensor([tok])
    return out
