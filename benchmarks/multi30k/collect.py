"""Mini-scale tables on Multi30k with each row's BLEU on the validation set, as a measured result.

    snakemake --cores 2 results/mini/tables/atr-table4.csv --config scale=mini run=mini
    python benchmarks/multi30k/collect.py --table atr-table4

The table's rows are decoded a second time, on the 1,014 validation pairs with the row's own beam search
(Snakemake makes `results/mini/metrics/<corpus>/<variant>/<member>/dev.json`; the script asks for them),
and the script writes `benchmarks/multi30k/<table>.csv` (the table's tidy CSV), `<table>.md` (its
Markdown), `<table>.claims.csv` (the paper's claims, checked), `<table>.png` (a figure's plot) and
`<table>-bleu.csv`: per row, training steps, why training stopped, the kept step, greedy dev BLEU at that
step, detokenized BLEU with beam search on the validation set and on each test set, the machine it
trained on, the rnmt commits that trained it (`trained_by`) and its test translation's sha256 (which the
index compares with the member kept in rows/). `--seeds N` is the run's seeds a row (its
`scales={mini: {seeds: N, max_seeds: N}}`;
`--max-seeds M` where its cap differs, as for an ensemble of 2 over rows of 1 seed);
`--partial` collects a run that ended early: the rows that finished with the run's settings now, from
Snakemake's partial table (results/<run>/tables/partial/), the others marked.

A table's rows may come from several sessions and machines: `rows/` keeps every collected row member's
metrics files and translations (no models; `rnmt.report.kept`), and collecting a table first restores the
kept members the run lacks (its data made first; a member scored on other data is left out, saying why),
trains what is still missing (none with `--partial`), then builds the table from both with Snakemake's
partial-table rule, allowed to train nothing, and keeps the run's members. `--keep-only` only keeps the
run's finished members (those of a GPU loan's run, or seeds toward a table that needs more sessions) and
leaves the table's files as they are; `--restore-only` only restores, and prints the metrics files still
to make (a GPU loan's targets, benchmarks/gpu/mini-on-one-gpu.sh). The training logs and gate statistics
that UD Figure 2 and ATR Figure 3 draw are kept with their members; a figure against training time (SR-NMT
Figure 3) compares on one machine only, so it is collected from its run alone. A member kept without the
gate statistics a figure draws, whose model is not here, is trained again whole (its metrics and gates one
model's), and a dev.json of another training than its test.json is decoded again. What is stale is judged by
the config the run was built with (results/<run>/config.yaml), as Snakemake builds it.

After collecting, the
index of this folder, `benchmarks/multi30k/README.md` (every table of the four papers: rows with numbers,
seeds, machine, training time, the claims' verdicts, the row members still to train for the scale's
seeds a row with their estimated hours, and the command for what is missing), is written
again from the folder's files; `--index` writes only the index.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ROWS = HERE / "rows"        # the row members behind these tables: metrics and translations (rnmt.report.kept)
RESULTS = ROOT / "results"  # the runs, each with the config it was built with
sys.path.insert(0, str(ROOT / "src"))     # this checkout's rnmt, before any installed one
UNPOOLED = ("perplexity",)    # a figure against training time: its curves compare on one machine, so from one run


def one_run(table: Any) -> bool:
    """Whether `table` is made from one run's models alone (UNPOOLED), not from kept members and its own."""
    return (table.figure or {}).get("kind") in UNPOOLED


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", action="append", help="a table to collect (again for several; default atr-table4)")
    ap.add_argument("--run", default="mini")
    ap.add_argument("--cores", default="2")
    ap.add_argument("--seeds", type=int, default=0, help="the run's seeds a row (default: the scale's)")
    ap.add_argument("--max-seeds", type=int, default=0, help="the run's cap on seeds a row (default: --seeds)")
    ap.add_argument("--partial", action="store_true", help="the rows that finished, the others marked")
    ap.add_argument("--keep-only", action="store_true",
                    help="only keep the run's finished row members in rows/, for a later session's table")
    ap.add_argument("--restore-only", action="store_true",
                    help="only restore the kept members into the run; print the metrics files still to make")
    ap.add_argument("--index", action="store_true", help="only write the index README.md from this folder")
    a = ap.parse_args()
    from rnmt.io import InputError

    try:
        if not a.index:
            for table in a.table or ["atr-table4"]:
                collect(table, a.run, a.cores, a.seeds, a.partial, a.max_seeds or a.seeds,
                        "keep" if a.keep_only else "restore" if a.restore_only else "collect")
        (HERE / "README.md").write_text(index())
    except (InputError, subprocess.CalledProcessError) as e:
        sys.exit(f"collect.py: {e}")


