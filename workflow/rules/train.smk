# Training: one job per (variant, seed). Settings come from config.yaml overlaid with the row's own
# entries in the experiment file; they are params, so editing a row reruns that row's jobs only.


def corpus_file(kind, split_or_side, side=None):
    def f(wc):
        corpus = PLAN.variants[wc.variant].corpus
        if kind == "vocab":
            return f"{R}/data/{corpus}/vocab.{split_or_side}"
        return f"{R}/data/{corpus}/bpe/{split_or_side}.{side}"

    return f


rule train:
    input:
        train_src=corpus_file("bpe", "train", "src"),
        train_tgt=corpus_file("bpe", "train", "tgt"),
        dev_src=corpus_file("bpe", "dev", "src"),
        dev_tgt=corpus_file("bpe", "dev", "tgt"),
        src_vocab=corpus_file("vocab", "src"),
        tgt_vocab=corpus_file("vocab", "tgt"),
    output:
        model=R + "/models/{variant}/seed{seed}/model.pt",
        metrics=R + "/models/{variant}/seed{seed}/train.json",
        log=R + "/models/{variant}/seed{seed}/train.jsonl",
    params:
        model=lambda wc: PLAN.variants[wc.variant].model_settings(),
        settings=lambda wc: PLAN.variants[wc.variant].train_settings(int(wc.seed)),
        out_dir=lambda wc, output: str(Path(output.model).parent),
    threads: config["train"].get("threads", 1) or 1
    resources:
        mem_mb=4000,
        runtime=24 * 60,
        gpu=0,
    conda:
        "../../envs/train.yaml"
    log:
        R + "/logs/train/{variant}.seed{seed}.log",
    shell:
        # exec: SLURM signals every process of the job step; a shell in between would die of SIGTERM
        # and take the checkpointing trainer down with it.
        "exec {RNMT} train --gpus {resources.gpu} --model {params.model:q} --settings {params.settings:q} "
        "--train-src {input.train_src:q} --train-tgt {input.train_tgt:q} "
        "--dev-src {input.dev_src:q} --dev-tgt {input.dev_tgt:q} "
        "--src-vocab {input.src_vocab:q} --tgt-vocab {input.tgt_vocab:q} "
        "--out-dir {params.out_dir:q} 2> {log:q}"
