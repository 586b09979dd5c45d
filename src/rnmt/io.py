"""File helpers shared by every stage: atomic writes, line readers with clear errors."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import select
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

_UMASK = os.umask(0)
os.umask(_UMASK)


class InputError(Exception):
    """A problem with the user's input: the message names the file or key and the fix."""


class DiskFullError(InputError):
    """The disk (or quota) filled while writing a file; the file under its final name is unchanged.

    Reported like bad input (a message naming the file and the fix), as the user has to act.
    """


_DISK_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def _fsync_dir(folder: Path) -> None:
    """Make a rename in `folder` durable (a crash after it cannot bring back the old name's content)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside `path` for code that writes a file by name; renamed over `path` only when
    the block succeeds (after an fsync), removed otherwise. A full disk raises DiskFullError naming `path`.

    A killed job therefore never leaves a half-written file under the final name, and a failed write
    leaves the previous file (e.g. the last checkpoint) as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    os.chmod(tmp, 0o666 & ~_UMASK)   # mkstemp makes 0600; finished files get the usual permissions
    try:
        yield tmp
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        if e.errno in _DISK_FULL:
            kept = "keeps its previous content" if path.exists() else "was not created"
            raise DiskFullError(f"{path}: no space left on the device while writing it ({e.strerror}); the "
                                f"partial file was removed and {path.name} {kept}. Free space (df -h "
                                f"{path.parent}) and rerun") from e
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


@contextmanager
def atomic_writer(path: str | Path, mode: str = "w") -> Iterator[IO[Any]]:
    """Write to a temporary file beside `path`, rename it over `path` only when the block succeeds
    (see `atomic_path`: a killed job or a full disk never leaves a half-written file under `path`)."""
    encoding = None if "b" in mode else "utf-8"
    with atomic_path(path) as tmp, open(tmp, mode, encoding=encoding) as f:
        yield f


def write_json(path: str | Path, obj: Any) -> None:
    with atomic_writer(path) as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def read_json(path: str | Path) -> Any:
    """A JSON file's contents; a missing, truncated or damaged file is an input error naming it."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: file not found")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: not valid JSON ({e}): a truncated or damaged file; delete it and rerun the job "
                         "that writes it") from None


