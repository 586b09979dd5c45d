# Tables: one CSV (tidy) and one Markdown (the paper's layout) per experiment file.


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
        "{RNMT} table --experiment {input.experiment:q} --run {PLAN.run} --scale {params.scale} "
        "--csv {output.csv:q} --md {output.md:q} {input.metrics:q} 2> {log:q}"
