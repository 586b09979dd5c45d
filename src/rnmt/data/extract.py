"""Taking files out of downloaded archives (tar, tgz, zip, gz), refusing unsafe members.

A member is unsafe when its name is absolute, climbs out with `..`, or when it is a link, a
device or anything but a regular file or folder. An archive holding any unsafe member is refused
as a whole: it was not made by the corpus' publisher, or not for extraction. (Why not tarfile's
`filter="data"`: it strips an absolute name's leading `/`, keeps links that stay inside the folder and
extracts the other members, where rnmt refuses the archive; and zip archives need the same check.)
"""

from __future__ import annotations

import gzip
import shutil
import tarfile
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import IO, TypeVar

from rnmt.io import InputError, atomic_writer

T = TypeVar("T")


class UnsafeArchiveError(InputError):
    """An archive member would land outside the target folder, or is not a plain file."""


def _check_name(archive: Path, name: str) -> None:
    p = PurePosixPath(name.replace("\\", "/"))
    if p.is_absolute() or ".." in p.parts or (p.parts and ":" in p.parts[0]):
        raise UnsafeArchiveError(f"{archive}: member {name!r} has an unsafe path (absolute or with '..'); "
                                 "refusing to extract from this archive")


def _tar_members(archive: Path, tar: tarfile.TarFile) -> dict[str, tarfile.TarInfo]:
    members = {}
    listed = tar.getmembers()
    # tarfile reads a plain tar cut after a member as a complete, shorter archive; a whole one ends in
    # two zero blocks (the end-of-archive marker). Compressed tars end in their stream's own end marker,
    # whose absence the decompressor reports.
    if _magic(archive) == "tar" and archive.stat().st_size < tar.offset + 2 * tarfile.BLOCKSIZE:
        raise damaged(archive, tarfile.ReadError("the end-of-archive marker is missing after the member "
                                                 f"{listed[-1].name if listed else '(none)'}"))
    for m in listed:
        _check_name(archive, m.name)
        if not (m.isfile() or m.isdir()):
            kind = "link" if (m.issym() or m.islnk()) else "special file"
            raise UnsafeArchiveError(f"{archive}: member {m.name!r} is a {kind}; refusing to extract from this "
                                     "archive")
        members[m.name.removeprefix("./")] = m
    return members


