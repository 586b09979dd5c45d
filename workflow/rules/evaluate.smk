# Scoring: sacrebleu against the raw reference, tokenized BLEU against the tokenized reference;
# one metrics.json per (variant, member, test set) with the training and decoding metrics beside.


rule score:
    input:
        hyp=R + "/translations/{variant}/{member}/{testset}.txt",
        hyp_tok=R + "/translations/{variant}/{member}/{testset}.tok",
        speed=R + "/translations/{variant}/{member}/{testset}.speed.json",
        train=lambda wc: [f"{R}/models/{wc.variant}/seed{s}/train.json" for s in member_seeds(wc.member)],
        ref=lambda wc: f"{R}/data/{PLAN.variants[wc.variant].corpus}/raw/{wc.testset}.tgt",
        ref_tok=lambda wc: f"{R}/data/{PLAN.variants[wc.variant].corpus}/tok/{wc.testset}.tgt",
        src_tok=lambda wc: f"{R}/data/{PLAN.variants[wc.variant].corpus}/tok/{wc.testset}.src",
    output:
        R + "/metrics/{variant}/{member}/{testset}.json",
    params:
        corpus=lambda wc: PLAN.variants[wc.variant].corpus,
    conda:
        "../../envs/data.yaml"
    log:
        R + "/logs/score/{variant}.{member}.{testset}.log",
    shell:
        "{RNMT} score --hyp {input.hyp:q} --ref {input.ref:q} --hyp-tok {input.hyp_tok:q} "
        "--ref-tok {input.ref_tok:q} --src {input.src_tok:q} --train-metrics {input.train:q} --decode-metrics {input.speed:q} "
        "--meta variant={wildcards.variant:q} member={wildcards.member:q} testset={wildcards.testset:q} "
        "corpus={params.corpus:q} run={PLAN.run:q} --output {output:q} 2> {log:q}"
