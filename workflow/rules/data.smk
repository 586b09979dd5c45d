# Corpora: generate, or download and fetch, raw parallel text; assemble the splits; clean the training
# pairs in a fixed number of parallel chunks and merge them (with deduplication); prepare dev/test text
# the same way without filters; optionally truecase. Paper corpora come from workflow/corpora.yaml.
# Downloads and fetched sources are shared by every run (results/downloads/, results/sources/).

import json

from rnmt.data.registry import DOWNLOADS, SOURCES, Corpora, Registry, registry_file
from rnmt.data.sources import manual_paths, missing_manual_message
from rnmt.io import InputError

# RNMT_REGISTRY points to another registry (a site's mirror of the corpora, or the tests' local server).
REGISTRY_FILE = str(registry_file(workflow.basedir))
REGISTRY = Registry(REGISTRY_FILE)
CORPORA = Corpora({**config, "corpora": PLAN.corpora_config}, REGISTRY)   # with the corpora the scale implies
NO_MATCH = "(?!x)x"


def corpus_names(kind=None, not_kind=None):
    return "|".join(CORPORA.names(kind, not_kind)) or NO_MATCH


def corpus_lang(wc):
    c = CORPORA[wc.corpus]
    return c.src_lang if wc.side == "src" else c.tgt_lang


def preprocess_settings(wc):
    return json.dumps(CORPORA[wc.corpus].preprocess, sort_keys=True)


def manual_dir_for(source):
    """The corpora that use `source` (comma-separated) and the first one's manual_dir (they normally agree)."""
    users = [c for c in CORPORA.corpora.values() if any(source in ids for ids in c.sources.values())]
    return ", ".join(c.name for c in users), (users[0].manual_dir if users else Path("data/ldc"))


def fetch_inputs(wc):
    src = REGISTRY.source(wc.source)
    if src.kind == "url":
        return [f"{DOWNLOADS}/{name}" for name, _ in src.downloads()]
    if src.kind == "manual":
        corpus, manual_dir = manual_dir_for(src.id)
        msg = missing_manual_message(src, manual_dir, corpus)
        if msg:
            raise InputError(msg)
        return [str(p) for ps in manual_paths(src, manual_dir).values() for p in ps]
    return []


def assemble_args(wc):
    """The arguments as a list: the rule quotes each one ({params.args:q})."""
    c = CORPORA[wc.corpus]
    args = [x for s, t in c.split_parts(wc.split) for x in ("--src", s, "--tgt", t)]
    if c.holdout and wc.split not in (set(c.parts) - {"train"}):
        args += ["--holdout-slice", "--holdout", json.dumps(c.holdout)]
    return args


def chunk_files(wc):
    n = int(CORPORA[wc.corpus].preprocess["chunks"])
    return [f"{R}/data/{wc.corpus}/chunks/{i}.{ext}" for i in range(n) for ext in ("src", "tgt", "json")]


rule synthetic_corpus:
    """The embedded synthetic language pair, with gold CoNLL-U trees for the source side."""
    output:
        expand(R + "/data/{{corpus}}/raw/{split}.{side}", split=SPLITS, side=SIDES),
        expand(R + "/data/{{corpus}}/raw/{split}.src.conllu", split=SPLITS),
    wildcard_constraints:
        corpus=corpus_names("synthetic"),
    params:
        args=lambda wc: PLAN.synth_args(wc.corpus),
        out_dir=lambda wc, output: str(Path(output[0]).parent),
    conda:
        "../../envs/data.yaml"
    log:
        R + "/logs/synthetic_corpus/{corpus}.log",
    shell:
        "{RNMT} synth --out-dir {params.out_dir:q} {params.args:q} 2> {log:q}"


rule download:
    """One file of a url: source; retried with back-off, resumed, checked against its pinned sha256 (looked up
    by the command, so pinning a file already downloaded does not rerun what depends on it), written atomically."""
    output:
        DOWNLOADS + "/{file}",
    wildcard_constraints:
        file=r"[A-Za-z0-9_+-][A-Za-z0-9._+-]*",
    params:
        url=lambda wc: REGISTRY.download(wc.file)[0],
    resources:
        downloads=1,
    conda:
        "../../envs/data.yaml"
    log:
        "results/logs/download/{file}.log",
    shell:
        "{RNMT} corpus download --registry {REGISTRY_FILE:q} --url {params.url:q} {output:q} 2> {log:q}"


rule fetch_source:
    """A registry source as one plain text file per language (mtdata, sacrebleu, archive, LDC files)."""
    input:
        fetch_inputs,
    output:
        SOURCES + "/{source}/{l1}-{l2}.{l1}",
        SOURCES + "/{source}/{l1}-{l2}.{l2}",
    wildcard_constraints:
        source=r"[A-Za-z0-9_][A-Za-z0-9._-]*",
        l1=r"[a-z]{2,3}",
        l2=r"[a-z]{2,3}",
    params:
        out_dir=lambda wc, output: str(Path(output[0]).parent),
        corpus=lambda wc: manual_dir_for(wc.source)[0],
        manual_dir=lambda wc: str(manual_dir_for(wc.source)[1]),
    resources:
        downloads=1,
    conda:
        "../../envs/data.yaml"
    log:
        "results/logs/fetch_source/{source}.{l1}-{l2}.log",
    shell:
        "{RNMT} corpus fetch --registry {REGISTRY_FILE:q} --source {wildcards.source:q} --out-dir {params.out_dir:q} "
        "--download-dir {DOWNLOADS:q} --manual-dir {params.manual_dir:q} --corpus {params.corpus:q} 2> {log:q}"


