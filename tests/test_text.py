"""Tokenization, BPE and vocabulary: what goes in comes back out."""

import os
from pathlib import Path

import pytest

from rnmt.data import bpe
from rnmt.data.synthetic import generate_pairs
from rnmt.data.tokenize import detokenize, tokenize
from rnmt.data.vocab import EOS_ID, UNK_ID, Vocab
from rnmt.io import InputError


def test_moses_tokenize_escapes_and_detokenize_restores() -> None:
    line = 'He said "it\'s the end-of-year sale" (50% off).'
    tok = tokenize(line, "en")
    assert "&quot;" in tok and "&apos;s" in tok and "@-@" in tok
    assert detokenize(tok, "en") == line


def test_lowercase_option() -> None:
    assert tokenize("The Dog.", "en", lowercase=True) == "the dog ."


def test_bpe_apply_then_undo_is_identity(tmp_path: Path) -> None:
    lines = [tokenize(p.target_text, "en") for p in generate_pairs(4, 400)]
    codes = tmp_path / "codes"
    bpe.learn(lines, codes, merges=60)
    seg = bpe.Segmenter(codes)
    segmented = [seg(line) for line in lines]
    split_words = sum(t.endswith(bpe.SEPARATOR) for s in segmented for t in s.split())
    assert split_words > 100, "with few merges many words must be split, or the test proves nothing"
    assert [bpe.undo(s) for s in segmented] == lines
    # unseen words are segmented too, and still round-trip
    assert bpe.undo(seg("zyxwvut qqq")) == "zyxwvut qqq"


def test_more_merges_give_fewer_subwords(tmp_path: Path) -> None:
    lines = [tokenize(p.target_text, "en") for p in generate_pairs(4, 400)]
    counts = []
    for merges in (20, 200):
        bpe.learn(lines, tmp_path / f"c{merges}", merges=merges)
        seg = bpe.Segmenter(tmp_path / f"c{merges}")
        counts.append(sum(len(seg(line).split()) for line in lines))
    assert counts[1] < counts[0]


def test_missing_codes_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="codes file not found"):
        bpe.Segmenter(tmp_path / "nope")


def test_vocab_roundtrip_and_unknowns(tmp_path: Path) -> None:
    v = Vocab.build(["a b b c", "c c d"], max_size=6)
    assert v.itos[4:] == ["c", "b"]                  # by frequency, capped
    v.save(tmp_path / "v")
    w = Vocab.load(tmp_path / "v")
    assert w.itos == v.itos
    assert w.encode("c x") == [4, UNK_ID]
    assert w.decode([4, 5, EOS_ID]) == "c b"


def test_detruecase_capitalises_sentence_starts_only() -> None:
    """A truecased corpus' output gets its sentence starts capitalised back (sacremoses' MosesDetruecaser)."""
    from rnmt.data.tokenize import postprocess

    def detruecase(line: str) -> str:
        return postprocess(line, "en", detruecase=True)[0]

    assert detruecase("the cat sat . then it left ! now it stays") == "The cat sat . Then it left ! Now it stays"
    assert detruecase("&quot; yes , &quot; he said .") == "&quot; Yes , &quot; he said ."
    assert detruecase("") == ""


def test_bpe_learning_logs_lines_not_carriage_return_fragments(tmp_path: Path) -> None:
    """In a job's log (stderr not a terminal) learning BPE writes whole lines: no progress-bar fragments."""
    import random
    import subprocess
    import sys

    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(3, 9))) for _ in range(400)]
    (tmp_path / "train.txt").write_text("\n".join(" ".join(rng.choices(words, k=12)) for _ in range(2000)) + "\n")
    r = subprocess.run([sys.executable, "-m", "rnmt", "bpe", "learn", "--merges", "300", "--codes",
                        str(tmp_path / "codes"), str(tmp_path / "train.txt")], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")})
    assert r.returncode == 0, r.stderr
    assert "\r" not in r.stderr and "it/s" not in r.stderr
    assert "learned up to 300 BPE merges" in r.stderr
    assert len((tmp_path / "codes").read_text().splitlines()) > 250


def test_progress_in_a_log_is_lines_with_count_rate_and_eta(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from rnmt.progress import logged

    log = logging.getLogger("t")
    with caplog.at_level(logging.INFO, logger="t"):
        assert list(logged(range(5), 5, "things done", log, every_s=0)) == [0, 1, 2, 3, 4]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 4                                     # after items 1 to 4; the last is the end
    assert lines[0].startswith("things done: 1 of 5 (20%), ") and "ETA" in lines[0]
