# Tables: one CSV (tidy) and one Markdown (the paper's layout) per experiment file; learning curves.


rule table:
    input:
        experiment=EXPERIMENTS / "{table}.yaml",
        metrics=lambda wc: PLAN.metrics_paths(wc.table),
    output:
        csv=R + "/tables/{table}.csv",
        md=R + "/tables/{table}.md",
    params:
        scale=config["scale"],
    conda:
        "../../envs/data.yaml"
    log:
        R + "/logs/table/{table}.log",
    shell:
        "{RNMT} table --experiment {input.experiment:q} --run {PLAN.run:q} --scale {params.scale:q} "
        "--csv {output.csv:q} --md {output.md:q} {input.metrics:q} 2> {log:q}"


rule learning_curve:
    input:
        R + "/models/{variant}/seed{seed}/train.jsonl",
    output:
        R + "/plots/{variant}/seed{seed}/curve.png",
    conda:
        "../../envs/data.yaml"
    params:
        title=lambda wc: f"{wc.variant} seed {wc.seed}",
    log:
        R + "/logs/learning_curve/{variant}.seed{seed}.log",
    shell:
        "{RNMT} plot-curve --title {params.title:q} {input:q} {output:q} 2> {log:q}"