rule assemble:
    """A split of a local or registry corpus from its parts (alignment and UTF-8 checked)."""
    input:
        lambda wc: [f for pair in CORPORA[wc.corpus].split_parts(wc.split) for f in pair],
    output:
        src=R + "/data/{corpus}/raw/{split}.src",
        tgt=R + "/data/{corpus}/raw/{split}.tgt",
        manifest=R + "/data/{corpus}/raw/{split}.json",
    wildcard_constraints:
        corpus=corpus_names(not_kind="synthetic"),
    params:
        args=assemble_args,
    conda:
        "../../envs/data.yaml"
    log:
        R + "/logs/assemble/{corpus}.{split}.log",
    shell:
        "{RNMT} corpus assemble --split {wildcards.split:q} {params.args:q} --out-src {output.src:q} "
        "--out-tgt {output.tgt:q} --manifest {output.manifest:q} 2> {log:q}"


rule chunk_index:
    """Byte offsets of a fixed number of chunks of the training pairs (the count comes from config)."""
    input:
        src=R + "/data/{corpus}/raw/train.src",
        tgt=R + "/data/{corpus}/raw/train.tgt",
    output:
        R + "/data/{corpus}/chunks/index.json",
    params:
        n=lambda wc: CORPORA[wc.corpus].preprocess["chunks"],
    conda:
        "../../envs/data.yaml"
    log:
        R + "/logs/chunk_index/{corpus}.log",
    shell:
        "{RNMT} corpus chunks --chunks {params.n:q} {input.src:q} {input.tgt:q} {output:q} 2> {log:q}"


rule clean_chunk:
    """Normalise, segment, tokenize and filter one chunk of training pairs, with a per-step report."""
    input:
        src=R + "/data/{corpus}/raw/train.src",
        tgt=R + "/data/{corpus}/raw/train.tgt",
        index=R + "/data/{corpus}/chunks/index.json",
    output:
        src=temp(R + "/data/{corpus}/chunks/{chunk}.src"),
        tgt=temp(R + "/data/{corpus}/chunks/{chunk}.tgt"),
        report=R + "/data/{corpus}/chunks/{chunk}.json",
    wildcard_constraints:
        chunk=r"\d+",
    params:
        settings=preprocess_settings,
        src_lang=lambda wc: CORPORA[wc.corpus].src_lang,
        tgt_lang=lambda wc: CORPORA[wc.corpus].tgt_lang,
    resources:
        mem_mb=1000,
    conda:
        "../../envs/data.yaml"
    log:
        R + "/logs/clean_chunk/{corpus}.{chunk}.log",
    shell:
        "{RNMT} corpus clean --index {input.index:q} --chunk {wildcards.chunk:q} --src-lang {params.src_lang:q} "
        "--tgt-lang {params.tgt_lang:q} --settings {params.settings:q} --out-src {output.src:q} "
        "--out-tgt {output.tgt:q} --report {output.report:q} {input.src:q} {input.tgt:q} 2> {log:q}"


rule merge_chunks:
    """The cleaned training pairs in their original order, deduplicated where the paper did; the
    report (lines kept, dropped and changed per step; warnings, such as test sentences found in the
    training data) is written beside them as prepare.json."""
    input:
        chunks=chunk_files,
        test_src=R + "/data/{corpus}/tok/test.src",
    output:
        src=R + "/data/{corpus}/tok/train.src",
        tgt=R + "/data/{corpus}/tok/train.tgt",
        report=R + "/data/{corpus}/prepare.json",
    params:
        dedupe=lambda wc: ["--dedupe"] if CORPORA[wc.corpus].preprocess["dedupe"] else [],
        cap=lambda wc: ["--max-pairs", str(int(n))] if (n := CORPORA[wc.corpus].preprocess["max_pairs"]) else [],
    resources:
        mem_mb=4000,
    conda:
        "../../envs/data.yaml"
    log:
        R + "/logs/merge_chunks/{corpus}.log",
    shell:
        "{RNMT} corpus merge {params.dedupe:q} {params.cap:q} --corpus {wildcards.corpus:q} --out-src {output.src:q} "
        "--out-tgt {output.tgt:q} --report {output.report:q} --test-src {input.test_src:q} {input.chunks:q} "
        "2> {log:q}"


rule tokenize:
    """Dev and test text prepared like the training text (normalise, segment, tokenize), unfiltered."""
    input:
        R + "/data/{corpus}/raw/{split}.{side}",
    output:
        R + "/data/{corpus}/tok/{split}.{side}",
    wildcard_constraints:
        split="dev|test",
    params:
        lang=corpus_lang,
        settings=preprocess_settings,
    conda:
        "../../envs/data.yaml"
    log:
        R + "/logs/tokenize/{corpus}.{split}.{side}.log",
    shell:
        "{RNMT} corpus prepare-text --lang {params.lang:q} --settings {params.settings:q} {input:q} {output:q} "
        "2> {log:q}"


rule truecase_model:
    """Moses truecasing model of one side, learned on the cleaned training text."""
    input:
        R + "/data/{corpus}/tok/train.{side}",
    output:
        R + "/data/{corpus}/truecase.{side}",
    conda:
        "../../envs/data.yaml"
    log:
        R + "/logs/truecase_model/{corpus}.{side}.log",
    shell:
        "{RNMT} corpus truecase-train {input:q} {output:q} 2> {log:q}"


rule truecase:
    input:
        text=R + "/data/{corpus}/tok/{split}.{side}",
        model=R + "/data/{corpus}/truecase.{side}",
    output:
        R + "/data/{corpus}/tc/{split}.{side}",
    conda:
        "../../envs/data.yaml"
    log:
        R + "/logs/truecase/{corpus}.{split}.{side}.log",
    shell:
        "{RNMT} corpus truecase --model {input.model:q} {input.text:q} {output:q} 2> {log:q}"
