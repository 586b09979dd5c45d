"""Rows kept beyond their run: a store of decoded row members' metrics files and translations, without
their models.

A table at `mini` needs three seeds a row, more training than one CPU session or one GPU loan gives, and a
run's folder does not outlive the machine it ran on. `keep` copies what a table reads of each finished
row member (its metrics files, `<testset>.json`, and the translations they scored, gzipped) out of a run's
folder into a store (a folder a repository can hold: about 0.1 MB a member); `restore` puts them back into
another run's folder, where that run has neither metrics nor a model of its own for the member, so that the
next session's table is built from the members kept before and its own. The store mirrors a run folder's
layout (`metrics/<corpus>/<variant>/<member>/` and `translations/<corpus>/<variant>/<member>/`), so the
relative paths a metrics file records still hold after a restore. What a figure reads beside a one-seed
member's metrics goes with it (`beside/<corpus>/<variant>/<member>/`: its model's training log, UD Figure
2's cost, and gate statistics, ATR Figure 3's), with their sha256 as kept (`sha256.json`), so that those
figures' seeds can come from several sessions too. Where each of these lies: `rnmt.report.store_layout`.

A restored member is only a row of the table if it is still what the run would make: each metrics file
records the sha256 of the references and source it scored and of the files its models trained on (with
where they were, since train.json records it), and a member made from other data than the run's now is not
restored (the reason is reported); one made with other settings is restored but left out of the
table by the table command's own check (`rnmt.planning.current`), which says what changed. A store is
input from elsewhere (a colleague's, an older commit's): its names must be plain folder names, with no
symbolic link below the store (a link would lead `keep`'s deletes and writes, or `restore`'s reads,
outside it); a metrics file must be its own member's and test set's (as it records them), every path it
records must be either the member's own translations or the run's data (`data/`), and only files inside
the member's own translations folder are ever read from it or written by it. The metrics files of one
member (test.json, dev.json) must come from the same trained models.
"""

from __future__ import annotations

import gzip
import json
import shutil
import zlib
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from rnmt.evaluate.metrics import verify_scored
from rnmt.io import InputError, atomic_writer, read_json, sha256_of, write_json
from rnmt.planning.table import member_seeds
from rnmt.report.store_layout import (
    NAME,
    Member,
    beside_files,
    beside_folder,
    beside_path,
    checked_member,
    member_folders,
    recorded_beside,
    seed_folder,
)


@dataclass
class Outcome:
    """What `keep` or `restore` did with each member: (corpus, variant, member) lists, and why not."""

    done: list[Member] = field(default_factory=list)
    present: list[Member] = field(default_factory=list)     # restore: the run has its own metrics of it
    same: list[Member] = field(default_factory=list)        # keep: the store holds these files already
    skipped: dict[Member, str] = field(default_factory=dict)

    def summary(self, verb: str) -> str:
        parts = [f"{verb} {len(self.done)}"]
        if self.present:
            parts.append(f"{len(self.present)} the run has itself")
        if self.same:
            parts.append(f"{len(self.same)} kept already")
        out = ", ".join(parts) + " row member(s)"
        return out + "".join(f"\n  not {verb.lower()}: {'/'.join(m)}: {why}" for m, why in self.skipped.items())


def _unlinked(store: Path, *paths: Path) -> None:
    """Each of `paths` (under `store`) reached without a symbolic link below the store, where it exists."""
    for path in paths:
        here = store
        for part in path.relative_to(store).parts:
            here = here / part
            if here.is_symlink():
                raise InputError(f"{here} is a symbolic link: a store's folders and files are its own (a link "
                                 f"would lead keeping and restoring outside the store); {DAMAGED}")


def _store_folders(store: Path, m: Member) -> tuple[Path, Path, Path]:
    """The store's metrics, translations and beside folders of member `m`, none of them reached by a link, nor
    any file in them."""
    folders = (*member_folders(store, m), beside_folder(store, m))
    _unlinked(store, *folders, *(f for folder in folders if folder.is_dir() for f in folder.rglob("*")))
    return folders


def _of_member(metrics_file: Path, record: dict, m: Member) -> None:
    """The metrics file is member `m`'s of the test set it is named after, as it records (`rnmt score`'s
    meta): not another row's or seed's under this member's name."""
    want = {"corpus": m[0], "variant": m[1], "member": m[2], "testset": metrics_file.stem}
    if wrong := [f"{k} {record.get(k)!r}" for k, v in want.items() if record.get(k) != v]:
        raise InputError(f"{metrics_file} records {', '.join(wrong)}: it is not {'/'.join(m)}'s metrics of "
                         f"{metrics_file.stem}, whose folder it is in; the store is not one rnmt wrote")


