# Decoding: beam search on the segmented test source with one model (member seed<N>) or an ensemble
# (member ens<N>-<M>: the seeds' models together), then BPE removal and detokenization.


rule translate:
    input:
        unpack(test_label_input),
        models=member_files("model.pt"),
        src=run_path("data/{corpus}/bpe/{testset}.src"),
    output:
        bpe=run_path("translations/{corpus}/{variant}/{member}/{testset}.bpe"),
        speed=run_path("translations/{corpus}/{variant}/{member}/{testset}.speed.json"),
    params:
        code=DECODER_DIGEST,
        settings=lambda wc: variant_of(wc).decode_settings(),
        models=lambda wc, input: [x for m in input.models for x in ("--model", m)],
        labels=lambda wc, input: ["--src-labels", input.labels] if "labels" in input.keys() else [],
    threads: lambda wc: DECODE_RES.get("threads") or variant_of(wc).decode.get("threads") or 1
    resources:
        mem_mb=DECODE_RES["mem_mb"],
        runtime=DECODE_RES["runtime"],
        gpu=DECODE_RES["gpu"],
    conda:
        "../../envs/train.yaml"
    log:
        run_path("logs/translate/{corpus}/{variant}.{member}.{testset}.log"),
    shell:
        "rnmt translate {params.models:q} --settings {params.settings:q} {params.labels:q} "
        "--threads {threads:q} --metrics {output.speed:q} {input.src:q} {output.bpe:q} 2> {log:q}"


rule postprocess:
    input:
        run_path("translations/{corpus}/{variant}/{member}/{testset}.bpe"),
    output:
        tok=run_path("translations/{corpus}/{variant}/{member}/{testset}.tok"),
        txt=run_path("translations/{corpus}/{variant}/{member}/{testset}.txt"),
    params:
        code=POSTPROCESS_DIGEST,
        lang=lambda wc: PLAN.corpus(wc.corpus)["tgt_lang"],
        detruecase=lambda wc: ["--detruecase"] if CORPORA[wc.corpus].preprocess.truecase else [],
    conda:
        "../../envs/data.yaml"
    log:
        run_path("logs/postprocess/{corpus}/{variant}.{member}.{testset}.log"),
    shell:
        "rnmt postprocess --lang {params.lang:q} {params.detruecase:q} --tok-output {output.tok:q} {input:q} {output.txt:q} 2> {log:q}"


rule export:
    """A translation bundle of one model or ensemble: checkpoints, source BPE codes and truecasing model,
    preprocessing and decoding settings (`rnmt translate --bundle DIR` on raw text)."""
    input:
        models=member_files("model.pt"),
        codes=lambda wc: bpe_codes(wc.corpus, "src"),
        truecase=lambda wc: [run_path(f"data/{wc.corpus}/truecase.src")]
        if CORPORA[wc.corpus].preprocess.truecase else [],
    output:
        run_path("bundles/{corpus}/{variant}/{member}/bundle.json"),
    params:
        out=lambda wc, output: str(Path(output[0]).parent),
        models=lambda wc, input: [x for m in input.models for x in ("--model", m)],
        codes=lambda wc, input: ["--codes", input.codes[0]] if input.codes else [],
        truecase=lambda wc, input: ["--truecase-model", input.truecase[0], "--detruecase"] if input.truecase else [],
        langs=lambda wc: ["--src-lang", CORPORA[wc.corpus].src_lang, "--tgt-lang", CORPORA[wc.corpus].tgt_lang],
        preprocess=preprocess_settings,
        decode=lambda wc: json.dumps(variant_of(wc).decode, sort_keys=True),
    conda:
        "../../envs/train.yaml"
    log:
        run_path("logs/export/{corpus}/{variant}.{member}.log"),
    shell:
        "rnmt export {params.models:q} {params.codes:q} {params.truecase:q} {params.langs:q} "
        "--preprocess {params.preprocess:q} --decode {params.decode:q} --out {params.out:q} 2> {log:q}"