def iter_lines(path: str | Path) -> Iterator[str]:
    """The lines of a UTF-8 text file without their newline, streamed: split at \n only (never at U+2028,
    U+0085, a lone \r or the other line ends of `str.splitlines` and text-mode files, which can stand inside
    a sentence and would shift every line after it; see `split_lines`); invalid UTF-8 names the line."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: file not found")
    with open(path, "rb") as f:
        yield from decoded_lines(f, str(path))


def decoded_lines(stream: Iterable[bytes], where: str, first: int = 1) -> Iterator[str]:
    """Lines of a binary stream (a file, standard input's buffer) as `iter_lines` gives them; invalid UTF-8
    names `where` and the line (numbered from `first`), whatever the locale."""
    for n, raw in enumerate(stream, first):
        try:
            yield raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as e:
            raise InputError(f"{where}, line {n}: not valid UTF-8 ({e.reason} at byte {e.start}); "
                             "convert the text to UTF-8 (e.g. iconv -f latin1 -t utf-8)") from None


def line_batches(fd: int, max_lines: int) -> Iterator[list[bytes]]:
    """The lines of file descriptor `fd` (standard input) in batches as they arrive: each batch is every
    complete line readable without waiting, up to `max_lines`, and never empty. A translator in a pipe
    or at a terminal so answers each line once it is written, while a file or a fast writer still fills
    whole batches. The last line needs no newline."""
    pending, lines, eof = b"", [], False
    while True:
        # block for input only while no complete line is in hand
        while not eof and (not lines or (len(lines) < max_lines and select.select([fd], [], [], 0)[0])):
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                eof = True
                break
            *complete, pending = (pending + chunk).split(b"\n")
            lines.extend(line + b"\n" for line in complete)
        if eof and pending:
            lines.append(pending)
            pending = b""
        if not lines:
            return
        yield lines[:max_lines]
        lines = lines[max_lines:]


def read_lines(path: str | Path) -> list[str]:
    """All lines of a UTF-8 text file without their newline (`iter_lines`)."""
    return list(iter_lines(path))


def with_extra_references(paths: Iterable[str]) -> list[str]:
    """Each reference file followed by its extra references `<file>.ref1`, `.ref2`, ... (a test or dev set
    with several references, NIST's 4 in all, is a first file and the extra ones beside it)."""
    out = []
    for p in paths:
        out.append(p)
        k = 1
        while Path(f"{p}.ref{k}").is_file():
            out.append(f"{p}.ref{k}")
            k += 1
    return out


def drop_extra_references(path: str | Path) -> None:
    """Remove the extra references beside `path` (`<file>.ref1`, ...), before it is written again: one written
    with fewer references than before must not be scored against the old ones, which
    `with_extra_references` would otherwise find beside it."""
    k = 1
    while (extra := Path(f"{path}.ref{k}")).is_file():
        extra.unlink()
        k += 1


def sha256_of(path: str | Path, chunk: int = 1 << 20) -> str:
    """The sha256 of a file's bytes, in hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def split_lines(text: str) -> list[str]:
    """`text`'s lines as rnmt reads every file: split at newlines only (\n, with a \r before it dropped),
    never at the other characters `str.splitlines` takes for line ends (U+2028, U+0085, form feed, ...),
    which can stand inside a sentence of a corpus and would cut one line into two and shift every line
    after it. A final newline ends the last line rather than starting an empty one."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def write_lines(path: str | Path, lines: list[str]) -> None:
    with atomic_writer(path) as f:
        for line in lines:
            f.write(line + "\n")


def read_parallel(src: str | Path, tgt: str | Path) -> tuple[list[str], list[str]]:
    """Read two line-aligned files; different line counts are an error naming both files."""
    a, b = read_lines(src), read_lines(tgt)
    if len(a) != len(b):
        raise InputError(f"parallel files differ in length: {src} has {len(a)} lines, {tgt} has {len(b)}; "
                         "the two sides must be line-aligned (one sentence pair per line)")
    return a, b


def try_lock(path: str | Path, note: str = "") -> int | None:
    """Take an exclusive `flock` on `path` without waiting: the open descriptor (the lock lasts until it
    is closed or the process exits, however it exits), or None when another process holds it. The file
    then holds this process' id and `note`, for the message of whoever finds it taken. (Why not
    filelock, which guards fastpath's choices: the holder's note is written into the lock file, and a
    descriptor, not an object, is what a lease hands on to the process that keeps it.)"""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n{note}".encode())
    return fd


def lock_holder(path: str | Path) -> str:
    """What the holder of a `try_lock` lock wrote: its process id and note (best effort)."""
    try:
        pid, _, note = Path(path).read_text(encoding="utf-8", errors="replace").partition("\n")
    except OSError:
        return "an unknown process"
    return f"process {pid.strip() or '?'}" + (f" ({note.strip()})" if note.strip() else "")


def separate_streams() -> bool:
    """Whether standard output and standard error go to different files (a workflow job: its log, and
    Snakemake's console); False for streams without a file (captured in tests)."""
    try:
        out, err = os.fstat(sys.stdout.fileno()), os.fstat(sys.stderr.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return (out.st_dev, out.st_ino) != (err.st_dev, err.st_ino)


def report_error(message: str) -> None:
    """The error on standard output where that is not where standard error goes (a workflow job whose
    standard error is its log file: Snakemake shows a job's standard output on its console, so the user
    reads why a job failed without opening the log), then on standard error. The console comes first,
    and a stream that cannot be written is passed over: a log on a full disk must not swallow the message."""
    for stream in (sys.stdout, sys.stderr) if separate_streams() else (sys.stderr,):
        with contextlib.suppress(OSError, ValueError):
            print(message, file=stream, flush=True)


def os_error_message(e: OSError) -> str:
    """What a failed file operation means to the person who ran it, and the fix."""
    where = f"{e.filename}: " if e.filename else ""
    fixes = {errno.ENOENT: "no such file or folder; check the path",
             errno.EISDIR: "a folder, where a file is needed; give the file's path",
             errno.ENOTDIR: "a path through something that is not a folder; check the path",
             errno.EACCES: "permission denied; give a path you may read (or write), or change its permissions",
             errno.EPERM: "operation not permitted; give a path you may read (or write)",
             errno.EROFS: "a read-only file system; write the output elsewhere",
             errno.ENOSPC: "the disk is full; free space and rerun (finished work is kept)",
             errno.EDQUOT: "the disk quota is exceeded; free space and rerun (finished work is kept)"}
    return where + fixes.get(e.errno or 0, e.strerror or str(e))
