# Scoring: sacrebleu against the raw reference(s), multi-bleu against the tokenized ones (the extra
# references <file>.refN beside each file: NIST's 4, written by assemble and prepare-text on both sides);
# one metrics.json per (corpus, variant, member, test set) with the training and decoding metrics
# beside. Lower-cased corpora (NIST Zh-En) are scored case-insensitively; a test split merged from
# several test sets (NIST MT02..MT08) also gets BLEU per test set.


def test_manifest(wc):
    return {} if CORPORA[wc.corpus].kind == "synthetic" else {"manifest": f"{R}/data/{wc.corpus}/raw/{wc.testset}.json"}


rule score:
    input:
        unpack(test_manifest),
        hyp=R + "/translations/{corpus}/{variant}/{member}/{testset}.txt",
        hyp_tok=R + "/translations/{corpus}/{variant}/{member}/{testset}.tok",
        speed=R + "/translations/{corpus}/{variant}/{member}/{testset}.speed.json",
        train=lambda wc: [f"{R}/models/{wc.corpus}/{wc.variant}/seed{s}/train.json" for s in member_seeds(wc.member)],
        ref=R + "/data/{corpus}/raw/{testset}.tgt",
        ref_tok=R + "/data/{corpus}/tok/{testset}.tgt",
        src_tok=R + "/data/{corpus}/tok/{testset}.src",
    output:
        R + "/metrics/{corpus}/{variant}/{member}/{testset}.json",
    params:
        lowercase=lambda wc: ["--lowercase"] if CORPORA[wc.corpus].preprocess.get("lowercase") else [],
        manifest=lambda wc, input: ["--manifest", input.manifest] if "manifest" in input.keys() else [],
    conda:
        "../../envs/data.yaml"
    log:
        R + "/logs/score/{corpus}/{variant}.{member}.{testset}.log",
    shell:
        "{RNMT} score --hyp {input.hyp:q} --ref {input.ref:q} --hyp-tok {input.hyp_tok:q} "
        "--ref-tok {input.ref_tok:q} --src {input.src_tok:q} {params.lowercase:q} {params.manifest:q} "
        "--train-metrics {input.train:q} --decode-metrics {input.speed:q} "
        "--meta variant={wildcards.variant:q} member={wildcards.member:q} testset={wildcards.testset:q} "
        "corpus={wildcards.corpus:q} run={PLAN.run:q} scale={PLAN.scale:q} --output {output:q} 2> {log:q}"


rule gates:
    """ATR section 5.1 / Figure 3: mean input and forget gate per target position on the test set."""
    input:
        model=R + "/models/{corpus}/{variant}/seed{seed}/model.pt",
        src=R + "/data/{corpus}/bpe/{testset}.src",
        tgt=R + "/data/{corpus}/bpe/{testset}.tgt",
    output:
        R + "/analysis/{corpus}/{variant}/seed{seed}/gates.{testset}.json",
    conda:
        "../../envs/train.yaml"
    log:
        R + "/logs/gates/{corpus}/{variant}.seed{seed}.{testset}.log",
    shell:
        "{RNMT} gates --model {input.model:q} --src {input.src:q} --tgt {input.tgt:q} --output {output:q} 2> {log:q}"
