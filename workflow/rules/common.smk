# What the rules share: the plan of this run (rnmt.planning.plan: config, scale and experiment files resolved and
# checked), the shell every rule's command runs in, where the run's files live, and the functions the
# rules call to find their inputs and arguments. The rule files hold only rules (Snakemake's layout,
# which `snakemake --lint` checks).

import json
import os
import re
import shlex
import sys
import threading
from pathlib import Path

from snakemake.settings.types import DeploymentMethod
from snakemake.utils import update_config

from rnmt.planning import runconfig
from rnmt.config import load_yaml, typed_overrides
from rnmt.data.registry import DOWNLOADS, SOURCES, Corpora, Registry, check_fetched, registry_file
from rnmt.data.sources import manual_paths, missing_manual_message
from rnmt.parse.settings import ParseSettings
from rnmt.io import InputError, with_extra_references
from rnmt.parse.models import manifest_path
from rnmt.planning.current import member_of, outdated, table_expected
from rnmt.planning.plan import SIDES, SPLITS, Plan
from rnmt.planning.table import member_seeds
from rnmt.decode import DECODED_BY, POSTPROCESSED_BY
from rnmt.evaluate import SCORED_BY
from rnmt.provenance import source_digest

# `--config key='{nested: 1}'` reaches Snakemake's config with its nested values as strings.
update_config(config, typed_overrides(workflow.config_settings.config))


def explicit_config():
    """What this command itself sets: its --configfile files, then its --config (typed as above)."""
    out = {}
    for path in workflow.config_settings.configfiles:
        update_config(out, load_yaml(path) or {})
    update_config(out, typed_overrides(workflow.config_settings.config))
    return out


# A built run keeps the config it was built with (results/<run>/config.yaml, rnmt.planning.runconfig): a later
# command on the run builds with it without repeating --config, and one that contradicts it stops here.
try:
    RUN_CONFIG, notes = runconfig.resolve(config, explicit_config())
except InputError as e:
    sys.exit(f"rnmt: error: {e}")
if workflow.is_main_process:
    for note in notes:
        print(f"rnmt: note: {note}", file=sys.stderr)
config.clear()
config.update(RUN_CONFIG)

# Validates config.yaml (and --config/--configfile overrides), the experiment files and every row's
# settings before any job starts; a bad key or value stops here with a message naming it. The main
# process also builds every variant's model on PyTorch's meta device (no memory), so settings that no
# architecture accepts together stop here too rather than in a training job.
try:
    PLAN = Plan(config, Path(workflow.basedir))
    if workflow.is_main_process:
        PLAN.check_models()
except InputError as e:
    sys.exit(f"rnmt: error: {e}")
R = PLAN.results
EXPERIMENTS = PLAN.experiments_dir


def run_path(path):
    """`path` inside this run's results folder (results/<run>/path), its wildcards left to Snakemake."""
    return f"{R}/{path}"


def member_files(name):
    """Input function: file `name` (model.pt, train.json) of each seed's model in the decoded member
    (seed<N>, or ens<N>-<M>: an ensemble of those seeds)."""
    return lambda wc: [run_path(f"models/{wc.corpus}/{wc.variant}/seed{s}/{name}") for s in member_seeds(wc.member)]


# Every command runs `rnmt` from this checkout's src/ with the Python of the environment it runs in:
# the job's conda environment under --sdm conda, otherwise the Python running Snakemake. `rnmt` is a
# shell function, so a command reads as a user would type it; the trainer is started with exec (see
# the train rule), which needs the interpreter itself, $RNMT_PYTHON.
if DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method:
    PYTHON = "python"
else:
    PYTHON = shlex.quote(sys.executable)
SRC = shlex.quote(str(Path(workflow.basedir) / "src"))
# Every job of the run takes the computations' paths the run took first (rnmt.machine.fastpath): kept in the
# run's folder, so a rerun, or the folder copied to another machine, gives the same numbers.
FAST_PATHS = shlex.quote(str(Path(R, "fast_paths.json").absolute()))
# (braces doubled twice: once for this f-string, once for Snakemake's formatting of shell commands)
shell.prefix(
    f"set -euo pipefail; export PYTHONPATH={SRC}${{{{PYTHONPATH:+:$PYTHONPATH}}}}; "
    f"export RNMT_FASTPATH=${{{{RNMT_FASTPATH:-{PLAN.fast_paths}}}}} RNMT_FASTPATH_RUN={FAST_PATHS} RNMT_JOB=1; "
    f'RNMT_PYTHON={PYTHON}; rnmt() {{{{ "$RNMT_PYTHON" -m rnmt "$@"; }}}}; '
)


# `snakemake --report` (without --report-after-run, which builds first) shows what the run has built,
# not every table its config could build: the default target is then only the finished files.
REPORT_ONLY = (any(a == "--report" or a.startswith("--report=") for a in sys.argv)
               and "--report-after-run" not in sys.argv)