def _scored(metrics_file: Path, root: Path, m: Member) -> tuple[dict[str, str], dict[str, str]]:
    """({file name: sha256} of the member's own translations, {path under `root`: sha256} of the data) that
    a metrics file scored, each path checked to stay inside `root`."""
    data = read_json(metrics_file)
    recorded = (data.get("files") or {}).get("sha256")
    if not recorded:
        raise InputError(f"{metrics_file}: the metrics file does not record what it scored (an older rnmt wrote "
                         "it), so it cannot be kept or checked: rerun the run's score jobs")
    _of_member(metrics_file, data, m)
    here, own = metrics_file.parent, member_folders(root, m)[1]
    translations, data_files = {}, {}
    for rel, sha in recorded.items():
        path = (here / rel).resolve()
        if not path.is_relative_to(root.resolve()):
            raise InputError(f"{metrics_file} names {rel!r}, outside the run folder {root}: a kept row reads and "
                             "writes only inside its run's folder; this metrics file is not one rnmt wrote")
        if path.parent == own.resolve():
            translations[path.name] = sha
        elif path.is_relative_to((root / "data").resolve()):
            data_files[str(path.relative_to(root.resolve()))] = sha
        else:
            raise InputError(f"{metrics_file} names {rel!r}, which is neither {'/'.join(m)}'s own translation nor "
                             "the run's data: a member is scored on its own translations; this metrics file is "
                             "not one rnmt wrote")
    files = data["files"]
    for rel in (files.get("hyp"), (files.get("tok") or {}).get("hyp")):
        if rel is not None and (rel not in recorded or (here / rel).resolve().parent != own.resolve()):
            raise InputError(f"{metrics_file} scored {rel!r}, not one of {'/'.join(m)}'s own recorded "
                             "translations: this metrics file is not one rnmt wrote")
    return translations, data_files


def one_training(records: Collection[dict]) -> bool:
    """Whether metrics records (one member's test.json, dev.json) were made by the same trained models: a
    dev.json of a model trained over since is not this model's."""
    return len({json.dumps(r.get("train"), sort_keys=True) for r in records}) < 2


def _one_training(files: list[Path], records: dict[str, dict], m: Member) -> None:
    """`one_training` of the member's metrics files, else an error naming them and the fix."""
    if not one_training([records[f.name] for f in files]):
        names = ", ".join(sorted(f.name for f in files))
        raise InputError(f"{'/'.join(m)}: {names} in {files[0].parent} record other trainings "
                         "(one was decoded from a model trained again since): make them all again from the model "
                         "now, `snakemake <each of them> --config ...` with the run's config, then keep it")


def _trained_on(metrics_file: Path, root: Path, m: Member) -> dict[str, str]:
    """{path under `root`: sha256} of the files the member's models trained on (BPE'd text, vocabularies,
    labels), where its train.json recorded where they were (`input_files`, relative to each model's folder
    `models/<corpus>/<variant>/seed<N>`). A file outside the run folder (pretrained vectors) is not read."""
    train = read_json(metrics_file).get("train") or {}
    out = {}
    for seed, model in zip(member_seeds(m[2]), train.get("members") or [train], strict=False):
        folder = seed_folder(root, "models", m, seed)
        for role, rel in (model.get("input_files") or {}).items():
            path = (folder / rel).resolve()
            if path.is_relative_to(root.resolve()) and role in (model.get("inputs") or {}):
                out[str(path.relative_to(root.resolve()))] = model["inputs"][role]
    return out


def _metrics_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.json") if NAME.match(p.name))


def _trained_here(run: Path, m: Member, store: Path) -> bool:
    """Whether the run trained (or began to train) one of `m`'s seeds itself: its model, train.json or a
    training log is there, other than the log `store` keeps beside that seed's own member (restored with it:
    an ensemble of kept seeds restored after them is no training of the run's). Its own decoding of that
    model is the member, not a kept one."""
    for s in member_seeds(m[2]):
        folder = seed_folder(run, "models", m, s)
        if (folder / "model.pt").is_file() or (folder / "train.json").is_file():
            return True
        log = folder / "train.jsonl"
        if not log.is_file():
            continue
        try:
            kept_log = recorded_beside(store, (m[0], m[1], f"seed{s}")).get(f"seed{s}/train.jsonl")
        except InputError:          # the seed's own record is damaged: its restore says so; this member waits
            return True
        if kept_log != sha256_of(log):
            return True
    return False


