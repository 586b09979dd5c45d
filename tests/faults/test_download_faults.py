"""Downloads under faults: no network, a corrupted download, an unpinned one, pinning; and archives
that try to write outside their folder."""

from __future__ import annotations

import hashlib
import io
import socket
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

from faults.faultlib import rnmt
from httpserver import Files, make_tgz, serve
from rnmt.data.extract import UnsafeArchiveError, extract_all, extract_member
from rnmt.io import InputError

pytestmark = pytest.mark.faults
BODY = make_tgz({"c/train.en": b"".join(b"sentence %d\n" % i for i in range(2000))})


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]            # nothing listens there once the socket is closed


def registry(tmp_path: Path, url: str, sha: str | None = None) -> Path:
    reg = {"sources": {"nc": {"source": f"url:{url}", "langs": ["en", "de"],
                              "files": {"en": "c/train.en", "de": "c/train.en"}, "sha256": {"a.tgz": sha}}},
           "corpora": {}}
    path = tmp_path / "registry.yaml"
    path.write_text(yaml.safe_dump(reg))
    return path


def test_no_network_names_the_url_and_the_manual_alternative(tmp_path: Path, record) -> None:
    record.fault("no network (connection refused) during a pinned download")
    url = f"http://127.0.0.1:{closed_port()}/a.tgz"
    dest = tmp_path / "downloads/a.tgz"
    got = rnmt("corpus", "download", "--url", url, "--sha256", hashlib.sha256(BODY).hexdigest(), "--retries", "1",
               "--backoff", "0", str(dest))
    assert got.returncode == 2 and "Traceback" not in got.stderr, got.stderr[-2000:]
    assert f"{url}: download failed after 2 attempts" in got.stderr
    assert f"download it on a machine that has one (e.g. curl -fLo a.tgz {url}) and put it at {dest}" in got.stderr
    assert not dest.exists()
    dest.write_bytes(BODY)                   # the manual alternative works: the file is verified, not fetched
    again = rnmt("corpus", "download", "--url", url, "--sha256", hashlib.sha256(BODY).hexdigest(), str(dest))
    assert again.returncode == 0 and "already complete" in again.stderr


def test_corrupted_download_is_refused_naming_url_hashes_and_fix(tmp_path: Path, record) -> None:
    record.fault("a download corrupted in transit (the server sends other bytes than pinned)")
    files = Files({"/a.tgz": BODY[:-10] + b"corrupted!"})
    good = hashlib.sha256(BODY).hexdigest()
    with serve(files) as base:
        got = rnmt("corpus", "download", "--url", f"{base}/a.tgz", "--sha256", good, "--backoff", "0",
                   str(tmp_path / "a.tgz"))
    bad = hashlib.sha256(files.content["/a.tgz"]).hexdigest()
    assert got.returncode == 2
    assert f"{base}/a.tgz: sha256 mismatch: expected {good}, got {bad}" in got.stderr
    assert "rnmt corpus pin a.tgz" in got.stderr and "Rerun to download it again" in got.stderr
    assert list(tmp_path.iterdir()) == [], "neither the file nor a partial one is kept"


def test_unpinned_download_is_refused_then_pinned_and_verified(tmp_path: Path, record) -> None:
    record.bad_input("a registry URL without a pinned sha256")
    files = Files({"/a.tgz": BODY})
    downloads = tmp_path / "downloads"
    with serve(files) as base:
        reg = registry(tmp_path, f"{base}/a.tgz")
        got = rnmt("corpus", "download", "--registry", str(reg), str(downloads / "a.tgz"))
        assert got.returncode == 2 and "no sha256 is pinned for a.tgz" in got.stderr
        assert "`rnmt corpus pin a.tgz`" in got.stderr and files.count("/a.tgz") == 0
        status = rnmt("corpus", "pin", "--registry", str(reg))
        assert "0 of 1 downloads pinned; not pinned: a.tgz" in status.stdout
        pinned = rnmt("corpus", "pin", "--registry", str(reg), "--download-dir", str(downloads), "a.tgz")
        assert pinned.returncode == 0, pinned.stderr[-2000:]
        sha = hashlib.sha256(BODY).hexdigest()
        assert f"a.tgz: pinned {sha}" in pinned.stdout and "1 of 1 downloads pinned" in pinned.stdout
        assert f"{sha}  a.tgz" in (tmp_path / "registry.sha256").read_text()
        record.fault("the file changes upstream after it was pinned")
        files.content["/a.tgz"] = BODY + b"\0"
        (downloads / "a.tgz").unlink()
        (downloads / "a.tgz.sha256").unlink()
        again = rnmt("corpus", "download", "--registry", str(reg), str(downloads / "a.tgz"))
    assert again.returncode == 2 and f"sha256 mismatch: expected {sha}" in again.stderr
    assert not (downloads / "a.tgz").exists()


