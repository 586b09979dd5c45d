"""rnmt: recurrent NMT papers from raw corpora to their tables.

    snakemake --cores all                                  # every table in config.yaml (demo scale)
    snakemake --cores all results/demo/tables/atr-table2.csv       # one table and what it needs
    snakemake -n --config scale=paper run=paper            # list a scale's jobs without running them
    snakemake --report report.html                         # every table and figure in one HTML page
"""

import shlex
import sys
import threading
from pathlib import Path

from snakemake.settings.types import DeploymentMethod
from snakemake.utils import min_version, update_config

from rnmt.config import typed_overrides
from rnmt.io import InputError
from rnmt.plan import SIDES, SPLITS, Plan, member_seeds

min_version("9.0")


configfile: workflow.source_path("config.yaml")


report: "workflow/report/workflow.rst"


# `--config key='{nested: 1}'` reaches Snakemake's config with its nested values as strings.
update_config(config, typed_overrides(workflow.config_settings.config))

# Validates config.yaml (and --config/--configfile overrides), the experiment files and every row's
# settings before any job starts; a bad key or value stops here with a message naming it. The main
# process also builds every variant's model on PyTorch's meta device (no memory), so settings that no
# architecture accepts together stop here too rather than in a training job.
try:
    PLAN = Plan(config, Path(workflow.basedir))
    if workflow.is_main_process:
        PLAN.check_models()
except InputError as e:
    sys.exit(f"rnmt: error: {e}")
R = PLAN.results
EXPERIMENTS = PLAN.experiments_dir

# Rules run the rnmt CLI from this checkout's src/, with the Python of the environment they run in:
# the conda environment of the rule under --sdm conda, otherwise the Python running Snakemake.
if DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method:
    RNMT = "python -m rnmt"
else:
    RNMT = f"{shlex.quote(sys.executable)} -m rnmt"
SRC = shlex.quote(str(Path(workflow.basedir) / "src"))
# (braces doubled twice: once for this f-string, once for Snakemake's formatting of shell commands)
shell.prefix(f"set -euo pipefail; export PYTHONPATH={SRC}${{{{PYTHONPATH:+:$PYTHONPATH}}}}; ")

wildcard_constraints:
    corpus=r"[A-Za-z0-9_-]+",
    variant=r"[a-z0-9-]+",
    seed=r"\d+",
    member=r"seed\d+|ens\d+(-\d+)+",
    split="|".join(SPLITS),
    side="|".join(SIDES),
    testset="dev|test",
    table=r"[a-z0-9-]+",


include: "workflow/rules/data.smk"
include: "workflow/rules/bpe.smk"
include: "workflow/rules/parse.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/decode.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/tables.smk"


def cancel_rescheduling_timers():
    """Snakemake's job rate limiter leaves a timer armed after the last job (profiles/default explains
    why its timespan is 10 s there); Python waits for it at exit, so a finished run would linger."""
    for thread in threading.enumerate():
        if isinstance(thread, threading.Timer):
            thread.cancel()


onsuccess:
    cancel_rescheduling_timers()


onerror:
    cancel_rescheduling_timers()


rule all:
    default_target: True
    input:
        PLAN.table_targets(),
        PLAN.plot_targets(),
        [f"{R}/runs.csv"] if PLAN.all_metrics_paths() else [],
