"""`rnmt translate --bundle` in a pipe: each line answered once it is written, and n-best lists whose
scores are the beam search's."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

from rnmt.data.batching import pad_source
from rnmt.decode.beam import beam_search
from rnmt.decode.bundle import Bundle, export
from rnmt.io import InputError, line_batches
from tinytrain import train_tiny

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
LINES = ["a small test .", "the red house is big .", "a cat ."]


@pytest.fixture(scope="module")
def bundle(corpus: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("stream")
    export(d / "bundle", [train_tiny(corpus, d / "model")], "en", "en", {}, decode={"beam": 3, "batch_size": 16})
    return d / "bundle"


def read_line(stream, timeout: float) -> bytes:
    ready, _, _ = select.select([stream], [], [], timeout)
    assert ready, f"no answer within {timeout} s"
    return stream.readline()


def test_a_pipe_gets_each_answer_before_the_next_line_is_written(bundle: Path) -> None:
    expected = Bundle.load(bundle).translate(LINES[:2])
    p = subprocess.Popen([sys.executable, "-m", "rnmt", "-q", "translate", "--bundle", str(bundle), "--threads", "1"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    try:
        p.stdin.write((LINES[0] + "\n").encode())
        p.stdin.flush()
        # the process is still waiting for more input, and has answered the first line
        assert read_line(p.stdout, 120).decode().rstrip("\n") == expected[0]
        assert p.poll() is None
        p.stdin.write((LINES[1] + "\n").encode())
        p.stdin.close()
        assert p.stdout.read().decode().splitlines() == [expected[1]]
        assert p.wait(timeout=120) == 0, p.stderr.read().decode()
    finally:
        p.kill()
        p.wait()


def test_nbest_lists_rank_the_beams_hypotheses_by_its_scores(bundle: Path) -> None:
    b = Bundle.load(bundle)
    translator = b.translator(nbest=3)
    lists = translator(LINES)
    best = b.translate(LINES)
    sources = [translator.src_vocab.encode(translator.prepare(line)) for line in LINES]
    src, mask = pad_source(sources, None)
    limits = (mask.sum(1).float() * 2 + 10).long()
    searched = beam_search(translator.model, src, mask, 3, limits, "average", 0.6)
    for found, one, (_, score) in zip(lists, best, searched, strict=True):
        assert 1 <= len(found) <= 3
        assert found[0][0] == one and found[0][1] == pytest.approx(score, abs=1e-6)   # the 1-best, its score
        assert [s for _, s, _ in found] == sorted((s for _, s, _ in found), reverse=True)
        for _, s, logp in found:                      # "average": log p over the length with </s>
            assert logp <= 0 and s >= logp

    got = subprocess.run([sys.executable, "-m", "rnmt", "-q", "translate", "--bundle", str(bundle), "--nbest", "3"],
                         input="\n".join(LINES) + "\n", capture_output=True, text=True, env=ENV, timeout=120)
    assert got.returncode == 0, got.stderr
    rows = [line.split(" ||| ") for line in got.stdout.splitlines()]
    assert [int(r[0]) for r in rows] == [i for i, f in enumerate(lists) for _ in f]
    assert [r[1] for r in rows] == [t for f in lists for t, _, _ in f]
    assert [float(r[3]) for r in rows] == pytest.approx([s for f in lists for _, s, _ in f], abs=1e-4)
    assert [float(r[2].removeprefix("logp= ")) for r in rows] == pytest.approx(
        [lp for f in lists for _, _, lp in f], abs=1e-4)


def test_an_nbest_longer_than_the_beam_is_refused_with_the_fix(bundle: Path) -> None:
    with pytest.raises(InputError, match=r"--nbest 4: give 1 to the beam size \(3\).*--beam 4"):
        Bundle.load(bundle).translator(nbest=4)
    got = subprocess.run([sys.executable, "-m", "rnmt", "translate", "--model", str(bundle / "model1.pt"), "--nbest",
                          "2", "a", "b"], capture_output=True, text=True, env=ENV, timeout=120)
    assert got.returncode == 2 and "--nbest needs --bundle" in got.stderr and "Traceback" not in got.stderr


def test_line_batches_take_what_is_there_and_wait_for_the_rest() -> None:
    read, write = os.pipe()
    try:
        os.write(write, b"one\ntwo\nthr")
        batches = line_batches(read, 5)
        assert next(batches) == [b"one\n", b"two\n"]          # not waiting for a fifth line, nor for "thr"
        os.write(write, b"ee\nfour\nfive\nsix\nseven\n")
        assert next(batches) == [b"three\n", b"four\n", b"five\n", b"six\n", b"seven\n"]   # at most 5
        os.write(write, b"last, no newline")
        os.close(write)
        write = -1
        assert list(batches) == [[b"last, no newline"]]
    finally:
        os.close(read)
        if write >= 0:
            os.close(write)