def keep(run: str | Path, members: list[Member], store: str | Path, replace: Collection[Member] = ()) -> Outcome:
    """Copy each member's metrics files and the translations they scored from the run folder `run` into
    `store`. A member the store holds with other translations is refused, naming it, unless it is one of
    `replace` (a kept member made with other settings than the run's now): two results for one seed are a
    person's choice (the store's history keeps the one replaced). Every member is checked before any is
    written: a refusal leaves the store as it was, not with the members before the refused one."""
    run, store, out = Path(run), Path(store), Outcome()
    checked = []
    for m in members:
        metrics, translations = member_folders(run, m)
        files = _metrics_files(metrics)
        if not files:
            out.skipped[m] = f"no metrics files in {metrics}"
            continue
        scored, records = {}, {f.name: read_json(f) for f in files}
        for f in files:
            verify_scored(f, records[f.name])   # the translations still hold what was scored
            scored[f.name] = _scored(f, run, m)[0]
        _one_training(files, records, m)
        kept_metrics = _store_folders(store, m)[0]
        old = {f.name: _scored(f, store, m)[0] for f in _metrics_files(kept_metrics)}
        if old and old != scored and m not in replace:
            raise InputError(f"{kept_metrics} holds other translations of {'/'.join(m)} than {metrics}, made with "
                             "the same settings and data: keep the two runs' rows in different stores, or remove the "
                             "kept member first (the store's history keeps it); nothing was kept")
        # what is kept beside it, read (and so checked: a store rnmt wrote) before anything is written
        kept_before = recorded_beside(store, m) if old == scored else {}
        checked.append((m, files, records, scored, old == scored, beside_files(run, m), kept_before))
    for m, files, records, scored, same, beside, kept_before in checked:
        _, translations = member_folders(run, m)
        names = {name: sha for own in scored.values() for name, sha in own.items()}
        kept_metrics, kept_translations, kept_beside = _store_folders(store, m)
        if same:
            # the same translations (a deterministic rerun): the files beside them are the same training's,
            # timed where each ran; what the run has is added, what it lacks stays as kept. The metrics are
            # the run's where its scores differ, where the kept ones were made with other settings
            # (`replace`, whose files beside are then the run's alone), and where the run brings a training
            # log whose training record differs from the kept one's (its times): a log and the record of
            # its times are one training's
            if m in replace:
                shutil.rmtree(kept_beside, ignore_errors=True)
                kept_before = {}
            merged = {**kept_before, **beside}
            logged = any(name.endswith("train.jsonl") and kept_before.get(name) != sha for name, sha in beside.items())

            keys = ("scores", "train") if logged else ("scores",)
            before = {f.name: read_json(kept_metrics / f.name) for f in files}
            rescored = [f for f in files if m in replace
                        or any(records[f.name].get(k) != before[f.name].get(k) for k in keys)]
            if merged == kept_before and not rescored:
                out.same.append(m)
                continue
            for name, sha in sorted(beside.items()):
                if kept_before.get(name) != sha:
                    _gzip(beside_path(run, m, name), kept_beside / f"{name}.gz")
            if merged != kept_before:
                write_json(kept_beside / "sha256.json", merged)     # after the files it names
            for f in rescored:
                shutil.copyfile(f, kept_metrics / f.name)
            out.done.append(m)
            continue
        for folder in (kept_metrics, kept_translations, kept_beside):
            shutil.rmtree(folder, ignore_errors=True)
        for folder in (kept_metrics, kept_translations):
            folder.mkdir(parents=True)
        for name in sorted(names):
            _gzip(translations / name, kept_translations / f"{name}.gz")
        for name in sorted(beside):
            _gzip(beside_path(run, m, name), kept_beside / f"{name}.gz")
        if beside:
            write_json(kept_beside / "sha256.json", beside)
        for f in files:                         # the metrics last: a kept metrics file means the member is whole
            shutil.copyfile(f, kept_metrics / f.name)
        out.done.append(m)
    return out


def _gzip(src_path: Path, dst_path: Path) -> None:
    """`src_path` gzipped to `dst_path`, with no time or name in the header: the same file keeps the same
    bytes in the store."""
    dst_path.parent.mkdir(parents=True, exist_ok=True)
    with open(src_path, "rb") as src, atomic_writer(dst_path, "wb") as dst, \
            gzip.GzipFile(fileobj=dst, mode="wb", mtime=0, filename="") as z:
        shutil.copyfileobj(src, z)


DAMAGED = "the store is damaged: remove the member's folders from it and keep it again from a run that has it"


