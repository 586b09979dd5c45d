"""HTTP(S) downloads that retry with back-off, resume, verify a sha256 and write atomically.

A file under its final name is always complete: bytes arrive in `<name>.part` (kept across
attempts and runs so that a dropped connection resumes with an HTTP Range request), and the
`.part` file is renamed only after its checksum is verified. A checksum mismatch deletes it.

Every download is checksum-pinned: without a pinned sha256 it is refused, unless the caller
allows it (`rnmt corpus pin`, which downloads once and records the checksum in the registry's
pin file, or RNMT_ALLOW_UNPINNED=1). The sha256 computed is stored beside the file
(`<name>.sha256`). (Why not pooch: it restarts a dropped download from its first byte, where a
multi-gigabyte WMT archive on a flaky link needs the Range resume from `.part`.)
"""

from __future__ import annotations

import http.client
import logging
import os
import shlex
import time
import urllib.error
import urllib.request
from pathlib import Path

from rnmt.io import InputError, atomic_writer, sha256_of
from rnmt.machine.switches import switch

log = logging.getLogger(__name__)

CHUNK = 1 << 20
RETRYABLE_HTTP = {408, 425, 429, 500, 502, 503, 504}


class DownloadError(InputError):
    """A download failed for good (after the retries), or its content is not what was pinned."""


def unpinned_allowed() -> bool:
    return switch("allow_unpinned")


def manual_alternative(url: str, dest: Path) -> str:
    return (f"Without network here, download it on a machine that has one (e.g. curl -fLo {dest.name} "
            f"{shlex.quote(url)}) and put it at {dest.absolute()}: it is then checked against the pinned sha256, "
            "and not downloaded again")


def _sidecar(dest: Path) -> Path:
    return dest.with_name(dest.name + ".sha256")


def is_complete(dest: str | Path, sha256: str | None = None) -> bool:
    """True when `dest` exists and matches the pinned sha256 (or, unpinned, the recorded one)."""
    dest = Path(dest)
    if not dest.is_file():
        return False
    side = _sidecar(dest)
    recorded = side.read_text().split()[0] if side.is_file() else None
    if sha256:
        return (recorded or sha256_of(dest)) == sha256.lower()
    return recorded is not None


def _fetch_once(url: str, part: Path, timeout: float) -> None:
    """Append the rest of `url` to `part`, asking only for the bytes not yet there."""
    have = part.stat().st_size if part.exists() else 0
    req = urllib.request.Request(url, headers={"User-Agent": "rnmt"})
    if have:
        req.add_header("Range", f"bytes={have}-")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        status = getattr(resp, "status", 200)
        if have and status != 206:          # the server ignored the range: start over
            have = 0
        total = resp.headers.get("Content-Length")
        total_n = int(total) + have if total is not None else None
        mode = "ab" if have else "wb"
        done, last = have, time.monotonic()
        with open(part, mode) as f:
            for block in iter(lambda: resp.read(CHUNK), b""):
                f.write(block)
                done += len(block)
                if time.monotonic() - last > 10:
                    last = time.monotonic()
                    pct = f" ({100 * done / total_n:.0f}%)" if total_n else ""
                    log.info("%s: %.1f MB%s", url, done / 1e6, pct)
            f.flush()
            os.fsync(f.fileno())
        if total_n is not None and done < total_n:
            raise ConnectionError(f"connection closed after {done} of {total_n} bytes")


def download(url: str, dest: str | Path, sha256: str | None = None, retries: int = 5, backoff: float = 2.0,
             timeout: float = 60.0, allow_unpinned: bool | None = None) -> Path:
    """Download `url` to `dest` unless a complete copy is there; return `dest`.

    Retries `retries` times on network errors and retryable HTTP statuses, waiting
    `backoff * 2**attempt` seconds between attempts, resuming where the last attempt stopped.
    Without `sha256` the download is refused unless `allow_unpinned` (default: $RNMT_ALLOW_UNPINNED).
    """
    dest = Path(dest)
    if is_complete(dest, sha256):
        log.info("%s: already complete, not downloading again", dest)
        return dest
    if not sha256 and not (unpinned_allowed() if allow_unpinned is None else allow_unpinned):
        raise DownloadError(f"{url}: no sha256 is pinned for {dest.name}, so its content could not be verified; "
                            f"refusing to download it. Pin it once: `rnmt corpus pin {dest.name}` downloads it and "
                            "records its sha256 in the registry's pin file (check the file first if you can); or set "
                            "RNMT_ALLOW_UNPINNED=1 to download without a pin")
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    for attempt in range(retries + 1):
        try:
            log.info("downloading %s → %s (attempt %d)", url, dest, attempt + 1)
            _fetch_once(url, part, timeout)
            break
        except urllib.error.HTTPError as e:
            if e.code == 416:                # range beyond the end: what we have is everything
                break
            if e.code not in RETRYABLE_HTTP:
                part.unlink(missing_ok=True)
                raise DownloadError(f"{url}: HTTP {e.code} {e.reason}; check the URL in the corpus registry "
                                    "(workflow/corpora.yaml). " + manual_alternative(url, dest)) from None
            reason = f"HTTP {e.code} {e.reason}"
        except (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError, OSError) as e:
            reason = str(e)
        if attempt == retries:
            kept = f"; the partial file {part} is kept and the next run resumes it" if part.exists() else ""
            raise DownloadError(f"{url}: download failed after {retries + 1} attempts (last: {reason}){kept}. "
                                + manual_alternative(url, dest))
        wait = backoff * 2**attempt
        log.warning("%s: %s; retrying in %.1f s", url, reason, wait)
        time.sleep(wait)
    got = sha256_of(part)
    if sha256 and got != sha256.lower():
        part.unlink(missing_ok=True)
        raise DownloadError(f"{url}: sha256 mismatch: expected {sha256.lower()}, got {got}; the download was "
                            "deleted (a corrupted or tampered download, or the file changed upstream). Rerun to "
                            "download it again; if it changed upstream on purpose, remove its old pin and run "
                            f"`rnmt corpus pin {dest.name}`")
    if not sha256:
        log.warning("%s: no sha256 pinned; computed %s (pin it in the registry to verify later downloads)", url, got)
    with atomic_writer(_sidecar(dest)) as f:
        f.write(f"{got}  {dest.name}\n")
    os.replace(part, dest)
    return dest
