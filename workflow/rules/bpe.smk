# Subwords: learn BPE codes on the prepared training text (per side or joint, with the corpus' merges;
# none at word level), apply them to dev/test per side and to the training pairs together (dropping
# pairs over the corpus' subword limit), and build the vocabularies from the segmented training text.


rule learn_bpe:
    input:
        lambda wc: (
            [text_file(wc.corpus, "train", s) for s in SIDES]
            if wc.codeside == "joint"
            else text_file(wc.corpus, "train", wc.codeside)
        ),
    output:
        run_path("bpe/{corpus}/codes.{codeside}"),
    wildcard_constraints:
        codeside="src|tgt|joint",
    params:
        merges=lambda wc: CORPORA[wc.corpus].bpe.merges,
        min_frequency=lambda wc: CORPORA[wc.corpus].bpe.min_frequency,
    resources:
        mem_mb=4000,
    conda:
        "../../envs/data.yaml"
    log:
        run_path("logs/learn_bpe/{corpus}.{codeside}.log"),
    shell:
        "rnmt bpe learn --merges {params.merges:q} --min-frequency {params.min_frequency:q} "
        "--codes {output:q} {input:q} 2> {log:q}"


rule apply_bpe:
    """BPE on a dev or test side."""
    input:
        text=lambda wc: text_file(wc.corpus, wc.split, wc.side),
        codes=lambda wc: bpe_codes(wc.corpus, wc.side),
    output:
        run_path("data/{corpus}/bpe/{split}.{side}"),
    wildcard_constraints:
        split="dev|test",
    params:
        codes=lambda wc: codes_flag(wc.corpus, wc.side),
    conda:
        "../../envs/data.yaml"
    log:
        run_path("logs/apply_bpe/{corpus}.{split}.{side}.log"),
    shell:
        "rnmt bpe apply {params.codes:q} {input.text:q} {output:q} 2> {log:q}"


rule apply_bpe_train:
    """BPE on the training pairs in parallel workers; pairs over the subword limit are dropped
    (reported in bpe.json)."""
    input:
        src=lambda wc: text_file(wc.corpus, "train", "src"),
        tgt=lambda wc: text_file(wc.corpus, "train", "tgt"),
        codes=lambda wc: sorted(set(bpe_codes(wc.corpus, "src") + bpe_codes(wc.corpus, "tgt"))),
    output:
        src=run_path("data/{corpus}/bpe/train.src"),
        tgt=run_path("data/{corpus}/bpe/train.tgt"),
        report=run_path("data/{corpus}/bpe.json"),
    params:
        codes=lambda wc: codes_flag(wc.corpus, "src", "--src-codes") + codes_flag(wc.corpus, "tgt", "--tgt-codes"),
        limit=lambda wc: (
            ["--max-subwords", CORPORA[wc.corpus].preprocess.max_subwords]
            if CORPORA[wc.corpus].preprocess.max_subwords
            else []
        ),
    threads: 4
    conda:
        "../../envs/data.yaml"
    log:
        run_path("logs/apply_bpe_train/{corpus}.log"),
    shell:
        "rnmt corpus segment-train {params.codes:q} {params.limit:q} --workers {threads:q} "
        "--out-src {output.src:q} --out-tgt {output.tgt:q} --report {output.report:q} "
        "{input.src:q} {input.tgt:q} 2> {log:q}"


rule vocab:
    input:
        run_path("data/{corpus}/bpe/train.{side}"),
    output:
        run_path("data/{corpus}/vocab.{side}"),
    params:
        limits=lambda wc: ["--min-count", CORPORA[wc.corpus].vocab.min_count]
        + (["--max-size", CORPORA[wc.corpus].vocab.max_size] if CORPORA[wc.corpus].vocab.max_size else []),
    conda:
        "../../envs/data.yaml"
    log:
        run_path("logs/vocab/{corpus}.{side}.log"),
    shell:
        "rnmt vocab {params.limits:q} {input:q} {output:q} 2> {log:q}"