def _tar(members: list[tarfile.TarInfo]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for m in members:
            tar.addfile(m, io.BytesIO(b"x" * m.size) if m.isfile() else None)
    return buf.getvalue()


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    m = tarfile.TarInfo(name)
    m.type, m.linkname, m.size = kind, link, 1 if kind == tarfile.REGTYPE else 0
    return m


EVIL = {
    "dot-dot": [_member("ok.txt"), _member("../evil.txt")],
    "absolute": [_member("/tmp/rnmt-evil.txt")],
    "symlink out": [_member("ok", tarfile.SYMTYPE, "/etc"), _member("ok/evil.txt")],
    "hardlink out": [_member("passwd", tarfile.LNKTYPE, "/etc/passwd")],
}


@pytest.mark.parametrize("kind", list(EVIL))
def test_archives_cannot_write_outside_their_folder(tmp_path: Path, kind: str, record) -> None:
    record.safety(f"a tar archive with a member that escapes its folder ({kind})")
    (tmp_path / "evil.tgz").write_bytes(_tar(EVIL[kind]))
    with pytest.raises(UnsafeArchiveError, match="refusing to extract from this archive"):
        extract_all(tmp_path / "evil.tgz", tmp_path / "out")
    assert not (tmp_path / "out").exists() and not (tmp_path / "evil.txt").exists()
    assert not Path("/tmp/rnmt-evil.txt").exists()


def test_zip_symlink_is_refused(tmp_path: Path, record) -> None:
    record.safety("a zip archive holding a symbolic link")
    with zipfile.ZipFile(tmp_path / "z.zip", "w") as z:
        info = zipfile.ZipInfo("link")
        info.external_attr = (0o120777 << 16)
        z.writestr(info, "/etc/passwd")
    with pytest.raises(UnsafeArchiveError, match="not a regular file"):
        extract_member(tmp_path / "z.zip", "link", tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_no_network_for_mtdata_and_sacrebleu_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     record) -> None:
    import sacrebleu.dataset as sb
    import sacrebleu.dataset.base as sb_base
    from mtdata.entry import DatasetId, Entry
    from mtdata.index import INDEX
    from sacrebleu.dataset.fake_sgml import FakeSGMLDataset

    from rnmt.data.fetch import fetch_mtdata_source, fetch_sacrebleu_source
    from rnmt.data.sources import Source

    url = f"http://127.0.0.1:{closed_port()}/toy.tgz"
    record.fault("no network while mtdata downloads a source")
    did = DatasetId(group="Rnmttest", name=f"offline{closed_port()}", version="1", langs=("deu", "eng"))
    INDEX.add_entry(Entry(did=did, url=url, filename="toy.tgz", in_paths=["a.de", "a.en"], in_ext="txt"))
    src = Source("toy", "mtdata", str(did), ("de", "en"))
    outs = {"de": tmp_path / "o.de", "en": tmp_path / "o.en"}
    with pytest.raises(InputError) as e:
        fetch_mtdata_source(src, outs, tmp_path / "cache", retries=0)
    assert f"mtdata could not get {did} from {url}" in str(e.value)
    assert f"run `mtdata cache -di {did}` on a machine that has one and copy its cache" in str(e.value)
    assert not outs["de"].exists()
    record.fault("no network while sacrebleu downloads a test set")
    monkeypatch.setattr(sb_base, "SACREBLEU_DIR", str(tmp_path / "sacrebleu"))
    ds = FakeSGMLDataset("rnmt-offline", data=[url], md5=["0" * 32], langpairs={"ro-en": ["s.sgm", "r.sgm"]})
    monkeypatch.setitem(sb.DATASETS, "rnmt-offline", ds)
    outs = {"en": tmp_path / "nd.en", "ro": tmp_path / "nd.ro"}
    with pytest.raises(InputError) as e:
        fetch_sacrebleu_source(Source("nd", "sacrebleu", "rnmt-offline:ro-en", ("en", "ro")), outs)
    assert f"sacrebleu could not get test set rnmt-offline from {url}" in str(e.value)
    assert "run `sacrebleu -t rnmt-offline -l ro-en --echo src` on a machine that has one" in str(e.value)
    assert not outs["en"].exists()
