# Scoring: sacrebleu against the raw reference, tokenized BLEU against the tokenized reference;
# one metrics.json per (variant, seed, test set) with the training and decoding metrics beside.


rule score:
    input:
        hyp=R + "/translations/{variant}/seed{seed}/{testset}.txt",
        hyp_tok=R + "/translations/{variant}/seed{seed}/{testset}.tok",
        speed=R + "/translations/{variant}/seed{seed}/{testset}.speed.json",
        train=R + "/models/{variant}/seed{seed}/train.json",
        ref=lambda wc: f"{R}/data/{PLAN.variants[wc.variant].corpus}/raw/{wc.testset}.tgt",
        ref_tok=lambda wc: f"{R}/data/{PLAN.variants[wc.variant].corpus}/tok/{wc.testset}.tgt",
    output:
        R + "/metrics/{variant}/seed{seed}/{testset}.json",
    params:
        corpus=lambda wc: PLAN.variants[wc.variant].corpus,
    conda:
        "../../envs/data.yaml"
    log:
        R + "/logs/score/{variant}.seed{seed}.{testset}.log",
    shell:
        "{RNMT} score --hyp {input.hyp:q} --ref {input.ref:q} --hyp-tok {input.hyp_tok:q} "
        "--ref-tok {input.ref_tok:q} --train-metrics {input.train:q} --decode-metrics {input.speed:q} "
        "--meta variant={wildcards.variant} seed={wildcards.seed} testset={wildcards.testset} "
        "corpus={params.corpus} run={PLAN.run} --output {output:q} 2> {log:q}"