def _plan(run: str, seeds: int = 0, tables: list[str] | None = None, max_seeds: int = 0, recorded: bool = False
          ):  # -> rnmt.planning.plan.Plan
    """The project's plan of `run` at scale mini from config.yaml (its `tables:`, every paper's, unless
    `tables` names some), with `seeds` a row and at most `max_seeds` (default `seeds`) where given; with
    `recorded`, from the config the run was built with where it has a record (results/<run>/config.yaml), as
    Snakemake builds it, so that what this script calls stale is what Snakemake retrains."""
    import yaml

    from rnmt.planning import runconfig
    from rnmt.planning.plan import Plan

    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    explicit: dict[str, Any] = {"scale": "mini", "run": run, **({"tables": tables} if tables else {})}
    if seeds:
        explicit["scales"] = {"mini": {"seeds": seeds, "max_seeds": max_seeds or seeds}}
        config["scales"]["mini"] = {**config["scales"]["mini"], **explicit["scales"]["mini"]}
    config = {**config, **{k: v for k, v in explicit.items() if k != "scales"}}
    if recorded:
        config, notes = runconfig.resolve(config, explicit, RESULTS)
        for note in notes:
            print(f"collect.py: note: {note}", file=sys.stderr)
    return Plan(config, ROOT)


def collect(name: str, run: str, cores: str, seeds: int, partial: bool, max_seeds: int = 0,
            mode: str = "collect") -> None:
    """Collect table `name` of run `run` into this folder (`mode` "collect"), or only keep the run's finished
    members in rows/ ("keep"), or only restore the kept members into the run and print the metrics files
    of those still to make, one a line, for a GPU loan's Snakemake targets ("restore")."""
    override = [f"scales={{mini: {{seeds: {seeds}, max_seeds: {max_seeds or seeds}}}}}"] if seeds else []
    plan = _plan(run, seeds, [name], max_seeds, recorded=True)
    table = plan.table(name)
    results = ROOT / plan.results
    metrics = f"{plan.results}/metrics/{table.corpus}"
    from rnmt.io import InputError, read_json
    from rnmt.planning.current import differences, expected, made_with, member_of, outdated, table_expected
    from rnmt.report import kept

    config_args = ["--config", "scale=mini", f"run={run}", *override]
    snakemake = [sys.executable, "-m", "snakemake", "--cores", cores]
    everyone = [(table.corpus, r.variant, m) for r in table.trained_rows for m in r.members()]
    # rows/ holds metrics, translations, training logs and gate statistics; a time axis is one machine's
    pooled = not one_run(table)
    if pooled:      # the data the kept rows and the run's own were scored on (a GPU loan's run comes without)
        need = sorted(set(kept.data_files(ROWS, everyone)) | set(kept.data_files(results, everyone)))
        if missing := [f"{plan.results}/{p}" for p in need if not (results / p).is_file()]:
            subprocess.run([*snakemake, *missing, *config_args], cwd=ROOT, check=True, stdout=sys.stderr)
    if pooled and mode != "keep":               # the rows kept by earlier sessions, where this run lacks them
        print(kept.restore(ROWS, results, everyone).summary("Restored"), file=sys.stderr)
    # made with other settings than the run's now: asking for their files would retrain them
    stale = {member_of(p) for p in outdated(table_expected(plan, name), ROOT)} if partial or pooled else set()
    gates = plan.gates_paths(name)
    # kept without the gate statistics a figure draws, and its model not here: trained again whole (unless
    # partial), so that its metrics and its gates are one model's, and the kept member replaced
    regated = {member_of(g) for g in gates if pooled and not partial and mode != "keep" and not (ROOT / g).is_file()
               and not (results / "models" / table.corpus / Path(*member_of(g)) / "model.pt").is_file()}
    for v, m in sorted(regated):
        if (ROOT / f"{metrics}/{v}/{m}/test.json").is_file():
            print(f"collect.py: {v} {m} was kept without the gate statistics {name} draws, and its model is not "
                  "here: training it again", file=sys.stderr)
    stale |= regated

    def done(variant: str, m: str) -> bool:
        return (ROOT / f"{metrics}/{variant}/{m}/test.json").is_file() and (variant, m) not in stale

    def one_model(variant: str, m: str) -> bool:
        """Whether the member's dev.json, where there is one, is of the model its test.json is (a model trained
        again for test.json alone leaves the dev.json of the one before)."""
        test, dev = (ROOT / f"{metrics}/{variant}/{m}/{s}.json" for s in ("test", "dev"))
        return not dev.is_file() or kept.one_training([read_json(f) for f in (test, dev)])

    members = [(r, m) for r in table.trained_rows for m in r.members()
               if not (partial or mode == "keep") or done(r.variant, m)]

    def keep() -> None:
        """The run's members of `members` into rows/, each replacing a kept one made with other settings."""
        def outdated_kept(r: Any, m: str) -> bool:
            """Kept with other settings than the run's now, or from other data than the run's (restore left it
            out, so the run trained it again)."""
            f = ROWS / "metrics" / table.corpus / r.variant / m / "test.json"
            return f.is_file() and (bool(differences(expected(plan.variant(table.corpus, r.variant)), m,
                                                     read_json(f)))
                                    or bool(kept.other_data(ROWS, results, (table.corpus, r.variant, m))))

        print(kept.keep(results, [(table.corpus, r.variant, m) for r, m in members], ROWS,
                        replace=[(table.corpus, r.variant, m) for r, m in members
                                 if outdated_kept(r, m) or (r.variant, m) in regated])
              .summary("Kept"))

    if mode == "keep":
        keep()
        return
    tables = results / "tables" / ("partial" if partial or pooled else "")
    figure = results / "figures" / f"{name}.png" if table.figure and not partial else None
    if pooled:      # what is missing or stale (trained unless partial), and the run's own decodings of dev
        targets = [f"{metrics}/{r.variant}/{m}/{s}.json" for r, m in members for s in ("test", "dev")
                   if not done(r.variant, m) or not (ROOT / f"{metrics}/{r.variant}/{m}/{s}.json").is_file()
                   or s == "dev" and not one_model(r.variant, m)]
        training = {(r.variant, m) for r, m in members if not done(r.variant, m)}
        targets += gates_to_make(gates, plan.results, partial, training)
    else:
        targets = [f"{metrics}/{r.variant}/{m}/dev.json" for r, m in members]
        targets.append(str((tables / f"{name}.md").relative_to(ROOT)))
    if figure and not pooled:                   # SR-NMT Figure 3's perplexity against training time
        targets.append(str(figure.relative_to(ROOT)))
    if mode == "restore":
        print("\n".join(targets))
        return
    if targets:
        subprocess.run([*snakemake, *targets, *config_args], cwd=ROOT, check=True)
    if pooled:                                  # the table of the members whose metrics are here, training none
        stale = {member_of(p) for p in outdated(table_expected(plan, name), ROOT)}
        whole = all(done(r.variant, m) for r, m in members) and all((ROOT / g).is_file() for g in gates)
        members = [(r, m) for r, m in members if done(r.variant, m)]
        # a figure (BLEU by source length, cost, gates) is drawn with the whole table, once every row is here
        figure = figure if figure and whole else None
        figures = [str(figure.relative_to(ROOT))] if figure else []
        subprocess.run([*snakemake, str((tables / f"{name}.md").relative_to(ROOT)), *figures, "--allowed-rules",
                        "partial_table", "cell_counts", *(["table", "figure"] if figure else []), *config_args],
                       cwd=ROOT, check=True)
    rows = []
    for r, m in members:
        d, t = (read_json(ROOT / f"{metrics}/{r.variant}/{m}/{s}.json") for s in ("dev", "test"))
        if not kept.one_training([d, t]):
            raise InputError(f"{metrics}/{r.variant}/{m}: dev.json and test.json were decoded from different "
                             "trainings of the model: make both again from the model now (snakemake <both files> "
                             "--config ...), then collect")
        train = t["train"]
        models = train.get("members") or [train]        # an ensemble: its members' training, each
        rows.append({"system": r.system, "variant": r.variant, "member": m, "params_m": train["params"] / 1e6,
                     "steps": "/".join(str(x["steps"]) for x in models),
                     "stop_reason": "/".join(dict.fromkeys(x["stop_reason"] for x in models)),
                     "train_minutes": sum(x["train_seconds"] for x in models) / 60,
                     "kept_step": "/".join(str(x["best_step"]) for x in models),
                     "greedy_dev_bleu": train.get("best_dev_bleu_greedy"), "dev_bleu": d["scores"].get("bleu"),
                     "test_bleu": t["scores"].get("bleu"),      # none where the model gave no output
                     **{f"test_{k}": v for k, v in (t["scores"].get("bleu_by_part") or {}).items()},
                     "beam": d["decode"].get("beam"), **machine(models[0]["hardware"]),
                     "trained_by": trained_by(models), "test_sha256": translation_sha256(t),
                     "made_with": json.dumps(made_with(t), sort_keys=True)})
    out = pd.DataFrame(rows).round(3)
    if pooled and members:      # kept for the next session's table; first, so a refusal leaves the table as it was
        keep()
    if rows:                                    # a table counted from the cells (ATR Table 1) trains nothing
        out.to_csv(HERE / f"{name}-bleu.csv", index=False)
    for ext in ("csv", "md", "claims.csv"):
        if (tables / f"{name}.{ext}").is_file() or ext != "claims.csv":
            shutil.copy(tables / f"{name}.{ext}", HERE / f"{name}.{ext}")
    if figure:
        shutil.copy(figure, HERE / figure.name)
    if rows:
        print(out.to_string(index=False))


