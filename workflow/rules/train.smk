# Training: one job per (corpus, variant, seed). Settings come from config.yaml, the scale and the
# experiment file's row (rnmt.planning.plan); they are params, so editing a row reruns that row's jobs only.


rule train:
    input:
        unpack(label_inputs),
        train_src=run_path("data/{corpus}/bpe/train.src"),
        train_tgt=run_path("data/{corpus}/bpe/train.tgt"),
        dev_src=run_path("data/{corpus}/bpe/dev.src"),
        dev_tgt=run_path("data/{corpus}/bpe/dev.tgt"),
        dev_ref=run_path("data/{corpus}/tok/dev.tgt"),
        src_vocab=run_path("data/{corpus}/vocab.src"),
        tgt_vocab=run_path("data/{corpus}/vocab.tgt"),
    output:
        model=run_path("models/{corpus}/{variant}/seed{seed}/model.pt"),
        metrics=run_path("models/{corpus}/{variant}/seed{seed}/train.json"),
        log=run_path("models/{corpus}/{variant}/seed{seed}/train.jsonl"),
    params:
        model=lambda wc: variant_of(wc).model_settings(),
        settings=lambda wc: variant_of(wc).train_settings(int(wc.seed)),
        labels=label_flags,
        out_dir=lambda wc, output: str(Path(output.model).parent),
    threads: lambda wc: TRAIN_RES.get("threads") or variant_of(wc).train.get("threads") or 1
    resources:
        mem_mb=TRAIN_RES["mem_mb"],
        runtime=TRAIN_RES["runtime"],
        gpu=TRAIN_RES["gpu"],
    conda:
        "../../envs/train.yaml"
    log:
        run_path("logs/train/{corpus}/{variant}.seed{seed}.log"),
    shell:
        # exec: SLURM signals every process of the job step; a shell in between would die of SIGTERM
        # and take the checkpointing trainer down with it.
        "exec \"$RNMT_PYTHON\" -m rnmt train --gpus {resources.gpu:q} --model {params.model:q} --settings {params.settings:q} "
        "--train-src {input.train_src:q} --train-tgt {input.train_tgt:q} "
        "--dev-src {input.dev_src:q} --dev-tgt {input.dev_tgt:q} --dev-ref {input.dev_ref:q} "
        "--src-vocab {input.src_vocab:q} --tgt-vocab {input.tgt_vocab:q} {params.labels:q} "
        "--out-dir {params.out_dir:q} 2> {log:q}"