def _gunzip(src_path: Path, dst_path: Path, sha: str, what: str) -> None:
    """The kept `src_path` (gzipped) into `dst_path`, which must then have the recorded `sha`; nothing is
    left of it where it has not."""
    dst_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with gzip.open(src_path, "rb") as src, atomic_writer(dst_path, "wb") as dst:
            shutil.copyfileobj(src, dst)
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise InputError(f"{src_path}: not a whole gzip file ({e}); {DAMAGED}") from None
    if sha256_of(dst_path) != sha:
        dst_path.unlink()
        raise InputError(f"{src_path} does not hold what {what} (its sha256 differs); {DAMAGED}")


def kept_members(store: str | Path, corpus: str | None = None) -> list[Member]:
    """The members a store holds (of `corpus` only where given)."""
    root = Path(store) / "metrics"
    found = sorted((c.name, v.name, m.name) for c in root.glob("*") for v in c.glob("*") for m in v.glob("*")
                   if m.is_dir())
    return [checked_member(m) for m in found if corpus is None or m[0] == corpus]


def data_files(store: str | Path, members: list[Member]) -> list[str]:
    """The data files (paths under a run folder) that the store's `members` were made from and scored on: what
    a run must have made before `restore` can check them."""
    held = set(kept_members(store))
    return sorted({rel for m in members if checked_member(m) in held for rel in made_from(store, m)})


def other_data(store: str | Path, run: str | Path, m: Member) -> str:
    """Why the kept member `m` is not of the run folder `run`'s data, '' where it is: a data file it was
    scored on or trained on is missing from the run, or differs from the one it recorded (the first such, the
    one to act on)."""
    for rel, sha in sorted(made_from(store, m).items()):
        path = Path(run) / rel
        if not path.is_file():
            return f"{path} is missing: make the run's data first"
        if sha256_of(path) != sha:
            return f"made from another {rel} than the run's now (its sha256 differs): retrain it"
    return ""


def made_from(store: str | Path, m: Member) -> dict[str, str]:
    """{path under a run folder: sha256} of the data a kept member was scored on and its models trained on,
    as its metrics files recorded them: what `restore` compares with a run's data."""
    store, out = Path(store), {}
    for f in _metrics_files(_store_folders(store, checked_member(m))[0]):
        out.update(_scored(f, store, m)[1])
        out.update(_trained_on(f, store, m))
    return out


def restore(store: str | Path, run: str | Path, members: list[Member] | None = None) -> Outcome:
    """Put the store's members (those of `members` only, where given) into the run folder `run`, where it has
    no metrics of the member yet and its data files are the ones the member was scored on (the run's data
    must be made first: a member whose data files are missing or differ is not restored, with the reason)."""
    store, run, out = Path(store), Path(run), Outcome()
    held = set(kept_members(store))
    for m in (kept_members(store) if members is None else [checked_member(x) for x in members if x in held]):
        kept_metrics, kept_translations, _ = _store_folders(store, m)
        metrics, translations = member_folders(run, m)
        if _metrics_files(metrics) or _trained_here(run, m, store):   # the run decodes its own model of it
            out.present.append(m)
            continue
        files = _metrics_files(kept_metrics)
        _one_training(files, {f.name: read_json(f) for f in files}, m)
        wanted: dict[str, str] = {}
        for f in files:
            wanted.update(_scored(f, store, m)[0])  # its paths, as recorded, inside the store's copy of the run
        if why := other_data(store, run, m):
            out.skipped[m] = why
            continue
        beside = recorded_beside(store, m)
        copies = [(kept_translations / f"{name}.gz", translations / name, sha, f"{'/'.join(m)}'s metrics scored")
                  for name, sha in wanted.items()] + [
                 (beside_folder(store, m) / f"{name}.gz", beside_path(run, m, name), sha,
                  f"{'/'.join(m)}'s {name} was when kept") for name, sha in beside.items()]
        for gz, *_ in copies:                   # all there before anything is written
            if not NAME.match(gz.name) or not gz.is_file():
                raise InputError(f"{gz}: missing from the store, which keeps {'/'.join(m)}'s metrics; {DAMAGED}")
        written: list[Path] = []
        try:
            for gz, dst, sha, what in copies:
                _gunzip(gz, dst, sha, what)
                written.append(dst)
        except InputError:
            for path in written:                # nothing of a member that is not whole stays in the run
                path.unlink(missing_ok=True)
            raise
        metrics.mkdir(parents=True, exist_ok=True)
        for f in files:                         # the metrics last: a metrics file means the member is whole
            shutil.copyfile(f, metrics / f.name)
        out.done.append(m)
    return out