def gates_to_make(gates: list[str], results: str, partial: bool, training: set[tuple[str, str]],
                  root: Path = ROOT) -> list[str]:
    """The gate statistics ATR Figure 3 reads (<results>/analysis/<corpus>/<variant>/seed<N>/gates.<set>.json)
    to make from their models: those of the (variant, seed<N>) members `training` (missing or stale, so
    trained in this call, and none with `partial`), those missing (with `partial`, only where the model is
    here) and those older than the model they are made from (a model trained again for another table that
    shares it). The table is built with Snakemake told to run no rule but the table's, which takes a gates
    file as it finds it."""
    out = []
    for g in gates:
        folder = Path(g).relative_to(f"{results}/analysis").parent           # <corpus>/<variant>/seed<N>
        model, made = root / results / "models" / folder / "model.pt", root / g
        if (folder.parent.name, folder.name) in training:
            make = not partial
        elif not made.is_file():
            make = not partial or model.is_file()
        else:
            make = model.is_file() and model.stat().st_mtime > made.stat().st_mtime
        if make:
            out.append(g)
    return out


def trained_by(models: list[dict]) -> str:
    """The rnmt commits that trained a member's models (`rnmt.report.trainings.commits`: 10 digits, `+` with
    uncommitted changes, `then` where a resumed training changed code), models joined by `/`: whether a
    row's seeds ran the same code is read from here."""
    from rnmt.report.trainings import commits

    return " / ".join(" then ".join(commits(t)) for t in models)