def report_targets():
    built = PLAN.built_targets()
    if not built and workflow.is_main_process:
        first = next(iter(PLAN.tables), "<table>")
        sys.exit(f"rnmt: error: {R} has no finished table yet, so the report would be empty; build one first "
                 f"(snakemake --cores all {run_path(f'tables/{first}.csv')}), then run the report again")
    return built


def cancel_rescheduling_timers():
    """Snakemake's job rate limiter leaves a timer armed after the last job (profiles/default explains
    why its timespan is 10 s there); Python waits for it at exit, so a finished run would linger."""
    for thread in threading.enumerate():
        if isinstance(thread, threading.Timer):
            thread.cancel()


# ---- Corpora (data.smk) -----------------------------------------------------------------------------
# RNMT_REGISTRY points to another registry (a site's mirror of the corpora, or the tests' local server).
REGISTRY_FILE = str(registry_file(workflow.basedir))
REGISTRY = Registry(REGISTRY_FILE)
CORPORA = Corpora({**config, "corpora": PLAN.corpora_config}, REGISTRY)   # with the corpora the scale implies
# a source fetched from another registry entry than the one now stops the run here, naming what to remove
if workflow.is_main_process:
    try:
        for sid in sorted({s for name in CORPORA.names("registry") for ids in CORPORA[name].sources.values()
                           for s in ids}):
            check_fetched(REGISTRY.source(sid))
    except InputError as e:
        sys.exit(f"rnmt: error: {e}")
NO_MATCH = "(?!x)x"


def corpus_names(kind=None, not_kind=None):
    return "|".join(CORPORA.names(kind, not_kind)) or NO_MATCH


def corpus_lang(wc):
    c = CORPORA[wc.corpus]
    return c.src_lang if wc.side == "src" else c.tgt_lang


def preprocess_settings(wc):
    return json.dumps(CORPORA[wc.corpus].preprocess.as_dict(), sort_keys=True)


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


def assemble_inputs(wc):
    """A split's part files; for a local corpus also the extra references beside its target files (a test set's
    <file>.ref1, ...), which the user may edit alone. A registry source's are written with its text."""
    c = CORPORA[wc.corpus]
    parts = c.split_parts(wc.split)
    refs = [r for _, t in parts for r in with_extra_references([t])[1:]] if c.kind == "local" else []
    return [f for pair in parts for f in pair] + refs


def assemble_args(wc):
    """The arguments as a list, each quoted by the shell command (params.args with :q)."""
    c = CORPORA[wc.corpus]
    args = [x for s, t in c.split_parts(wc.split) for x in ("--src", s, "--tgt", t)]
    if c.holdout and wc.split not in (set(c.parts) - {"train"}):
        args += ["--holdout-slice", "--holdout", json.dumps(c.holdout)]
    return args


def chunk_files(wc):
    n = CORPORA[wc.corpus].preprocess.chunks
    return [run_path(f"data/{wc.corpus}/chunks/{i}.{ext}") for i in range(n) for ext in ("src", "tgt", "json")]


# ---- Subwords (bpe.smk) -----------------------------------------------------------------------------

def text_file(corpus, split, side):
    """The prepared text BPE starts from: truecased where the corpus truecases, else tokenized."""
    stage = "tc" if CORPORA[corpus].preprocess.truecase else "tok"
    return run_path(f"data/{corpus}/{stage}/{split}.{side}")


def bpe_codes(corpus, side):
    """The codes file for one side ([] at word level, where no BPE is learned)."""
    c = CORPORA[corpus]
    if c.word_level:
        return []
    return [run_path(f"bpe/{corpus}/codes.{'joint' if c.bpe.joint else side}")]


def codes_flag(corpus, side, flag="--codes"):
    """[flag, codes file] or [] at word level (a list: the rule quotes each item)."""
    codes = bpe_codes(corpus, side)
    return [flag, codes[0]] if codes else []


# ---- Dependency labels (parse.smk) ------------------------------------------------------------------
PARSE = ParseSettings.from_dict(
    {**(config.get("parse") or {}), **(PLAN.scale_settings.get("parse") or {})},   # the scale's over the config's
    "config parse: ",
).as_dict()
PARSE["model_dir"] = PARSE["model_dir"] or run_path("stanza")      # null: results/<run>/stanza


def treebank_files(trees):
    """parse.train_trees' train and dev files, each checked to exist (a missing one would otherwise stop
    Snakemake with no word of the setting that named it)."""
    missing = [k for k in ("train", "dev") if not trees.get(k)]
    unknown = sorted(set(trees) - {"train", "dev"})
    if missing or unknown:
        raise InputError(f"config parse.train_trees: {trees!r} must give exactly train and dev, the CoNLL-U files "
                         "of a treebank (e.g. {train: en_ewt-ud-train.conllu, dev: en_ewt-ud-dev.conllu})")
    for k in ("train", "dev"):
        if not Path(trees[k]).is_file():
            raise InputError(f"config parse.train_trees.{k}: {trees[k]}: no such file; give a CoNLL-U treebank "
                             "file (a UD treebank of the source language), relative to the checkout or absolute")
    return {"train": [trees["train"]], "dev": [trees["dev"]]}


