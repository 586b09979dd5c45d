"""Lines end at \n and nowhere else, in every reader: a sentence holding U+2028 (line separator), U+0085
(next line), a form feed or a lone \r stays one line, so the pairs after it stay aligned."""

from __future__ import annotations

from pathlib import Path

import pytest

from rnmt.data import truecase
from rnmt.data.fetch import fetch_manual_source
from rnmt.data.labels import read_labels
from rnmt.data.segment_pairs import segment_pairs
from rnmt.data.sources import Source
from rnmt.io import InputError, iter_lines, read_lines, split_lines

ODD = ["one \u2028 two", "three \u0085 four", "five \x0c six", "seven \r eight", "nine"]


def test_split_lines_splits_at_newlines_only() -> None:
    text = "\n".join(ODD) + "\n"
    assert len(text.splitlines()) > len(ODD)                  # what str.splitlines would have done
    assert split_lines(text) == ODD
    assert split_lines("a\r\nb") == ["a", "b"] and split_lines("") == [] and split_lines("\n") == [""]


def test_file_readers_keep_odd_characters_inside_their_line(tmp_path: Path) -> None:
    f = tmp_path / "t.txt"
    f.write_bytes(("\n".join(ODD) + "\n").encode())
    assert read_lines(f) == ODD and list(iter_lines(f)) == ODD
    f.write_bytes(b"fine\n\xff\n")
    with pytest.raises(InputError, match=r"t.txt, line 2: not valid UTF-8"):
        read_lines(f)


def test_a_manual_source_with_a_line_separator_stays_aligned(tmp_path: Path) -> None:
    d = tmp_path / "ldc/set"
    d.mkdir(parents=True)
    (d / "a.zh").write_text("\n".join(ODD) + "\n", encoding="utf-8")
    (d / "a.en").write_text("\n".join(f"line {i}" for i in range(len(ODD))) + "\n", encoding="utf-8")
    src = Source("mine", "manual", "set", ("zh", "en"), {"zh": ["a.zh"], "en": ["a.en"]}, ldc=("LDC0000",))
    outs = {"zh": tmp_path / "out.zh", "en": tmp_path / "out.en"}
    counts = fetch_manual_source(src, tmp_path / "ldc", outs, "mine")
    assert read_lines(outs["zh"])[0] == "one \u2028 two" and len(read_lines(outs["zh"])) == len(ODD)
    assert len(read_lines(outs["en"])) == len(ODD) and set(counts.values()) == {len(ODD)}


def test_truecasing_bpe_and_labels_keep_one_line_per_sentence(tmp_path: Path) -> None:
    f = tmp_path / "t.txt"
    f.write_text("\n".join(ODD) + "\n", encoding="utf-8")
    truecase.train(f, tmp_path / "tc.model")
    assert truecase.apply(tmp_path / "tc.model", f, tmp_path / "tc.txt") == len(ODD)
    assert len(read_lines(tmp_path / "tc.txt")) == len(ODD)
    segment_pairs(f, f, None, None, tmp_path / "o.src", tmp_path / "o.tgt", tmp_path / "report.json")
    assert len(read_lines(tmp_path / "o.src")) == len(read_lines(tmp_path / "o.tgt")) == len(ODD)
    labels = tmp_path / "labels"
    labels.write_text("\n".join(" ".join("x" for _ in line.split()) for line in ODD) + "\n", encoding="utf-8")
    assert len(read_labels(labels)) == len(ODD)