def translation_sha256(metrics: dict) -> str:
    """The sha256 of the detokenized translation a test metrics file scored (as it recorded it): what ties a
    committed table's number to the kept member that made it."""
    files = metrics.get("files") or {}
    return (files.get("sha256") or {}).get(files.get("hyp", ""), "")


def committed_not_kept(folder: Path, corpus: str, bleu: pd.DataFrame) -> list[tuple[str, str, str]]:
    """(system, member, why) of the rows of a committed `-bleu.csv` whose number is not the member kept in
    `folder/rows/`: not kept (the number cannot be rebuilt), or kept from another decoding (another training:
    its translation's sha256, or for a file written before it recorded one, its test BLEU, differs)."""
    out = []
    for r in bleu.itertuples():
        kept_file = folder / ROWS.name / "metrics" / corpus / r.variant / r.member / "test.json"
        if not kept_file.is_file():
            out.append((r.system, r.member, "not kept in rows/: the table's number cannot be rebuilt"))
            continue
        kept_metrics = json.loads(kept_file.read_text())
        theirs, ours, sha = kept_metrics.get("scores", {}).get("bleu"), r.test_bleu, getattr(r, "test_sha256", None)
        if isinstance(sha, str) and sha:
            same = sha == translation_sha256(kept_metrics)
        else:               # no output is NaN in the CSV, no `bleu` in the metrics
            same = ours != ours if theirs is None else round(theirs, 3) == ours
        if not same:
            out.append((r.system, r.member, "the kept member is another decoding (test BLEU "
                        f"{'no output' if theirs is None else f'{theirs:.2f}'}, the table's "
                        f"{'no output' if ours != ours else f'{ours:.2f}'})"))
    return out


def machine(hardware: dict) -> dict:
    """Where a model trained: device, GPU or CPU name, the CPU's family and model numbers, vector instructions
    and number format where the run recorded them (older runs did not), threads, and the machine's mean load
    average over the training (what else ran beside it; older runs did not record it)."""
    return {"device": hardware["device"], "gpu": hardware.get("gpu"), "cpu": hardware["cpu"],
            "cpu_family_model": hardware.get("cpu_family_model"), "cpu_isa": hardware.get("cpu_isa"),
            "bf16": hardware.get("bf16_autocast"),
            "threads": hardware["torch_threads"], "load_avg": hardware.get("load_avg")}


