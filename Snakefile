"""rnmt: recurrent NMT papers from raw corpora to their tables.

    snakemake --cores all                                  # every table in config.yaml (demo scale)
    snakemake --cores all results/demo/tables/atr-table2.csv       # one table and what it needs
    snakemake -n --config scale=paper run=paper            # list a scale's jobs without running them
    snakemake --report report.html                         # what the run has built, in one HTML page
"""

from snakemake.utils import min_version

min_version("9.0")


configfile: workflow.source_path("config.yaml")


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"


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


onstart:
    # a build (never a dry run) records the run's config for the commands after it (rnmt.planning.runconfig)
    if workflow.is_main_process:
        runconfig.update_record(R, RUN_CONFIG)


onsuccess:
    cancel_rescheduling_timers()


onerror:
    cancel_rescheduling_timers()


rule all:
    default_target: True
    input:
        report_targets() if REPORT_ONLY else [
            PLAN.table_targets(),
            PLAN.plot_targets(),
            [run_path("runs.csv")] if PLAN.all_metrics_paths() else [],
        ],
