# Corpora: generate (or fetch) raw parallel text, then normalise and Moses-tokenize it.


def corpus_lang(wc):
    c = PLAN.corpus(wc.corpus)
    return c["src_lang"] if wc.side == "src" else c["tgt_lang"]


rule synthetic_corpus:
    """The embedded synthetic language pair, with gold CoNLL-U trees for the source side."""
    output:
        expand(R + "/data/{{corpus}}/raw/{split}.{side}", split=SPLITS, side=SIDES),
        expand(R + "/data/{{corpus}}/raw/{split}.src.conllu", split=SPLITS),
    params:
        args=lambda wc: PLAN.synth_args(wc.corpus),
        out_dir=lambda wc, output: str(Path(output[0]).parent),
    conda:
        "../../envs/data.yaml"
    log:
        R + "/logs/synthetic_corpus/{corpus}.log",
    shell:
        "{RNMT} synth --out-dir {params.out_dir:q} {params.args} 2> {log:q}"


rule tokenize:
    input:
        R + "/data/{corpus}/raw/{split}.{side}",
    output:
        R + "/data/{corpus}/tok/{split}.{side}",
    params:
        lang=corpus_lang,
        flags=" ".join(
            f
            for f, on in [
                ("--no-escape", not config["preprocess"].get("escape", True)),
                ("--no-normalize", not config["preprocess"].get("normalize", True)),
                ("--lowercase", config["preprocess"].get("lowercase", False)),
            ]
            if on
        ),
    conda:
        "../../envs/data.yaml"
    log:
        R + "/logs/tokenize/{corpus}.{split}.{side}.log",
    shell:
        "{RNMT} tokenize --lang {params.lang} {params.flags} {input:q} {output:q} 2> {log:q}"