def _zip_members(archive: Path, z: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
    members = {}
    for m in z.infolist():
        _check_name(archive, m.filename)
        mode = (m.external_attr >> 16) & 0o170000
        if mode not in (0, 0o100000, 0o040000):
            raise UnsafeArchiveError(f"{archive}: member {m.filename!r} is not a regular file; refusing to "
                                     "extract from this archive")
        members[m.filename] = m
    return members


DAMAGED = (tarfile.TarError, zipfile.BadZipFile, gzip.BadGzipFile, EOFError, zlib.error)


def damaged(archive: Path, e: BaseException) -> InputError:
    return InputError(f"{archive}: the archive is damaged or truncated ({type(e).__name__}: {e}); delete it and "
                      "rerun to download it again (a pinned sha256 catches this at download time)")


TAR_SUFFIXES = (".tar", ".tgz", ".tar.gz", ".tbz2", ".tar.bz2", ".txz", ".tar.xz")


def _magic(path: Path) -> str:
    """The compression or archive format the first bytes announce: gz, bz2, xz, zip, else tar."""
    with open(path, "rb") as f:
        head = f.read(6)
    for kind, magic in (("gz", b"\x1f\x8b"), ("bz2", b"BZh"), ("xz", b"\xfd7zXZ\x00"), ("zip", b"PK\x03\x04")):
        if head.startswith(magic):
            return kind
    return "tar"


def archive_kind(path: str | Path) -> str:
    """'tar', 'zip', 'gz' (one compressed file) or 'plain', from the file's content. A file named or
    made as a tar or zip archive that does not read as one is damaged (InputError): a truncated zip has
    lost its central directory at the end and a truncated tar.gz may not show a tar header, and neither
    may pass for a single file."""
    path = Path(path)
    try:
        if zipfile.is_zipfile(path):
            return "zip"
        if tarfile.is_tarfile(path):
            return "tar"
    except DAMAGED as e:
        raise damaged(path, e) from None
    name, magic = path.name.lower(), _magic(path)
    if name.endswith(".zip") or magic == "zip":
        raise damaged(path, zipfile.BadZipFile("no end of central directory: the end of the file is missing"))
    if name.endswith(TAR_SUFFIXES):
        raise damaged(path, tarfile.ReadError("it does not read as a tar archive"))
    return "gz" if magic == "gz" else "plain"


def list_members(archive: str | Path) -> list[str]:
    """The file members of an archive (after checking every member is safe)."""
    archive = Path(archive)
    kind = archive_kind(archive)
    try:
        if kind == "tar":
            with tarfile.open(archive) as tar:
                return sorted(n for n, m in _tar_members(archive, tar).items() if m.isfile())
        if kind == "zip":
            with zipfile.ZipFile(archive) as z:
                return sorted(n for n in _zip_members(archive, z) if not n.endswith("/"))
    except DAMAGED as e:
        raise damaged(archive, e) from None
    return [archive.name]


@contextmanager
def open_member(archive: str | Path, member: str | None, decompress: bool = True) -> Iterator[IO[bytes]]:
    """A binary stream of one member; `.gz` members (and plain .gz archives) are decompressed. A damaged
    or truncated archive (also one found part-way through reading) is an InputError naming it."""
    archive = Path(archive)
    try:
        with _open_member(archive, member, decompress) as f:
            yield f
    except DAMAGED as e:
        raise damaged(archive, e) from None


@contextmanager
def _open_member(archive: Path, member: str | None, decompress: bool) -> Iterator[IO[bytes]]:
    kind = archive_kind(archive)
    if kind in ("gz", "plain"):
        if member not in (None, "", archive.name):
            raise InputError(f"{archive} is a single file, not an archive; it has no member {member!r}")
        with (gzip.open(archive, "rb") if kind == "gz" else open(archive, "rb")) as f:
            yield f
        return
    if not member:
        raise InputError(f"{archive} is an archive: name the member to take (the registry's 'files')")
    if kind == "tar":
        with tarfile.open(archive) as tar:
            members = _tar_members(archive, tar)
            info = _find(archive, members, member)
            raw = tar.extractfile(info)
            assert raw is not None
            with raw, (gzip.open(raw, "rb") if decompress and member.endswith(".gz") else raw) as f:
                yield f
    else:
        with zipfile.ZipFile(archive) as z:
            zinfo = _find(archive, _zip_members(archive, z), member)
            with z.open(zinfo) as raw, (gzip.open(raw, "rb") if decompress and member.endswith(".gz") else raw) as f:
                yield f


def _find(archive: Path, members: Mapping[str, T], member: str) -> T:
    if member in members:
        return members[member]
    close = [n for n in members if n.endswith("/" + member) or member.endswith("/" + n)]
    hint = f"; did you mean {close[0]!r}?" if close else f"; it has {len(members)} members, e.g. " + ", ".join(
        sorted(members)[:5])
    raise InputError(f"{archive}: no member {member!r}{hint}")


def extract_member(archive: str | Path, member: str | None, dest: str | Path, decompress: bool = True) -> Path:
    """Copy one member (decompressed unless told not to) to `dest`, atomically."""
    with open_member(archive, member, decompress) as src, atomic_writer(dest, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
    return Path(dest)


def extract_all(archive: str | Path, dest_dir: str | Path) -> list[Path]:
    """Extract every file of a tar or zip archive under `dest_dir` (none at all if one is unsafe)."""
    archive, dest_dir = Path(archive), Path(dest_dir)
    out = []
    for name in list_members(archive):           # checks every member before writing anything
        target = dest_dir / name
        if not target.resolve().is_relative_to(dest_dir.resolve()):
            raise UnsafeArchiveError(f"{archive}: member {name!r} would be written outside {dest_dir}")
        out.append(extract_member(archive, name, target, decompress=False))
    return out