def _machines(bleu: pd.DataFrame) -> str:
    names = set()
    for r in bleu.to_dict("records"):
        if isinstance(r.get("gpu"), str):
            names.add(r["gpu"])
        else:
            family, isa = r.get("cpu_family_model"), r.get("cpu_isa")
            extra = [x for x in (family, isa) if isinstance(x, str)] + (["bf16"] if r.get("bf16") is True else [])
            names.add(f"{r['cpu']} CPU" + (f" ({', '.join(extra)})" if extra else ""))
    return "; ".join(sorted(names))


def _training_minutes(folder: Path, plan: Any, names: list[str],
                      kept: set[tuple[str, str, str]]) -> dict[tuple[str, str], float]:
    """(corpus, variant) → the median training minutes of its one-seed members in this folder's `-bleu.csv`
    files and, for a member of `kept` (rows/' members) no table lists yet (kept toward a row still short of
    seeds), in its kept metrics (`train.train_seconds`); each member once though several tables list it (an
    ensemble's minutes are its seeds')."""
    from rnmt.io import read_json
    from rnmt.report.store_layout import member_folders

    seen: dict[tuple[str, str], dict[str, float]] = {}
    for name in names:
        path = folder / f"{name}-bleu.csv"
        if path.is_file():
            bleu = pd.read_csv(path)
            for r in bleu.dropna(subset=["train_minutes"]).itertuples():
                if str(r.member).startswith("seed"):
                    seen.setdefault((plan.table(name).corpus, r.variant), {})[r.member] = float(r.train_minutes)
    for corpus, variant, member in sorted(kept):
        path = member_folders(folder / ROWS.name, (corpus, variant, member))[0] / "test.json"
        if member.startswith("seed") and member not in seen.get((corpus, variant), {}) and path.is_file():
            seconds = read_json(path).get("train", {}).get("train_seconds")
            if isinstance(seconds, (int, float)):
                seen.setdefault((corpus, variant), {})[member] = seconds / 60
    return {k: float(pd.Series(list(v.values())).median()) for k, v in seen.items()}


def _hours(members: set[tuple[str, str, str]], minutes: dict[tuple[str, str], float]) -> str:
    """The estimated one-core hours of training `members` (corpus, variant, member), and how many have none."""
    if not members:
        return "–"
    known = [minutes[(c, v)] for c, v, _ in members if (c, v) in minutes]
    unknown = len(members) - len(known)
    return (f"{sum(known) / 60:.1f} h" if known else "") + (
        f"{' + ' if known else ''}{unknown} never measured" if unknown else "")


def _kept_outdated(plan: Any, store: Path, members: set[tuple[str, str, str]]) -> dict[tuple[str, str, str], str]:
    """Of the kept `members`, those a run leaves out of a table, so that they are trained again, with why: made
    with other settings than the run gives their rows now (their metrics against
    `rnmt.planning.current.expected`), or made from other data than the other kept members of their corpus
    (`restore` leaves out a member whose data differ from the run's; this folder has no run, so the data
    most of its corpus' kept members record stand for the run's, where more record them than any other)."""
    import contextlib
    from collections import Counter

    from rnmt.io import InputError, read_json
    from rnmt.planning.current import differences, expected
    from rnmt.report.kept import made_from
    from rnmt.report.store_layout import member_folders

    out = {}
    data: dict[tuple[str, str, str], dict[str, str]] = {}
    for corpus, variant, member in sorted(members):
        metrics = member_folders(store, (corpus, variant, member))[0] / "test.json"
        if (corpus, variant) in plan.variants and metrics.is_file() and (why := differences(
                expected(plan.variant(corpus, variant)), member, read_json(metrics))):
            out[(corpus, variant, member)] = f"made with other settings: {'; '.join(why)}"
        with contextlib.suppress(InputError):     # a record without the data it was made from: nothing to compare
            data[(corpus, variant, member)] = made_from(store, (corpus, variant, member))
    for corpus in {c for c, _, _ in data}:
        mine = {m: d for m, d in data.items() if m[0] == corpus}
        shas: dict[str, Counter] = {}
        for d in mine.values():
            for rel, sha in d.items():
                shas.setdefault(rel, Counter())[sha] += 1
        # a file's usual sha256: the one most members record, where it is more than any other's (a tie picks none)
        usual = {rel: top[0][0] for rel, c in shas.items()
                 if len(top := c.most_common(2)) == 1 or top[0][1] > top[1][1]}
        for m, d in mine.items():
            if other := sorted(rel for rel, sha in d.items() if usual.get(rel, sha) != sha):
                out.setdefault(m, f"made from another {other[0]} than the other kept members of {corpus}")
    return out


