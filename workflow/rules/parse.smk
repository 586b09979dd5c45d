# Dependency labels for the source side (the UD paper's factor). Two label sources per corpus:
#   gold:   the corpus' own trees (the synthetic generator's CoNLL-U, or CoNLL-U/CoNLL-X files named in
#           the corpus entry as `conllu: {train: ..., dev: ..., test: ...}`), aligned with tok/<split>.src;
#   stanza: tok/<split>.src parsed by stanza (pretokenized, POS + depparse) in parse.chunks parallel jobs.
# Either way: labels/<source>/<split>.conllu, <split>.bpe.lab (one label per subword of bpe/<split>.src)
# and vocab.lab. stanza's models come from parse.model_dir: downloaded by stanza's own downloader
# (parse.models: download, needs network), used as they are (local), or trained offline by rnmt on a
# corpus' gold trees with stanza's training code (train; the demo does this).

from rnmt.parse.models import manifest_path

PARSE = {
    "models": "local",
    "model_dir": None,
    "package": "default",
    "resources_url": None,
    "lang": None,
    "chunks": 2,
    "batch_size": 1000,
    "device": "cpu",
    "subtypes": False,
    "train_corpus": None,
    "train_steps_pos": 100,
    "train_steps_depparse": 80,
    **(config.get("parse") or {}),
    **(PLAN.scale_settings.get("parse") or {}),        # e.g. small/paper: stanza's real English models
}
PARSE["model_dir"] = PARSE["model_dir"] or f"{R}/stanza"      # null: results/<run>/stanza


def parse_lang(corpus):
    return PARSE["lang"] or CORPORA[corpus].src_lang


def gold_conllu(corpus, split):
    """The gold tree files of a corpus split (the generator's, or the corpus entry's `conllu:`)."""
    if CORPORA[corpus].kind == "synthetic":
        return [f"{R}/data/{corpus}/raw/{split}.src.conllu"]
    entry = PLAN.corpora_config.get(corpus, {}).get("conllu") or {}
    files = entry.get(split)
    if not files:
        raise InputError(
            f"config corpora.{corpus}: gold labels need the split's parsed source as `conllu: {{{split}: "
            f"<file.conllu>}}` (CoNLL-U or CoNLL-X), or use the stanza label source"
        )
    files = [files] if isinstance(files, str) else list(files)
    source = PLAN.corpora_config.get(corpus, {}).get("source", "")
    folder = Path(source[len("local:"):]) if source.startswith("local:") else Path(".")
    return [str(folder / f) for f in files]


def parse_models(wc):
    """The model manifest a parse job waits for ([] for parse.models: local, checked when the job runs)."""
    if PARSE["models"] == "local":
        return []
    return [str(manifest_path(PARSE["model_dir"], parse_lang(wc.corpus)))]


def stanza_models_inputs(wc):
    """The gold trees that train the models (parse.models: train); nothing to download from."""
    if PARSE["models"] != "train":
        return {}
    if not PARSE["train_corpus"]:
        raise InputError("config parse.models: train needs parse.train_corpus, a corpus of this config with gold trees")
    return {
        "train": gold_conllu(PARSE["train_corpus"], "train"),
        "dev": gold_conllu(PARSE["train_corpus"], "dev"),
    }


def stanza_models_command(wc, input):
    """The `rnmt parse ...` arguments (a list: the rule quotes each)."""
    d = str(PARSE["model_dir"])
    if PARSE["models"] == "download":
        mirror = ["--resources-url", PARSE["resources_url"]] if PARSE["resources_url"] else []
        return ["parse", "download", "--lang", wc.lang, "--package", PARSE["package"], "--model-dir", d, *mirror]
    return [
        "parse", "train-models", "--lang", wc.lang, "--train", input.train[0], "--dev", input.dev[0],
        "--model-dir", d, "--steps-pos", str(PARSE["train_steps_pos"]),
        "--steps-depparse", str(PARSE["train_steps_depparse"]),
    ]


