"""Downloads and archives against a local HTTP server on 127.0.0.1 serving archives built here."""

import gzip
import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from httpserver import Files, make_tgz, serve
from rnmt.data.download import DownloadError, download, is_complete, sha256_of
from rnmt.data.extract import UnsafeArchiveError, extract_all, extract_member, list_members

BODY = b"".join(f"line {i} of a corpus\n".encode() for i in range(20000))


def sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def test_download_verifies_and_does_not_download_again(tmp_path: Path) -> None:
    files = Files({"/a.tgz": make_tgz({"x/a.en": BODY})})
    with serve(files) as base:
        dest = download(f"{base}/a.tgz", tmp_path / "a.tgz", sha(files.content["/a.tgz"]), backoff=0)
        assert dest.read_bytes() == files.content["/a.tgz"]
        assert is_complete(dest, sha(files.content["/a.tgz"]))
        download(f"{base}/a.tgz", tmp_path / "a.tgz", sha(files.content["/a.tgz"]), backoff=0)
    assert files.count("/a.tgz") == 1                       # complete: never fetched twice
    assert not list(tmp_path.glob("*.part"))


def test_unpinned_download_records_its_sha256(tmp_path: Path) -> None:
    files = Files({"/b.gz": gzip.compress(BODY)})
    with serve(files) as base:
        dest = download(f"{base}/b.gz", tmp_path / "b.gz", None, backoff=0, allow_unpinned=True)
    assert (tmp_path / "b.gz.sha256").read_text().split()[0] == sha_of_file(dest)
    assert is_complete(dest)


def sha_of_file(p: Path) -> str:
    return sha256_of(p)


def test_checksum_mismatch_is_a_clear_error_and_leaves_no_file(tmp_path: Path) -> None:
    files = Files({"/c.tgz": make_tgz({"c": BODY})})
    with serve(files) as base, pytest.raises(DownloadError, match="sha256 mismatch: expected 0000"):
        download(f"{base}/c.tgz", tmp_path / "c.tgz", "0" * 64, backoff=0)
    assert list(tmp_path.iterdir()) == []                   # neither the file nor a partial one


def test_dropped_connection_is_retried_and_resumed_with_a_range(tmp_path: Path) -> None:
    files = Files({"/d.bin": BODY}, failures={"/d.bin": ["drop"]})
    with serve(files) as base:
        dest = download(f"{base}/d.bin", tmp_path / "d.bin", sha(BODY), backoff=0)
    assert dest.read_bytes() == BODY
    (first, r1), (second, r2) = files.requests
    assert r1 is None and r2 is not None and int(r2[6:].rstrip("-")) == len(BODY) // 2


def test_server_errors_are_retried_but_missing_files_are_not(tmp_path: Path) -> None:
    files = Files({"/e.bin": BODY}, failures={"/e.bin": [503, 503]})
    with serve(files) as base:
        assert download(f"{base}/e.bin", tmp_path / "e.bin", sha(BODY), backoff=0).read_bytes() == BODY
        assert files.count("/e.bin") == 3
        with pytest.raises(DownloadError, match="HTTP 404"):
            download(f"{base}/missing.tgz", tmp_path / "m.tgz", "0" * 64, backoff=0)
    assert files.count("/missing.tgz") == 1
    assert not (tmp_path / "m.tgz").exists() and not (tmp_path / "m.tgz.part").exists()


def test_giving_up_keeps_the_partial_file_and_the_next_run_resumes_it(tmp_path: Path) -> None:
    files = Files({"/f.bin": BODY}, failures={"/f.bin": ["drop", 503]})
    with serve(files) as base:
        with pytest.raises(DownloadError, match="after 2 attempts"):
            download(f"{base}/f.bin", tmp_path / "f.bin", sha(BODY), retries=1, backoff=0)
        part = tmp_path / "f.bin.part"
        assert part.stat().st_size == len(BODY) // 2 and not (tmp_path / "f.bin").exists()
        download(f"{base}/f.bin", tmp_path / "f.bin", sha(BODY), backoff=0)      # a later run
    assert (tmp_path / "f.bin").read_bytes() == BODY and not part.exists()
    assert files.requests[-1][1] == f"bytes={len(BODY) // 2}-"


def test_members_of_tgz_zip_and_gz_are_extracted(tmp_path: Path) -> None:
    (tmp_path / "a.tgz").write_bytes(make_tgz({"dir/a.en": b"hello\n", "dir/b.en.gz": gzip.compress(b"gz\n")}))
    assert list_members(tmp_path / "a.tgz") == ["dir/a.en", "dir/b.en.gz"]
    assert extract_member(tmp_path / "a.tgz", "dir/a.en", tmp_path / "o1").read_bytes() == b"hello\n"
    assert extract_member(tmp_path / "a.tgz", "dir/b.en.gz", tmp_path / "o2").read_bytes() == b"gz\n"
    with zipfile.ZipFile(tmp_path / "z.zip", "w") as z:
        z.writestr("SETIMES.en-ro.en", "zip line\n")
    assert extract_member(tmp_path / "z.zip", "SETIMES.en-ro.en", tmp_path / "o3").read_text() == "zip line\n"
    (tmp_path / "p.gz").write_bytes(gzip.compress(b"plain gz\n"))
    assert extract_member(tmp_path / "p.gz", None, tmp_path / "o4").read_text() == "plain gz\n"
    out = extract_all(tmp_path / "a.tgz", tmp_path / "all")
    assert sorted(p.relative_to(tmp_path / "all").as_posix() for p in out) == ["dir/a.en", "dir/b.en.gz"]


