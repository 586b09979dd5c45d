"""Where a kept row member's files lie (rnmt.report.kept): its metrics and translations folders in a run
folder and in a store (the same layout), its seeds' model and analysis folders in a run, and the files a
figure reads beside a one-seed member's metrics (its training log, its gate statistics) with the sha256 a
store records for them. Every name is checked to be a plain folder name before a path is made of it."""

from __future__ import annotations

import re
from pathlib import Path

from rnmt.io import InputError, read_json, sha256_of

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")       # a corpus, variant, member or file name
Member = tuple[str, str, str]                               # (corpus, variant, member)


def checked_member(m: Member) -> Member:
    """`m`, each of its names a plain folder name."""
    for name in m:
        if not NAME.match(name) or ".." in name:
            raise InputError(f"{'/'.join(m)}: {name!r} is not a plain folder name (letters, digits, . _ + -); a "
                             "kept row's corpus, variant and member name its folders")
    return m


def member_folders(root: Path, m: Member) -> tuple[Path, Path]:
    """Member `m`'s metrics and translations folders under a run folder or a store."""
    corpus, variant, member = checked_member(m)
    return root / "metrics" / corpus / variant / member, root / "translations" / corpus / variant / member


def seed_folder(root: Path, kind: str, m: Member, seed: int | str) -> Path:
    """A seed's folder of member `m` under a run folder: `kind` models (its model, train.json, training log)
    or analysis (its gate statistics); `seed` a number or `seed<N>`."""
    return root / kind / m[0] / m[1] / (seed if isinstance(seed, str) else f"seed{seed}")


BESIDE = re.compile(r"^seed[0-9]+/(train\.jsonl|gates\.[A-Za-z0-9][A-Za-z0-9._+-]*\.json)$")


def beside_path(root: Path, m: Member, name: str) -> Path:
    """Where a file a figure reads beside member `m`'s metrics lies in a run folder: `name` is
    `seed<N>/train.jsonl` (models/...) or `seed<N>/gates.<testset>.json` (analysis/...), N the member's seed."""
    if not BESIDE.match(name) or name.split("/")[0] != checked_member(m)[2]:
        raise InputError(f"{'/'.join(m)}: {name!r} is no file a figure reads beside this member's metrics (seed<N>/"
                         "train.jsonl or seed<N>/gates.<testset>.json of its own seed): the store is not one rnmt "
                         "wrote")
    seed, file = name.split("/")
    return seed_folder(root, "models" if file == "train.jsonl" else "analysis", m, seed) / file


def beside_files(run: Path, m: Member) -> dict[str, str]:
    """{name: sha256} of the files a figure reads beside a one-seed member's metrics in `run` (its training
    log, its gate statistics), those that are there."""
    member = checked_member(m)[2]
    if not re.fullmatch(r"seed[0-9]+", member):     # an ensemble: its members' logs are their own rows'
        return {}
    names = [f"{member}/train.jsonl"] + [f"{member}/{p.name}" for p in sorted(
        seed_folder(run, "analysis", m, member).glob("gates.*.json"))]
    return {n: sha256_of(path) for n in names if BESIDE.match(n) and (path := beside_path(run, m, n)).is_file()}


def beside_folder(store: Path, m: Member) -> Path:
    """Where a store keeps the files beside member `m`'s metrics, gzipped, with their sha256."""
    return store / "beside" / Path(*checked_member(m))


def recorded_beside(store: Path, m: Member) -> dict[str, str]:
    """{name: sha256} of the files kept beside member `m`'s metrics, as kept."""
    f = beside_folder(store, m) / "sha256.json"
    recorded = read_json(f) if f.is_file() else {}
    if not isinstance(recorded, dict) or not all(isinstance(v, str) for v in recorded.values()):
        raise InputError(f"{f}: not a list of kept files and their sha256: the store is not one rnmt wrote")
    for name in recorded:
        beside_path(store, m, name)            # each name checked before anything is read or written
    return recorded
