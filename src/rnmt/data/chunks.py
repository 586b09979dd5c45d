"""Fixed-count chunks of a line-aligned file pair, found by byte offsets so that chunk jobs seek
straight to their lines: the chunk count comes from the config, so a dry run lists every job,
and no job holds more than its own lines' worth of text."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rnmt.io import InputError, read_json, write_json


@dataclass(frozen=True)
class Chunk:
    first_line: int            # 0-based
    lines: int
    src_offset: int
    tgt_offset: int


def _boundaries(path: Path, wanted: list[int]) -> tuple[list[int], int]:
    """Byte offsets of the given line numbers (sorted), and the file's line count."""
    out, n, pos, i = [], 0, 0, 0
    with open(path, "rb") as f:
        for line in f:
            while i < len(wanted) and wanted[i] == n:
                out.append(pos)
                i += 1
            pos += len(line)
            n += 1
    out += [pos] * (len(wanted) - i)
    return out, n


def count_lines(path: str | Path) -> int:
    with open(path, "rb") as f:
        return sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 20), b"")) + (
            1 if Path(path).stat().st_size and not _ends_with_newline(path) else 0)


def _ends_with_newline(path: str | Path) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, 2)
        return f.read(1) == b"\n"


def index(src: str | Path, tgt: str | Path, n_chunks: int) -> list[Chunk]:
    """Split the pair into `n_chunks` chunks of nearly equal line counts (empty ones if few lines)."""
    src, tgt = Path(src), Path(tgt)
    for p in (src, tgt):
        if not p.is_file():
            raise InputError(f"{p}: file not found")
    n = count_lines(src)
    m = count_lines(tgt)
    if n != m:
        raise InputError(f"parallel files differ in length: {src} has {n} lines, {tgt} has {m}; the two sides "
                         "must be line-aligned (one sentence pair per line)")
    starts = [n * i // n_chunks for i in range(n_chunks)]
    so, _ = _boundaries(src, starts)
    to, _ = _boundaries(tgt, starts)
    ends = starts[1:] + [n]
    return [Chunk(s, e - s, a, b) for s, e, a, b in zip(starts, ends, so, to, strict=True)]


def write_index(path: str | Path, chunks: list[Chunk], src: str | Path, tgt: str | Path) -> None:
    write_json(path, {"src": str(src), "tgt": str(tgt), "chunks": [c.__dict__ for c in chunks]})


def read_index(path: str | Path) -> list[Chunk]:
    return [Chunk(**c) for c in read_json(path)["chunks"]]


def read_chunk(path: str | Path, offset: int, lines: int, first_line: int = 0) -> Iterator[str]:
    """The chunk's lines of one file, decoded; invalid UTF-8 names the file and line."""
    with open(path, "rb") as f:
        f.seek(offset)
        for i in range(lines):
            raw = f.readline()
            try:
                yield raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                raise InputError(f"{path}, line {first_line + i + 1}: not valid UTF-8 ({e.reason}); convert the "
                                 "file to UTF-8 (e.g. iconv -f latin1 -t utf-8)") from None


def read_pairs(src: str | Path, tgt: str | Path, chunk: Chunk) -> Iterator[tuple[str, str]]:
    yield from zip(read_chunk(src, chunk.src_offset, chunk.lines, chunk.first_line),
                   read_chunk(tgt, chunk.tgt_offset, chunk.lines, chunk.first_line), strict=True)
