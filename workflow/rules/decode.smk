# Decoding: beam search on the segmented test source with one model (member seed<N>) or an ensemble
# (member ens<N>-<M>: the seeds' models together), then BPE removal and detokenization.


rule translate:
    input:
        models=lambda wc: [f"{R}/models/{wc.variant}/seed{s}/model.pt" for s in member_seeds(wc.member)],
        src=lambda wc: f"{R}/data/{PLAN.variants[wc.variant].corpus}/bpe/{wc.testset}.src",
    output:
        bpe=R + "/translations/{variant}/{member}/{testset}.bpe",
        speed=R + "/translations/{variant}/{member}/{testset}.speed.json",
    params:
        d=lambda wc: PLAN.variants[wc.variant].decode,
    threads: config["decode"].get("threads", 1) or 1
    conda:
        "../../envs/train.yaml"
    log:
        R + "/logs/translate/{variant}.{member}.{testset}.log",
    shell:
        "{RNMT} translate --model {input.models:q} --beam {params.d[beam]:q} --batch-size {params.d[batch_size]:q} "
        "--length-penalty {params.d[length_penalty]:q} --alpha {params.d[alpha]:q} "
        "--max-len-ratio {params.d[max_len_ratio]:q} --max-len-extra {params.d[max_len_extra]:q} "
        "--threads {threads:q} --metrics {output.speed:q} {input.src:q} {output.bpe:q} 2> {log:q}"


rule postprocess:
    input:
        R + "/translations/{variant}/{member}/{testset}.bpe",
    output:
        tok=R + "/translations/{variant}/{member}/{testset}.tok",
        txt=R + "/translations/{variant}/{member}/{testset}.txt",
    params:
        lang=lambda wc: PLAN.corpus(PLAN.variants[wc.variant].corpus)["tgt_lang"],
        detruecase=lambda wc: (
            ["--detruecase"] if CORPORA[PLAN.variants[wc.variant].corpus].preprocess.get("truecase") else []
        ),
    conda:
        "../../envs/data.yaml"
    log:
        R + "/logs/postprocess/{variant}.{member}.{testset}.log",
    shell:
        "{RNMT} postprocess --lang {params.lang:q} {params.detruecase:q} --tok-output {output.tok:q} {input:q} {output.txt:q} 2> {log:q}"
