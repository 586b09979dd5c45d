# Subwords: learn BPE codes on the tokenized training text (per side, or joint), apply them, and
# build the vocabularies from the segmented training text.


def bpe_codes(wc):
    side = "joint" if config["bpe"].get("joint", False) else wc.side
    return f"{R}/bpe/{wc.corpus}/codes.{side}"


rule learn_bpe:
    input:
        lambda wc: (
            expand(R + "/data/{corpus}/tok/train.{side}", corpus=wc.corpus, side=SIDES)
            if wc.codeside == "joint"
            else R + f"/data/{wc.corpus}/tok/train.{wc.codeside}"
        ),
    output:
        R + "/bpe/{corpus}/codes.{codeside}",
    wildcard_constraints:
        codeside="src|tgt|joint",
    params:
        merges=config["bpe"]["merges"],
        min_frequency=config["bpe"].get("min_frequency", 2),
    conda:
        "../../envs/data.yaml"
    log:
        R + "/logs/learn_bpe/{corpus}.{codeside}.log",
    shell:
        "{RNMT} bpe learn --merges {params.merges} --min-frequency {params.min_frequency} "
        "--codes {output:q} {input:q} 2> {log:q}"


rule apply_bpe:
    input:
        text=R + "/data/{corpus}/tok/{split}.{side}",
        codes=bpe_codes,
    output:
        R + "/data/{corpus}/bpe/{split}.{side}",
    conda:
        "../../envs/data.yaml"
    log:
        R + "/logs/apply_bpe/{corpus}.{split}.{side}.log",
    shell:
        "{RNMT} bpe apply --codes {input.codes:q} {input.text:q} {output:q} 2> {log:q}"


rule vocab:
    input:
        R + "/data/{corpus}/bpe/train.{side}",
    output:
        R + "/data/{corpus}/vocab.{side}",
    params:
        max_size=lambda wc: (
            f"--max-size {config['vocab']['max_size']}" if config.get("vocab", {}).get("max_size") else ""
        ),
    conda:
        "../../envs/data.yaml"
    log:
        R + "/logs/vocab/{corpus}.{side}.log",
    shell:
        "{RNMT} vocab {params.max_size} {input:q} {output:q} 2> {log:q}"