def test_missing_member_names_a_close_match(tmp_path: Path) -> None:
    (tmp_path / "a.tgz").write_bytes(make_tgz({"training/nc.de": b"x\n"}))
    with pytest.raises(Exception, match="did you mean 'training/nc.de'"):
        extract_member(tmp_path / "a.tgz", "nc.de", tmp_path / "o")


@pytest.mark.parametrize("name", ["../evil.txt", "/etc/evil.txt", "ok/../../evil.txt"])
def test_unsafe_member_paths_are_refused(tmp_path: Path, name: str) -> None:
    (tmp_path / "bad.tgz").write_bytes(make_tgz({"good.txt": b"ok\n", name: b"evil\n"}))
    with pytest.raises(UnsafeArchiveError, match="unsafe path"):
        extract_all(tmp_path / "bad.tgz", tmp_path / "out")
    with pytest.raises(UnsafeArchiveError):
        extract_member(tmp_path / "bad.tgz", "good.txt", tmp_path / "out" / "good.txt")
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path / "out").exists()


def test_links_in_archives_are_refused(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        link = tarfile.TarInfo("data.en")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    (tmp_path / "link.tgz").write_bytes(buf.getvalue())
    with pytest.raises(UnsafeArchiveError, match="is a link"):
        extract_member(tmp_path / "link.tgz", "data.en", tmp_path / "o")
    with zipfile.ZipFile(tmp_path / "z.zip", "w") as z:
        z.writestr("../up.txt", "x")
    with pytest.raises(UnsafeArchiveError):
        extract_all(tmp_path / "z.zip", tmp_path / "zout")


def test_mtdata_sources_go_through_mtdata_download_cache_and_parser(tmp_path: Path) -> None:
    from mtdata.entry import DatasetId, Entry
    from mtdata.index import INDEX

    from rnmt.data.fetch import fetch_mtdata_source
    from rnmt.data.sources import Source

    files = Files({"/toy.tgz": make_tgz({"toy/a.de": b"Hallo  Welt\nZwei\n", "toy/a.en": b"Hello world\nTwo\n"})},
                  failures={"/toy.tgz": [503]})
    with serve(files) as base:
        did = DatasetId(group="Rnmttest", name=f"toy{id(files)}", version="1", langs=("deu", "eng"))
        INDEX.add_entry(Entry(did=did, url=f"{base}/toy.tgz", filename="toy.tgz", in_paths=["toy/a.de", "toy/a.en"],
                              in_ext="txt"))
        src = Source("toy", "mtdata", str(did), ("de", "en"))
        outs = {"de": tmp_path / "out.de", "en": tmp_path / "out.en"}
        assert fetch_mtdata_source(src, outs, tmp_path / "cache", backoff=0) == {"de": 2, "en": 2}
        assert fetch_mtdata_source(src, outs, tmp_path / "cache", backoff=0) == {"de": 2, "en": 2}
    assert outs["de"].read_text() == "Hallo Welt\nZwei\n" and outs["en"].read_text() == "Hello world\nTwo\n"
    assert files.count("/toy.tgz") == 2           # the 503, then one download; the second fetch used the cache


def test_sacrebleu_sources_go_through_sacrebleu_download_and_md5_check(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import hashlib

    import sacrebleu.dataset as sb
    import sacrebleu.dataset.base as sb_base
    from sacrebleu.dataset.fake_sgml import FakeSGMLDataset

    from rnmt.data.fetch import fetch_sacrebleu_source
    from rnmt.data.sources import Source

    tgz = make_tgz({"dev/news-src.ro.sgm": b'<srcset>\n<doc docid="a">\n<seg id="1">Bun\xc4\x83 ziua .</seg>\n</doc>\n',
                    "dev/news-ref.en.sgm": b'<refset>\n<doc docid="a">\n<seg id="1">Good day .</seg>\n</doc>\n'})
    files = Files({"/dev.tgz": tgz})
    monkeypatch.setattr(sb_base, "SACREBLEU_DIR", str(tmp_path / "sacrebleu"))
    with serve(files) as base:
        ds = FakeSGMLDataset("rnmt-test", data=[f"{base}/dev.tgz"], md5=[hashlib.md5(tgz).hexdigest()],
                             langpairs={"ro-en": ["dev/news-src.ro.sgm", "dev/news-ref.en.sgm"]})
        monkeypatch.setitem(sb.DATASETS, "rnmt-test", ds)
        src = Source("nd", "sacrebleu", "rnmt-test:ro-en", ("en", "ro"))     # registry langs in either order
        outs = {"en": tmp_path / "nd.en", "ro": tmp_path / "nd.ro"}
        assert fetch_sacrebleu_source(src, outs) == {"ro": 1, "en": 1}
    assert outs["ro"].read_text() == "Bună ziua .\n" and outs["en"].read_text() == "Good day .\n"
