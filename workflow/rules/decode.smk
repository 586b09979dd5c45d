# Decoding: beam search on the segmented test source, then BPE removal and detokenization.


rule translate:
    input:
        model=R + "/models/{variant}/seed{seed}/model.pt",
        src=lambda wc: f"{R}/data/{PLAN.variants[wc.variant].corpus}/bpe/{wc.testset}.src",
    output:
        bpe=R + "/translations/{variant}/seed{seed}/{testset}.bpe",
        speed=R + "/translations/{variant}/seed{seed}/{testset}.speed.json",
    params:
        d=lambda wc: PLAN.variants[wc.variant].decode,
    threads: config["decode"].get("threads", 1) or 1
    conda:
        "../../envs/train.yaml"
    log:
        R + "/logs/translate/{variant}.seed{seed}.{testset}.log",
    shell:
        "{RNMT} translate --model {input.model:q} --beam {params.d[beam]} --batch-size {params.d[batch_size]} "
        "--length-penalty {params.d[length_penalty]} --alpha {params.d[alpha]} "
        "--max-len-ratio {params.d[max_len_ratio]} --max-len-extra {params.d[max_len_extra]} "
        "--threads {threads} --metrics {output.speed:q} {input.src:q} {output.bpe:q} 2> {log:q}"


rule postprocess:
    input:
        R + "/translations/{variant}/seed{seed}/{testset}.bpe",
    output:
        tok=R + "/translations/{variant}/seed{seed}/{testset}.tok",
        txt=R + "/translations/{variant}/seed{seed}/{testset}.txt",
    params:
        lang=lambda wc: PLAN.corpus(PLAN.variants[wc.variant].corpus)["tgt_lang"],
    conda:
        "../../envs/data.yaml"
    log:
        R + "/logs/postprocess/{variant}.seed{seed}.{testset}.log",
    shell:
        "{RNMT} postprocess --lang {params.lang} --tok-output {output.tok:q} {input:q} {output.txt:q} 2> {log:q}"
