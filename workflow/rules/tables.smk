# Tables: per experiment file a tidy CSV, and the table laid out like the paper's as Markdown, LaTeX and
# HTML (what `snakemake --report` shows); a PNG and a PDF where the paper had a figure; runs.csv with
# every run's metrics and settings; learning curves.


rule table:
    input:
        experiment=EXPERIMENTS / "{table}.yaml",
        metrics=lambda wc: PLAN.metrics_paths(wc.table),
        gates=lambda wc: PLAN.gates_paths(wc.table),
        cells=lambda wc: PLAN.cell_count_paths(wc.table),
        data_reports=lambda wc: PLAN.data_report_paths(wc.table),
    output:
        html=report(run_path("tables/{table}.html"), caption="../report/table.rst", category="Tables",
                    labels={"table": "{table}"}),
        csv=report(run_path("tables/{table}.csv"), caption="../report/table.rst", category="Tables as tidy CSV",
                   labels={"table": "{table}"}),
        md=run_path("tables/{table}.md"),
        tex=run_path("tables/{table}.tex"),
        claims=run_path("tables/{table}.claims.csv"),
    params:
        caption=lambda wc: report_caption(PLAN.table(wc.table)),
        rows="all",
        expected=lambda wc: json.dumps(table_expected(PLAN, wc.table), sort_keys=True),
        **TABLE_PARAMS,
    conda:
        "../../envs/data.yaml"
    log:
        run_path("logs/table/{table}.log"),
    shell:
        "rnmt table --rows {params.rows:q} --experiment {input.experiment:q} --run {params.run:q} --scale {params.scale:q} "
        "--corpus={params.corpus:q} --expected={params.expected:q} --max-seeds {params.max_seeds:q} --seeds {params.seeds:q} --scale-note={params.scale_note:q} --csv {output.csv:q} --md {output.md:q} --tex {output.tex:q} "
        "--html {output.html:q} --claims {output.claims:q} "
        "--gates {input.gates:q} --cells {input.cells:q} --data-reports {input.data_reports:q} "
        "-- {input.metrics:q} 2> {log:q}"


use rule table as partial_table with:
    # A table of the rows whose models and decodings have finished, the others marked (a run cut short by a
    # GPU loan or a session ending): results/<run>/tables/partial/<table>.md. It asks only for the files
    # that exist and were made with the run's settings now, so it starts no row that has not finished (nor
    # retrains one made with other settings: its row says what changed, rnmt.planning.current).
    input:
        experiment=EXPERIMENTS / "{table}.yaml",
        metrics=lambda wc: current(wc.table, PLAN.metrics_paths(wc.table)),
        gates=lambda wc: current(wc.table, PLAN.gates_paths(wc.table)),
        cells=lambda wc: PLAN.cell_count_paths(wc.table),
        data_reports=lambda wc: finished(PLAN.data_report_paths(wc.table)),
    output:
        html=run_path("tables/partial/{table}.html"),
        csv=run_path("tables/partial/{table}.csv"),
        md=run_path("tables/partial/{table}.md"),
        tex=run_path("tables/partial/{table}.tex"),
        claims=run_path("tables/partial/{table}.claims.csv"),
    params:
        rows="finished",
        **TABLE_PARAMS,
    log:
        run_path("logs/partial_table/{table}.log"),


rule figure:
    """ATR Figure 3 (gates by position), DTMT Figure 3 (BLEU by source length), UD Figure 2 (cost),
    SR-NMT Figure 3 (perplexity against time)."""
    input:
        experiment=EXPERIMENTS / "{table}.yaml",
        csv=run_path("tables/{table}.csv"),
        metrics=lambda wc: PLAN.metrics_paths(wc.table),
        gates=lambda wc: PLAN.gates_paths(wc.table),
        logs=lambda wc: PLAN.train_logs(wc.table)
        if (PLAN.table(wc.table).figure or {}).get("kind") in ("cost", "perplexity") else [],
    output:
        png=report(run_path("figures/{table}.png"), caption="../report/figure.rst", category="Figures",
                   labels={"figure": "{table}", "format": "PNG"}),
        pdf=report(run_path("figures/{table}.pdf"), caption="../report/figure.rst", category="Figures",
                   labels={"figure": "{table}", "format": "PDF"}),
    params:
        caption=lambda wc: report_caption(PLAN.table(wc.table)),
        max_seeds=PLAN.max_seeds or 0,
        seeds=PLAN.seeds or 0,
        scale=PLAN.scale,
        code=CODE_DIGEST,
    conda:
        "../../envs/data.yaml"
    log:
        run_path("logs/figure/{table}.log"),
    shell:
        "rnmt figure --experiment {input.experiment:q} --scale {params.scale:q} --max-seeds {params.max_seeds:q} --seeds {params.seeds:q} --output {output.png:q} "
        "--metrics {input.metrics:q} --gates {input.gates:q} --logs {input.logs:q} 2> {log:q}"


rule runs:
    """Every trained model and decoding of this run, one row each, with every metric and setting."""
    input:
        PLAN.all_metrics_paths(),
    output:
        report(run_path("runs.csv"), caption="../report/runs.rst", category="Runs"),
    params:
        code=CODE_DIGEST,
    conda:
        "../../envs/data.yaml"
    log:
        run_path("logs/runs.log"),
    shell:
        "rnmt runs --output {output:q} {input:q} 2> {log:q}"


rule table_curves:
    """Learning curves of a table's trained rows in one figure (dev perplexity and BLEU by minutes)."""
    input:
        experiment=EXPERIMENTS / "{table}.yaml",
        logs=lambda wc: PLAN.train_logs(wc.table),
    output:
        png=report(run_path("plots/{table}.curves.png"), caption="../report/curves.rst", category="Learning curves",
                   labels={"table": "{table}", "format": "PNG"}),
        pdf=report(run_path("plots/{table}.curves.pdf"), caption="../report/curves.rst", category="Learning curves",
                   labels={"table": "{table}", "format": "PDF"}),
    params:
        title=lambda wc: rst_text(PLAN.table(wc.table).title),
        max_seeds=PLAN.max_seeds or 0,
        seeds=PLAN.seeds or 0,
        code=CODE_DIGEST,
    conda:
        "../../envs/data.yaml"
    log:
        run_path("logs/table_curves/{table}.log"),
    shell:
        "rnmt figure --curves --experiment {input.experiment:q} --max-seeds {params.max_seeds:q} --seeds {params.seeds:q} --output {output.png:q} "
        "--logs {input.logs:q} 2> {log:q}"


rule learning_curve:
    """One model's learning curve (a target on demand: results/<run>/plots/<corpus>/<variant>/seed<N>/curve.png)."""
    input:
        run_path("models/{corpus}/{variant}/seed{seed}/train.jsonl"),
    output:
        png=run_path("plots/{corpus}/{variant}/seed{seed}/curve.png"),
        pdf=run_path("plots/{corpus}/{variant}/seed{seed}/curve.pdf"),
    conda:
        "../../envs/data.yaml"
    params:
        title=lambda wc: f"{wc.variant} seed {wc.seed}",
        code=CODE_DIGEST,
    log:
        run_path("logs/learning_curve/{corpus}/{variant}.seed{seed}.log"),
    shell:
        "rnmt plot-curve --title {params.title:q} {input:q} {output.png:q} 2> {log:q}"
