# Corpora: generate, or download and fetch, raw parallel text; assemble the splits; clean the training
# pairs in a fixed number of parallel chunks and merge them (with deduplication); prepare dev/test text
# the same way without filters; optionally truecase. Paper corpora come from workflow/corpora.yaml.
# Downloads and fetched sources are shared by every run (results/downloads/, results/sources/).


rule synthetic_corpus:
    """The embedded synthetic language pair, with gold CoNLL-U trees for the source side."""
    output:
        expand(run_path("data/{{corpus}}/raw/{split}.{side}"), split=SPLITS, side=SIDES),
        expand(run_path("data/{{corpus}}/raw/{split}.src.conllu"), split=SPLITS),
    wildcard_constraints:
        corpus=corpus_names("synthetic"),
    params:
        args=lambda wc: PLAN.synth_args(wc.corpus),
        out_dir=lambda wc, output: str(Path(output[0]).parent),
    conda:
        "../../envs/data.yaml"
    log:
        run_path("logs/synthetic_corpus/{corpus}.log"),
    shell:
        "rnmt synth --out-dir {params.out_dir:q} {params.args:q} 2> {log:q}"


rule download:
    """One file of a url: source; retried with back-off, resumed, checked against its pinned sha256 (looked up
    by the command, so pinning a file already downloaded does not rerun what depends on it), written atomically."""
    output:
        os.path.join(DOWNLOADS, "{file}"),
    wildcard_constraints:
        file=r"[A-Za-z0-9_+-][A-Za-z0-9._+-]*",
    params:
        url=lambda wc: REGISTRY.download(wc.file)[0],
        registry=REGISTRY_FILE,
    resources:
        downloads=1,
    conda:
        "../../envs/data.yaml"
    log:
        "results/logs/download/{file}.log",
    shell:
        "rnmt corpus download --registry {params.registry:q} --url {params.url:q} {output:q} 2> {log:q}"


rule fetch_source:
    """A registry source as one plain text file per language (mtdata, sacrebleu, archive, LDC files)."""
    input:
        fetch_inputs,
    output:
        os.path.join(SOURCES, "{source}/{l1}-{l2}.{l1}"),
        os.path.join(SOURCES, "{source}/{l1}-{l2}.{l2}"),
    wildcard_constraints:
        source=r"[A-Za-z0-9_][A-Za-z0-9._-]*",
        l1=r"[a-z]{2,3}",
        l2=r"[a-z]{2,3}",
    params:
        out_dir=lambda wc, output: str(Path(output[0]).parent),
        corpus=lambda wc: manual_dir_for(wc.source)[0],
        manual_dir=lambda wc: str(manual_dir_for(wc.source)[1]),
        registry=REGISTRY_FILE,
        download_dir=lambda wc: DOWNLOADS,
    resources:
        downloads=1,
    conda:
        "../../envs/data.yaml"
    log:
        "results/logs/fetch_source/{source}.{l1}-{l2}.log",
    shell:
        "rnmt corpus fetch --registry {params.registry:q} --source {wildcards.source:q} --out-dir {params.out_dir:q} "
        "--download-dir {params.download_dir:q} --manual-dir {params.manual_dir:q} --corpus {params.corpus:q} 2> {log:q}"


rule assemble:
    """A split of a local or registry corpus from its parts (alignment and UTF-8 checked)."""
    input:
        assemble_inputs,
    output:
        src=run_path("data/{corpus}/raw/{split}.src"),
        tgt=run_path("data/{corpus}/raw/{split}.tgt"),
        manifest=run_path("data/{corpus}/raw/{split}.json"),
    wildcard_constraints:
        corpus=corpus_names(not_kind="synthetic"),
    params:
        args=assemble_args,
    conda:
        "../../envs/data.yaml"
    log:
        run_path("logs/assemble/{corpus}.{split}.log"),
    shell:
        "rnmt corpus assemble --split {wildcards.split:q} {params.args:q} --out-src {output.src:q} "
        "--out-tgt {output.tgt:q} --manifest {output.manifest:q} 2> {log:q}"