rule stanza_models:
    """stanza's models in parse.model_dir: fetched with stanza's own downloader (parse.models: download;
    needs network, run it once on a connected node), or a small POS tagger and parser trained offline on
    parse.train_corpus' gold trees with stanza's training code (parse.models: train)."""
    input:
        unpack(stanza_models_inputs),
    output:
        PARSE["model_dir"] + "/rnmt-{lang}.json",
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
        R + "/logs/stanza_models/{lang}.log",
    shell:
        "OMP_NUM_THREADS={threads:q} {RNMT} {params.command:q} 2> {log:q}"


rule parse_chunk:
    """stanza POS tagging and dependency parsing of one chunk of the tokenized source (pretokenized)."""
    input:
        text=R + "/data/{corpus}/tok/{split}.src",
        models=parse_models,
    output:
        temp(R + "/data/{corpus}/labels/stanza/chunks/{split}.{chunk}.conllu"),
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
        R + "/logs/parse_chunk/{corpus}.{split}.{chunk}.log",
    shell:
        "OMP_NUM_THREADS={threads:q} {RNMT} parse run --lang {params.lang:q} --model-dir {params.model_dir:q} "
        "--chunk {wildcards.chunk:q} --chunks {params.chunks:q} --device {params.device:q} "
        "--batch-size {params.batch_size:q} {input.text:q} {output:q} 2> {log:q}"


rule parse_merge:
    input:
        lambda wc: [
            f"{R}/data/{wc.corpus}/labels/stanza/chunks/{wc.split}.{k}.conllu" for k in range(int(PARSE["chunks"]))
        ],
    output:
        R + "/data/{corpus}/labels/stanza/{split}.conllu",
    conda:
        "../../envs/parse.yaml"
    log:
        R + "/logs/parse_merge/{corpus}.{split}.log",
    shell:
        "{RNMT} parse merge --output {output:q} {input:q} 2> {log:q}"


rule gold_labels:
    """The corpus' own trees, aligned with its tokenized source (trees of pairs lost to cleaning skipped)."""
    input:
        conllu=lambda wc: gold_conllu(wc.corpus, wc.split),
        text=R + "/data/{corpus}/tok/{split}.src",
    output:
        R + "/data/{corpus}/labels/gold/{split}.conllu",
    conda:
        "../../envs/data.yaml"
    log:
        R + "/logs/gold_labels/{corpus}.{split}.log",
    shell:
        "{RNMT} labels gold --conllu {input.conllu:q} --text {input.text:q} --output {output:q} 2> {log:q}"


rule project_labels:
    """One label per subword of the BPE source; every subword of a word carries the word's label."""
    input:
        conllu=R + "/data/{corpus}/labels/{source}/{split}.conllu",
        bpe=R + "/data/{corpus}/bpe/{split}.src",
    output:
        R + "/data/{corpus}/labels/{source}/{split}.bpe.lab",
    wildcard_constraints:
        source="gold|stanza",
    params:
        subtypes=["--subtypes"] if PARSE["subtypes"] else [],
    conda:
        "../../envs/data.yaml"
    log:
        R + "/logs/project_labels/{corpus}.{source}.{split}.log",
    shell:
        "{RNMT} labels project --conllu {input.conllu:q} --bpe {input.bpe:q} {params.subtypes:q} "
        "--output {output:q} 2> {log:q}"


rule label_vocab:
    input:
        R + "/data/{corpus}/labels/{source}/train.bpe.lab",
    output:
        R + "/data/{corpus}/labels/{source}/vocab.lab",
    wildcard_constraints:
        source="gold|stanza",
    conda:
        "../../envs/data.yaml"
    log:
        R + "/logs/label_vocab/{corpus}.{source}.log",
    shell:
        "{RNMT} labels vocab {input:q} {output:q} 2> {log:q}"