def index(folder: Path = HERE) -> str:
    """The folder's index: for every table of the four papers (config.yaml's `tables:`), what
    was trained at `mini` on real text, from the committed `<table>.csv`, `-bleu.csv` and `.claims.csv`
    alone, so it says no more than those files do."""
    plan = _plan("mini")
    # a table on the synthetic pair at `mini` too (the label path's check, whose gold labels exist only
    # there) is no paper table on real text: it is named apart
    sources = {n: str(plan.corpora_config.get(plan.table(n).corpus, {}).get("source", "")) for n in plan.tables}
    synthetic = sorted(n for n, source in sources.items() if source.startswith("synthetic:"))
    names = sorted(set(plan.tables) - set(synthetic))
    from rnmt.planning.current import differences, expected
    from rnmt.report.kept import kept_members

    summary, claims_lines, missing, earlier, kept, left, unkept = [], [], [], [], [], [], []
    rebuild: dict[str, int] = {}       # a table whose committed numbers are not the kept members': its seeds
    every_kept = set(kept_members(folder / ROWS.name))
    stale = _kept_outdated(plan, folder / ROWS.name, every_kept)
    held = every_kept - set(stale)                              # an outdated kept member is trained again
    minutes = _training_minutes(folder, plan, names, every_kept)
    needed_all: set[tuple[str, str, str]] = set()
    for name in names:
        table = plan.table(name)
        members = [(r.system, m) for r in table.trained_rows for m in r.members()
                   if (table.corpus, r.variant, m) in every_kept]
        earlier_kept = sum((table.corpus, r.variant, m) in stale for r in table.trained_rows for m in r.members())
        # the models to train: an ensemble's are its seeds' (it is decoded, not trained)
        needed = {(table.corpus, r.variant, f"seed{s}") for r in table.trained_rows for s in r.seeds}
        # an ensemble not kept is decoded from its models, which rows/ does not keep: the run that decodes it
        # trains them all, kept or not
        ensembled = {(table.corpus, r.variant, f"seed{s}") for r in table.trained_rows if r.ensemble
                     and not all((table.corpus, r.variant, m) in held for m in r.members()) for s in r.seeds}
        if needed:
            # a one-run figure retrains every model; a table the ones not kept and an unkept ensemble's
            todo = needed if one_run(table) else (needed - held) | ensembled
            needed_all |= todo
            left.append(f"| `{name}` | {len(todo)} of {len(needed)}{' (in one run)' if one_run(table) else ''} | "
                        f"{_hours(todo, minutes)} |")
        if members and not one_run(table):
            n = sum(len(r.members()) for r in table.trained_rows)
            kept.append(f"| `{name}` | {len(members)} of {n}"
                        + (f" ({earlier_kept} made with earlier settings or other data: to train again)"
                           if earlier_kept else "") + " | "
                        + ", ".join(f"{s} {', '.join(m for x, m in members if x == s)}"
                                    for s in dict.fromkeys(s for s, _ in members)) + " |")
        planned = [r.system for r in table.trained_rows]
        path = folder / f"{name}.csv"
        if not path.is_file():
            # a row whose model is kept (another table's, the same variant) needs no training for one seed
            bare = list(dict.fromkeys(r.variant for r in table.trained_rows
                                      if not any((table.corpus, r.variant, f"seed{s}") in held for s in r.seeds)))
            missing.append(f"- {table.title} (`{name}`): {len(planned)} rows, "
                           + (f"{len(bare)} with no model kept: {', '.join(f'`{v}`' for v in bare)}" if bare
                              else "each with a model kept"))
            continue
        df = pd.read_csv(path)
        done = df[df.system.isin(planned)].groupby("system", sort=False).ours.count()
        rows_done = int((done > 0).sum())
        bleu_path = folder / f"{name}-bleu.csv"
        bleu = pd.read_csv(bleu_path) if bleu_path.is_file() else pd.DataFrame()
        # the seeds each row trained (a seed that gave no output too), from the members its -bleu.csv lists;
        # whole: every row's members at the scale's seeds (an ensemble's is one), whatever their numbers
        have = (bleu.groupby("system").member.agg(lambda ms: set(map(str, ms))) if "member" in bleu
                else pd.Series(dtype=object))
        counted = [sum(m.startswith("seed") for m in have.get(r.system, set())) for r in table.trained_rows
                   if not r.ensemble and r.system in done[done > 0].index]
        seeds = (f"{min(counted)}" if min(counted) == max(counted) else f"{min(counted)}–{max(counted)}"
                 ) if counted else "–"
        complete = all(set(r.members()) <= have.get(r.system, set()) for r in table.trained_rows)
        hours = f"{bleu.train_minutes.sum() / 60:.1f} h" if len(bleu) else "–"
        claims_path = folder / f"{name}.claims.csv"
        claims = pd.read_csv(claims_path).groupby("claim", sort=True).first() if claims_path.is_file() else None
        if not table.claims:
            verdicts = "the paper states none to check"
        elif claims is None or claims.empty:
            verdicts = "not checked: collected before its claims were written (collect it again)"
        else:
            verdicts = ", ".join(f"{n} {v}" for v, n in claims.claim_verdict.value_counts(sort=False).items())
            for c in claims.itertuples():
                claims_lines.append(f"| `{name}` | {c.says} | {c.claim_verdict} |")
        if "made_with" in bleu:                 # what each row ran with, against what the run gives it now
            changed = {(r.system, r.member): differences(expected(plan.variant(table.corpus, r.variant)), r.member,
                                                        json.loads(r.made_with))
                       for r in bleu.itertuples()}
            changed = {k: v for k, v in changed.items() if v}
            current = f"no: {len(changed)} of {len(bleu)} (below)" if changed else "yes"
            earlier += [f"| `{name}` | {system} ({member}) | {'; '.join(why)} |"
                        for (system, member), why in changed.items()]
        else:
            # collected before a row kept what it ran with: it may well be earlier settings (DTMT's eps)
            current = ("not recorded: collected before rows kept their settings, so perhaps earlier ones"
                       if len(bleu) else "–")
        # whole: every row with numbers over the scale's seeds; a row of fewer seeds is not the table asked for
        status = ("partial" if rows_done < len(planned) else
                  "whole" if complete else f"every row, some of fewer than {plan.seeds} seeds")
        if not planned:
            status = "counted from the cells, nothing to train"
        done_cell = f"{rows_done} of {len(planned)} ({status})" if planned else status
        # a pooled table's numbers are rebuilt from rows/: a member not kept there, or kept from another
        # training, makes a table that the kept rows no longer give
        apart = committed_not_kept(folder, table.corpus, bleu) if len(bleu) and not one_run(table) else []
        unkept += [f"| `{name}` | {system} ({member}) | {why} |" for system, member, why in apart]
        if apart:                       # rebuilt at the seeds its rows have: more would leave them empty
            rebuild[name] = min(counted) if counted else plan.seeds
        from_kept = ("from one run" if one_run(table) else f"no: {len(apart)} of {len(bleu)} (below)" if apart
                     else "yes" if len(bleu) else "–")
        summary.append(f"| {table.title} (`{name}`) | {done_cell} | {seeds} | "
                       f"{_machines(bleu) if len(bleu) else '–'} | {hours} | {current} | {from_kept} | {verdicts} |")
    out = ["# The papers' tables at `mini`, on real text (Multi30k)", "",
           "Written by `python benchmarks/multi30k/collect.py --index` from this folder's files (a test checks it "
           "matches them). Each table's `<table>.md` gives its numbers, notes and claims; `<table>-bleu.csv` its "
           "rows' training and decoding; `benchmarks/README.md` the sessions that ran them, with their commands.",
           "", f"## Built ({len(summary)} of {len(names)} tables)", "",
           "| Table | Trained rows with numbers | Seeds a row | Trained on "
           "| Training time (sum over rows; an ensemble counts its models again) "
           "| Made with the settings a run gives now | Its numbers are the kept members' | Claims' verdicts |",
           "|---|---|---:|---|---:|---|---|---|", *summary, "",
           "Seeds a row: the fewest and most that its rows with numbers trained (an ensemble's aside; a seed that "
           f"gave no output counts); a table is whole once every row has {plan.seeds} (the scale's seeds a row; an "
           "ensemble its one decoding). "
           "The settings column compares what each row's models and search ran with (kept in `<table>-bleu.csv` "
           "since it was written) with what `workflow/` gives them now; a row made with earlier settings is "
           "listed below, and its table is collected again after `snakemake` retrains it. The kept-members "
           f"column compares each row member's translation (its sha256, or before the `-bleu.csv` recorded it, "
           f"its test BLEU) with the member kept in {ROWS.name}/, from which the table is built again; a "
           "member that differs is listed below.", "",
           *(["## Committed numbers that are not the kept members'", "",
              "A table collected before its rows were kept, or from a decoding that a later one replaced in "
              f"{ROWS.name}/. Where the kept member is another decoding, "
              + ", ".join(f"`python benchmarks/multi30k/collect.py --table {n} --seeds {s} --partial`"
                          for n, s in rebuild.items())
              + " builds the table again from the kept members, at the seeds a row it has. A member not "
              "kept cannot be rebuilt: train it again and keep it (`--keep-only`) first, or the rebuilt table "
              "shows its row without numbers.", "",
              "| Table | Row (member) | Why |", "|---|---|---|", *unkept, ""] if unkept else []),
           *(["## Rows made with earlier settings than a run gives now", "", "| Table | Row | What changed |",
              "|---|---|---|", *earlier, ""] if earlier else []),
           "## The papers' claims, checked at `mini`", "",
           "Verdicts from the paired bootstrap intervals of each table's claims section (holds: the whole 95% "
           "interval on the claim's side; not separable: it straddles zero; no numbers: a row is not trained, or "
           "the test has no sentence of a source length; not comparable: speeds timed on different machines, or "
           "one of them at an unknown load, a model that did not learn to translate, or a BLEU over fewer than "
           "100 test sentences).",
           "", "| Table | Claim | Verdict |", "|---|---|---|", *claims_lines, "",
           *([f"## Row members kept for the next session ({ROWS.name}/)", "",
              f"Their metrics files and translations, training logs and gate statistics, without models "
              f"(`rnmt.report.kept`): collecting a table "
              f"restores them into the run where it lacks them, and the table's rows are built from them and the "
              f"run's own (a row shows numbers once all its seeds are there; {plan.seeds} a row at `mini`).", "",
              "| Table | Members kept | Which |", "|---|---:|---|", *kept, "",
              *(["Kept members that a run leaves out, to train again:", "",
                 *(f"- {v} {m} (`{c}`): {why}" for (c, v, m), why in sorted(stale.items())), ""] if stale else [])
              ] if kept else []),
           f"## Left to train for {plan.seeds} seeds a row", "",
           "The models neither kept in rows/ with the settings a run gives them now nor, for a figure made in "
           "one run, anywhere: every one a table at "
           f"{plan.seeds} seeds a row still needs (an ensemble's models are its seeds', trained again in the run that "
           "decodes it unless the ensemble is kept, as models are not; a row's members committed "
           "in a table but not kept are trained again). The time is one core's, estimated from the training "
           "minutes measured for the same model (corpus and variant) in this folder's `-bleu.csv` files and, for "
           "members no table lists yet, in their metrics kept in rows/ (their median, on the machines the Built "
           "table or the kept metrics name), decoding not counted.", "",
           "| Table | Models left | Training time left (estimated) |", "|---|---:|---:|", *left, "",
           f"The tables share models (DTMT's Tables 1-6 their three systems, SR-NMT Figure 3 two of Table 2's "
           f"in one run): {len(needed_all)} distinct models left, {_hours(needed_all, minutes)}. A session trains them "
           "by `snakemake --cores 2 <their metrics files> --config scale=mini run=mini "
           "\"scales={mini: {seeds: 3, max_seeds: 3}}\"` "
           "and keeps them by `python benchmarks/multi30k/collect.py --table <table> --seeds 3 --keep-only` "
           "(benchmarks/README.md has the commands of each session).", ""]
    if missing:                     # once every table is built, no empty section and its recipe
        out += [f"## Not trained yet ({len(missing)} tables)", "", *missing, "",
                "Each is made by `snakemake --cores 2 results/mini/tables/<table>.csv --config scale=mini run=mini` "
                "(add `\"scales={mini: {seeds: 1, max_seeds: 1}}\"` for one seed a row), then "
                "`python benchmarks/multi30k/collect.py --table <table>` (with `--seeds 1`); on a GPU, "
                "`benchmarks/gpu/mini-on-one-gpu.sh` (benchmarks/gpu/README.md). The UD tables need a parser: "
                "`parse:` in benchmarks/README.md's UD section.", ""]
    if synthetic:
        out += ["## Not the papers' tables", "",
                *(f"- {plan.table(n).title} (`{n}`): a check on the synthetic pair at every scale, its corpus "
                  f"(`{plan.table(n).corpus}`) has no real text at `mini`" for n in synthetic), ""]
    return "\n".join(out)


if __name__ == "__main__":
    main()