rule chunk_index:
    """Byte offsets of a fixed number of chunks of the training pairs (the count comes from config)."""
    input:
        src=run_path("data/{corpus}/raw/train.src"),
        tgt=run_path("data/{corpus}/raw/train.tgt"),
    output:
        run_path("data/{corpus}/chunks/index.json"),
    params:
        n=lambda wc: CORPORA[wc.corpus].preprocess.chunks,
    conda:
        "../../envs/data.yaml"
    log:
        run_path("logs/chunk_index/{corpus}.log"),
    shell:
        "rnmt corpus chunks --chunks {params.n:q} {input.src:q} {input.tgt:q} {output:q} 2> {log:q}"


rule clean_chunk:
    """Normalise, segment, tokenize and filter one chunk of training pairs, with a per-step report."""
    input:
        src=run_path("data/{corpus}/raw/train.src"),
        tgt=run_path("data/{corpus}/raw/train.tgt"),
        index=run_path("data/{corpus}/chunks/index.json"),
    output:
        src=temp(run_path("data/{corpus}/chunks/{chunk}.src")),
        tgt=temp(run_path("data/{corpus}/chunks/{chunk}.tgt")),
        report=run_path("data/{corpus}/chunks/{chunk}.json"),
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
        run_path("logs/clean_chunk/{corpus}.{chunk}.log"),
    shell:
        "rnmt corpus clean --index {input.index:q} --chunk {wildcards.chunk:q} --src-lang {params.src_lang:q} "
        "--tgt-lang {params.tgt_lang:q} --settings {params.settings:q} --out-src {output.src:q} "
        "--out-tgt {output.tgt:q} --report {output.report:q} {input.src:q} {input.tgt:q} 2> {log:q}"


rule merge_chunks:
    """The cleaned training pairs in their original order, deduplicated where the paper did; the
    report (lines kept, dropped and changed per step; warnings, such as test sentences found in the
    training data) is written beside them as prepare.json."""
    input:
        chunks=chunk_files,
        test_src=run_path("data/{corpus}/tok/test.src"),
    output:
        src=run_path("data/{corpus}/tok/train.src"),
        tgt=run_path("data/{corpus}/tok/train.tgt"),
        report=run_path("data/{corpus}/prepare.json"),
    params:
        dedupe=lambda wc: ["--dedupe"] if CORPORA[wc.corpus].preprocess.dedupe else [],
        cap=lambda wc: ["--max-pairs", str(int(n))] if (n := CORPORA[wc.corpus].preprocess.max_pairs) else [],
    resources:
        mem_mb=4000,
    conda:
        "../../envs/data.yaml"
    log:
        run_path("logs/merge_chunks/{corpus}.log"),
    shell:
        "rnmt corpus merge {params.dedupe:q} {params.cap:q} --corpus {wildcards.corpus:q} --out-src {output.src:q} "
        "--out-tgt {output.tgt:q} --report {output.report:q} --test-src {input.test_src:q} {input.chunks:q} "
        "2> {log:q}"


rule tokenize:
    """Dev and test text prepared like the training text (normalise, segment, tokenize), unfiltered."""
    input:
        run_path("data/{corpus}/raw/{split}.{side}"),
    output:
        run_path("data/{corpus}/tok/{split}.{side}"),
    wildcard_constraints:
        split="dev|test",
    params:
        lang=corpus_lang,
        settings=preprocess_settings,
    conda:
        "../../envs/data.yaml"
    log:
        run_path("logs/tokenize/{corpus}.{split}.{side}.log"),
    shell:
        "rnmt corpus prepare-text --lang {params.lang:q} --settings {params.settings:q} {input:q} {output:q} "
        "2> {log:q}"


rule truecase_model:
    """Moses truecasing model of one side, learned on the cleaned training text."""
    input:
        run_path("data/{corpus}/tok/train.{side}"),
    output:
        run_path("data/{corpus}/truecase.{side}"),
    conda:
        "../../envs/data.yaml"
    log:
        run_path("logs/truecase_model/{corpus}.{side}.log"),
    shell:
        "rnmt corpus truecase-train {input:q} {output:q} 2> {log:q}"


rule truecase:
    input:
        text=run_path("data/{corpus}/tok/{split}.{side}"),
        model=run_path("data/{corpus}/truecase.{side}"),
    output:
        run_path("data/{corpus}/tc/{split}.{side}"),
    conda:
        "../../envs/data.yaml"
    log:
        run_path("logs/truecase/{corpus}.{split}.{side}.log"),
    shell:
        "rnmt corpus truecase --model {input.model:q} {input.text:q} {output:q} 2> {log:q}"