try:                            # checked when the config is read: a missing file is named before any job runs
    TREEBANK = treebank_files(PARSE["train_trees"]) if PARSE["models"] == "train" and PARSE["train_trees"] else {}
except InputError as e:
    sys.exit(f"rnmt: error: {e}")


def parse_lang(corpus):
    return PARSE["lang"] or CORPORA[corpus].src_lang


def gold_conllu(corpus, split):
    """The gold tree files of a corpus split (the generator's, or the corpus entry's `conllu:`)."""
    if CORPORA[corpus].kind == "synthetic":
        return [run_path(f"data/{corpus}/raw/{split}.src.conllu")]
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
    """The gold trees that train the models (parse.models: train): a treebank's files, else a corpus'."""
    if PARSE["models"] != "train":
        return {}
    if PARSE["train_trees"]:
        return TREEBANK
    if not PARSE["train_corpus"]:
        raise InputError("config parse.models: train needs parse.train_corpus, a corpus of this config with gold "
                         "trees, or parse.train_trees: {train: FILE, dev: FILE}, a treebank's CoNLL-U files")
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
        "--steps-depparse", str(PARSE["train_steps_depparse"]), "--hidden", str(PARSE["train_hidden"]),
    ]


# ---- Training (train.smk) ---------------------------------------------------------------------------

def variant_of(wc):
    return PLAN.variant(wc.corpus, wc.variant)


def label_inputs(wc):
    """Source dependency labels for rows with `labels:` (gold or stanza-predicted)."""
    v = variant_of(wc)
    if not v.labels:
        return {}
    d = run_path(f"data/{wc.corpus}/labels/{v.labels}")
    return {"train_labels": f"{d}/train.bpe.lab", "dev_labels": f"{d}/dev.bpe.lab", "label_vocab": f"{d}/vocab.lab"}


def label_flags(wc, input):
    if not variant_of(wc).labels:
        return []
    return ["--train-src-labels", input.train_labels, "--dev-src-labels", input.dev_labels,
            "--src-label-vocab", input.label_vocab]


TRAIN_RES = PLAN.resources("train")


# ---- Decoding (decode.smk) --------------------------------------------------------------------------

DECODE_RES = PLAN.resources("translate")


def test_label_input(wc):
    v = variant_of(wc)
    return {"labels": run_path(f"data/{wc.corpus}/labels/{v.labels}/{wc.testset}.bpe.lab")} if v.labels else {}


# ---- Scoring (evaluate.smk) -------------------------------------------------------------------------

def test_manifest(wc):
    if CORPORA[wc.corpus].kind == "synthetic":
        return {}
    return {"manifest": run_path(f"data/{wc.corpus}/raw/{wc.testset}.json")}


# ---- Tables (tables.smk) ----------------------------------------------------------------------------


def rst_text(text):
    """Plain text as reStructuredText (inline markup characters escaped, whitespace folded)."""
    return re.sub(r"([\\*`_|])", r"\\\1", " ".join(text.split()))


def report_caption(table):
    """A table's or figure's caption in the report: its title and where the paper's numbers are from."""
    return rst_text(table.title + (f". Paper: {table.paper.strip()}" if table.paper else ""))


# What rnmt's code makes from files that do not change when the code does (tables, figures, runs.csv, curves,
# a cell's counted matrices): a param of the code's digest makes Snakemake build it again after an update of
# rnmt (its params trigger), where the files' times alone would keep what the old code made.
CODE_DIGEST = source_digest()
# and the scores: the code that computes them (rnmt.evaluate.SCORED_BY), so a scorer fixed scores again
SCORER_DIGEST = source_digest(*SCORED_BY)
# the translations, gate statistics and detokenized translations: the code that makes them (rnmt.decode's
# DECODED_BY and POSTPROCESSED_BY), so a search, model or detokenizer fixed decodes again (the models stay)
DECODER_DIGEST = source_digest(*DECODED_BY)
GATES_DIGEST = source_digest(*DECODED_BY, "evaluate/gates.py")
POSTPROCESS_DIGEST = source_digest(*POSTPROCESSED_BY)

# what a table's command is told of the run (the full table's and the partial table's)
TABLE_PARAMS = dict(
    code=CODE_DIGEST,
    corpus=lambda wc: PLAN.table(wc.table).corpus or "",
    max_seeds=PLAN.max_seeds or 0,
    seeds=PLAN.seeds or 0,
    run=PLAN.run,
    scale=PLAN.scale,
    scale_note=PLAN.scale_settings.get("note", ""),
)


def finished(paths):
    """The files of `paths` that exist: a partial table reads what its run has finished and starts nothing."""
    return [p for p in paths if Path(p).is_file()]


def current(table, paths):
    """The files of `paths` that exist and whose row member's metrics were made with the run's settings now
    (a metrics file .../<variant>/<member>/<testset>.json; a gates file .../<variant>/seed<N>/gates.*.json)."""
    stale = {member_of(p) for p in outdated(table_expected(PLAN, table))}
    return [p for p in finished(paths) if member_of(p) not in stale]
