# Dependency labels for the source side (the UD paper's factor). Two label sources per corpus:
#   gold:   the corpus' own trees (the synthetic generator's CoNLL-U, or CoNLL-U/CoNLL-X files named in
#           the corpus entry as `conllu: {train: ..., dev: ..., test: ...}`), aligned with tok/<split>.src;
#   stanza: tok/<split>.src parsed by stanza (pretokenized, POS + depparse) in parse.chunks parallel jobs.
# Either way: labels/<source>/<split>.conllu, <split>.bpe.lab (one label per subword of bpe/<split>.src)
# and vocab.lab. stanza's models come from parse.model_dir: downloaded by stanza's own downloader
# (parse.models: download, needs network), used as they are (local), or trained offline by rnmt on a
# corpus' gold trees with stanza's training code (train; the demo does this).


rule stanza_models:
    """stanza's models in parse.model_dir: fetched with stanza's own downloader (parse.models: download;
    needs network, run it once on a connected node), or a small POS tagger and parser trained offline on
    parse.train_corpus' gold trees with stanza's training code (parse.models: train)."""
    input:
        unpack(stanza_models_inputs),
    output:
        os.path.join(PARSE["model_dir"], "rnmt-{lang}.json"),
    wildcard_constraints:
        lang=r"[a-z]{2,3}",
    params:
        command=stanza_models_command,
    threads: 1
    resources:
        downloads=1,
    conda:
        "../../envs/parse.yaml"
    log:
        run_path("logs/stanza_models/{lang}.log"),
    shell:
        "OMP_NUM_THREADS={threads:q} rnmt {params.command:q} 2> {log:q}"


rule parse_chunk:
    """stanza POS tagging and dependency parsing of one chunk of the tokenized source (pretokenized)."""
    input:
        text=run_path("data/{corpus}/tok/{split}.src"),
        models=parse_models,
    output:
        temp(run_path("data/{corpus}/labels/stanza/chunks/{split}.{chunk}.conllu")),
    wildcard_constraints:
        chunk=r"\d+",
    params:
        lang=lambda wc: parse_lang(wc.corpus),
        model_dir=PARSE["model_dir"],
        chunks=PARSE["chunks"],
        batch_size=PARSE["batch_size"],
        device=PARSE["device"],
    threads: 1
    resources:
        mem_mb=4000,
    conda:
        "../../envs/parse.yaml"
    log:
        run_path("logs/parse_chunk/{corpus}.{split}.{chunk}.log"),
    shell:
        "OMP_NUM_THREADS={threads:q} rnmt parse run --lang {params.lang:q} --model-dir {params.model_dir:q} "
        "--chunk {wildcards.chunk:q} --chunks {params.chunks:q} --device {params.device:q} "
        "--batch-size {params.batch_size:q} {input.text:q} {output:q} 2> {log:q}"


rule parse_merge:
    input:
        lambda wc: [
            run_path(f"data/{wc.corpus}/labels/stanza/chunks/{wc.split}.{k}.conllu")
            for k in range(int(PARSE["chunks"]))
        ],
    output:
        run_path("data/{corpus}/labels/stanza/{split}.conllu"),
    conda:
        "../../envs/parse.yaml"
    log:
        run_path("logs/parse_merge/{corpus}.{split}.log"),
    shell:
        "rnmt parse merge --output {output:q} {input:q} 2> {log:q}"


rule gold_labels:
    """The corpus' own trees, aligned with its tokenized source (trees of pairs lost to cleaning skipped)."""
    input:
        conllu=lambda wc: gold_conllu(wc.corpus, wc.split),
        text=run_path("data/{corpus}/tok/{split}.src"),
    output:
        run_path("data/{corpus}/labels/gold/{split}.conllu"),
    conda:
        "../../envs/data.yaml"
    log:
        run_path("logs/gold_labels/{corpus}.{split}.log"),
    shell:
        "rnmt labels gold --conllu {input.conllu:q} --text {input.text:q} --output {output:q} 2> {log:q}"


rule project_labels:
    """One label per subword of the BPE source; every subword of a word carries the word's label."""
    input:
        conllu=run_path("data/{corpus}/labels/{source}/{split}.conllu"),
        bpe=run_path("data/{corpus}/bpe/{split}.src"),
    output:
        run_path("data/{corpus}/labels/{source}/{split}.bpe.lab"),
    wildcard_constraints:
        source="gold|stanza",
    params:
        subtypes=["--subtypes"] if PARSE["subtypes"] else [],
    conda:
        "../../envs/data.yaml"
    log:
        run_path("logs/project_labels/{corpus}.{source}.{split}.log"),
    shell:
        "rnmt labels project --conllu {input.conllu:q} --bpe {input.bpe:q} {params.subtypes:q} "
        "--output {output:q} 2> {log:q}"


rule label_vocab:
    input:
        run_path("data/{corpus}/labels/{source}/train.bpe.lab"),
    output:
        run_path("data/{corpus}/labels/{source}/vocab.lab"),
    wildcard_constraints:
        source="gold|stanza",
    conda:
        "../../envs/data.yaml"
    log:
        run_path("logs/label_vocab/{corpus}.{source}.log"),
    shell:
        "rnmt labels vocab {input:q} {output:q} 2> {log:q}"
