# Scoring: sacrebleu against the raw reference(s), multi-bleu against the tokenized ones (the extra
# references <file>.refN beside each file: NIST's 4, written by assemble and prepare-text on both sides);
# one metrics.json per (corpus, variant, member, test set) with the training and decoding metrics
# beside. Lower-cased corpora (NIST Zh-En) are scored case-insensitively; a test split merged from
# several test sets (NIST MT02..MT08) also gets BLEU per test set.


rule score:
    input:
        unpack(test_manifest),
        hyp=run_path("translations/{corpus}/{variant}/{member}/{testset}.txt"),
        hyp_tok=run_path("translations/{corpus}/{variant}/{member}/{testset}.tok"),
        speed=run_path("translations/{corpus}/{variant}/{member}/{testset}.speed.json"),
        train=member_files("train.json"),
        ref=run_path("data/{corpus}/raw/{testset}.tgt"),
        ref_tok=run_path("data/{corpus}/tok/{testset}.tgt"),
        src_tok=run_path("data/{corpus}/tok/{testset}.src"),
    output:
        run_path("metrics/{corpus}/{variant}/{member}/{testset}.json"),
    params:
        lowercase=lambda wc: ["--lowercase"] if CORPORA[wc.corpus].preprocess.lowercase else [],
        manifest=lambda wc, input: ["--manifest", input.manifest] if "manifest" in input.keys() else [],
        run=PLAN.run,
        scale=PLAN.scale,
        override=json.dumps(PLAN.config.get("override") or {}, sort_keys=True),
        code=SCORER_DIGEST,
    conda:
        "../../envs/data.yaml"
    log:
        run_path("logs/score/{corpus}/{variant}.{member}.{testset}.log"),
    shell:
        "rnmt score --hyp {input.hyp:q} --ref {input.ref:q} --hyp-tok {input.hyp_tok:q} "
        "--ref-tok {input.ref_tok:q} --src {input.src_tok:q} {params.lowercase:q} {params.manifest:q} "
        "--train-metrics {input.train:q} --decode-metrics {input.speed:q} "
        "--meta variant={wildcards.variant:q} member={wildcards.member:q} testset={wildcards.testset:q} "
        "corpus={wildcards.corpus:q} run={params.run:q} scale={params.scale:q} --override {params.override:q} "
        "--output {output:q} 2> {log:q}"


rule gates:
    """ATR section 5.1 / Figure 3: mean input and forget gate per target position on the test set."""
    input:
        model=run_path("models/{corpus}/{variant}/seed{seed}/model.pt"),
        src=run_path("data/{corpus}/bpe/{testset}.src"),
        tgt=run_path("data/{corpus}/bpe/{testset}.tgt"),
    output:
        run_path("analysis/{corpus}/{variant}/seed{seed}/gates.{testset}.json"),
    params:
        code=GATES_DIGEST,
    conda:
        "../../envs/train.yaml"
    log:
        run_path("logs/gates/{corpus}/{variant}.seed{seed}.{testset}.log"),
    shell:
        "rnmt gates --model {input.model:q} --src {input.src:q} --tgt {input.tgt:q} --output {output:q} 2> {log:q}"


rule cell_counts:
    """ATR Table 1: a cell's weight matrices and matrix transformations per step, counted on the module."""
    output:
        run_path("analysis/cells/{cell}.json"),
    wildcard_constraints:
        cell=r"[\w-]+",
    params:
        code=CODE_DIGEST,
    conda:
        "../../envs/train.yaml"
    log:
        run_path("logs/cell_counts/{cell}.log"),
    shell:
        "rnmt cell-counts --cell {wildcards.cell:q} --output {output:q} 2> {log:q}"
