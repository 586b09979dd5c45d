"""What a reader of a rendered table sees: a difference coloured by whether ours is better, not by its sign;
a spread written as precisely as its value; a wide table that scrolls rather than losing columns."""

import math
import re
from pathlib import Path

import pandas as pd

from rnmt.planning.plan import Row, Table
from rnmt.report.htmltable import html_table
from rnmt.report.layout import fmt

METRICS = ["bleu", "params_m", "decode_seconds_per_sentence", "gate_pearson_r", "train_tgt_words_per_s"]


def test_a_spread_has_the_decimals_of_its_value() -> None:
    assert fmt(0.119, 0.0) == "0.119 ± 0.000"
    assert fmt(0.119, 0.0042) == "0.119 ± 0.004"
    assert fmt(22.4812, 0.1234) == "22.48 ± 0.12"
    assert fmt(12345.0, 12.3) == "12,345 ± 12"
    assert fmt(22.48) == "22.48" and fmt(math.nan, 1.0) == "–"


def test_differences_are_coloured_by_whether_ours_is_better() -> None:
    table = Table("t", Path("t.yaml"), "T", "c", "test", METRICS, [Row("A", "a", {}, (1, 2))])
    # ours against the paper: lower BLEU (worse), fewer parameters (a size: neither), fewer seconds per
    # sentence (better), a weaker gate correlation (reported, not ranked), more words/s (better)
    ours = {"bleu": (20.0, 22.0), "params_m": (10.0, 87.9), "decode_seconds_per_sentence": (0.01, 0.02),
            "gate_pearson_r": (0.1, -0.98), "train_tgt_words_per_s": (2000.0, 1500.0)}
    df = pd.DataFrame([{"system": "A", "metric": m, "ours": o, "paper": p, "diff": o - p, "std": 0.5,
                        "why_empty": "", "signature": "", "scale": "mini", "run": "r", "p_value": math.nan}
                       for m, (o, p) in ours.items()])
    page = html_table(table, df)
    classes = re.findall(r'<td class="diff ?([a-z]*)">', page)
    assert classes == ["worse", "", "better", "", "better"]
    assert 'div class="scroll"><table>' in page and "overflow-x: auto" in page
