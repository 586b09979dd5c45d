"""A training folder's safeguards: one trainer at a time, and copies of the outputs that Snakemake
deletes after a failed job.

Snakemake deletes a failed job's outputs (model.pt, train.jsonl) before it retries, while last.pt,
which is not an output, survives. So each output has a copy, `.<name>.keep`, and a resumed run restores
a missing output from it after checking that the copy is sound. A copy that is not sound stops the run
with the names of every file to delete to train the model afresh.

model.pt's copy is a hard link, not a second file: Snakemake's deletion removes one name and the weights
stay under the other, at no cost in disk (the weights are the largest file of a model folder after
last.pt). The trainer never writes model.pt in place (each save replaces the file), so the link keeps
the weights it was made from. Where the file system has no hard links, the copy is a file of its own.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path

from rnmt.io import InputError, atomic_path, atomic_writer, lock_holder, read_lines, try_lock, write_lines
from rnmt.models.checkpoint import check_copy, keep_path

LOCK = ".train.lock"
log = logging.getLogger(__name__)


class FolderBusy(InputError):
    """Another trainer is writing the same folder."""


def keep(path: Path, content: bytes | None = None) -> None:
    """Link `path`, or write `content` as its copy, to `.<name>.keep` (atomically: a killed job leaves the
    previous copy as it was)."""
    if content is not None:
        with atomic_writer(keep_path(path), "wb") as f:
            f.write(content)
        return
    _link_or_copy(path, keep_path(path))


def _link_or_copy(source: Path, target: Path) -> None:
    with atomic_path(target) as tmp:
        tmp.unlink()
        try:
            os.link(source, tmp)
        except OSError:                 # no hard links here (some network and FAT file systems)
            shutil.copyfile(source, tmp)


def restore(path: Path, check: Callable[[Path], None], fresh_start: list[Path]) -> bool:
    """Bring a missing `path` back from its copy; True when it did.

    `check(copy)` raises when the copy is not sound; the error then names the files in `fresh_start`,
    whose deletion makes the next run train afresh.
    """
    copy = keep_path(path)
    if path.exists() or not copy.is_file():
        return False
    try:
        check(copy)
    except Exception as e:
        files = " ".join(str(f) for f in [copy, *fresh_start] if f.exists())
        raise InputError(f"{path} is missing and its copy {copy} is damaged ({e}); the model cannot be restored. "
                         f"Delete {files} and rerun to train it afresh") from None
    _link_or_copy(copy, path)
    return True


def lock_folder(out_dir: Path) -> int:
    """Hold `out_dir`'s training lock for as long as this process runs (or until the descriptor is closed).

    A second trainer on the same folder, e.g. the rerun of a killed Snakemake while its orphaned trainer
    still runs, stops here naming the first one's process instead of both writing the same files.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / LOCK
    note = f"on {socket.gethostname()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}"
    fd = try_lock(path, note)
    if fd is None:
        raise FolderBusy(f"{out_dir} is being trained by {lock_holder(path)}; two trainers must not write one "
                         "folder. Wait for it to finish (this job then finds the model trained) or stop it "
                         f"(kill <pid>), then rerun")
    return fd


def check_log_copy(path: Path) -> None:
    """A train.jsonl copy of JSON records, one per line."""
    for n, line in enumerate(read_lines(path), 1):
        try:
            json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}, line {n}: not a JSON record ({e.msg})") from None


def supersede(folder: Path, why: list[str]) -> Path:
    """Move a previous run's files (checkpoints, logs, metrics and their copies) out of `folder` into
    superseded/<time>/, with the reasons in why.txt, so that nothing of it survives into the next run's
    results; → that folder."""
    names = ["last.pt", "model.pt", "train.jsonl", "train.json", "checkpoints", "tensorboard"]
    moving = [f for f in [folder / n for n in names] + [keep_path(folder / n) for n in names] if f.exists()]
    old = folder / "superseded" / time.strftime("%Y%m%dT%H%M%S")
    while old.exists():
        old = old.with_name(old.name + "+")
    old.mkdir(parents=True)
    for f in moving:
        f.rename(old / f.name)
    write_lines(old / "why.txt", why)
    log.warning("%s is another run than the one in this folder (%s): its files moved to %s; training afresh",
                folder, "; ".join(why), old)
    return old


def restore_finished(out_dir: Path, best_step: int | None) -> None:
    """A resumed run's model.pt and train.jsonl back from their copies where Snakemake deleted them after a
    failure; a run that had a best model whose file and copy are both gone stops, naming what to delete."""
    fresh = [out_dir / n for n in ("model.pt", "last.pt", "train.jsonl", ".train.jsonl.keep")]
    model = out_dir / "model.pt"
    if restore(model, check_copy, fresh):
        log.info("restored %s from its copy", model)
    elif not model.exists() and best_step is not None:
        files = " ".join(str(f) for f in fresh if f.exists())
        raise InputError(f"{model} and its copy {keep_path(model)} are missing, so the best weights of this run "
                         f"(step {best_step}) are lost. Delete {files} and rerun to train the model afresh")
    restore(out_dir / "train.jsonl", check_log_copy, fresh)
