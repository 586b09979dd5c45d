"""What a reader of a rendered table sees: a difference coloured by whether ours is better, not by its sign;
a spread written as precisely as its value; a wide table that scrolls rather than losing columns."""

import math
import re
from pathlib import Path

import pandas as pd

from rnmt.planning.table import Row, Table
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


def test_a_long_training_cost_figure_is_drawn_as_a_curve_not_as_its_noise(tmp_path: Path, monkeypatch) -> None:
    """UD Figure 2 logs every minibatch: at `mini`, 6,000 noisy costs a system, whose four lines drawn with
    the paper's 5-minibatch smoothing hid each other. The trailing mean widens to a fiftieth of the curve
    and the axis says over how many minibatches; a 215-minibatch run (the paper's) keeps 5."""
    import json

    from rnmt.planning.table import load_table
    from rnmt.report import figures

    root = Path(__file__).resolve().parents[1]
    table = load_table(root / "workflow/experiments/ud-figure2.yaml", "c")
    logs = []
    for variant, steps in (("ud-gru", 600), ("ud-lstm", 215)):
        log = tmp_path / "models/c" / variant / "seed1/train.jsonl"
        log.parent.mkdir(parents=True)
        costs = [3.0 + (1.0 if i % 2 else -1.0) for i in range(steps)]          # noise of ±1 around 3
        log.write_text("".join(json.dumps({"kind": "train", "step": i + 1, "loss": v, "train_seconds": i + 1.0})
                               + "\n" for i, v in enumerate(costs)))
        logs.append(log)
    saved = []
    monkeypatch.setattr(figures, "save", lambda fig, out: saved.append(fig))
    figures.draw(table, tmp_path / "f.png", logs=logs)
    ax = saved[0].axes[0]
    lines = {line.get_label(): line.get_ydata() for line in ax.get_lines()}
    gru, lstm = lines["GRU"], lines["LSTM"]
    assert len(gru) == 600 and len(lstm) == 215
    assert all(abs(v - 3.0) < 1e-9 for v in gru[11:]), "a 12-minibatch mean (600 / 50) of ±1 noise is flat"
    assert abs(lstm[4] - 2.8) < 1e-9, "215 minibatches keep the paper's 5-minibatch mean: (−1+1−1+1−1)/5 + 3"
    assert figures.window_for(6000) == 120 and figures.window_for(215) == 5
    assert ax.get_ylabel().endswith("mean over the last 12 logged minibatches")


def test_a_figure_of_rows_with_seeds_draws_their_mean_as_the_table_reports_it(tmp_path: Path, monkeypatch) -> None:
    """ATR Figure 3 and DTMT Figure 3 at three seeds a row: the figure drew seed 1 alone beside a table of the
    seeds' means. Each row's line is now the mean over its seeds (r too), each seed thin behind it, the
    legend saying over how many; a seed whose model gave no output is left out of the mean, and says so."""
    import json

    import pytest
    import yaml

    from rnmt.planning.table import load_table
    from rnmt.report import figures
    from rnmt.report.layout import tokenized
    from rnmt.report.tables import bucket_name, length_range

    root = Path(__file__).resolve().parents[1]
    saved = []
    monkeypatch.setattr(figures, "save", lambda fig, out: saved.append(fig))

    def drawn(label: str) -> list[float]:
        return list(next(x for x in saved[-1].axes[0].get_lines() if x.get_label() == label).get_ydata())

    gates = []
    for seed, (forget, r) in enumerate((([0.2, 0.4], 0.5), ([0.4, 0.6], 0.7), ([0.6, 0.8], 0.9)), start=1):
        f = tmp_path / f"analysis/c/atr-rnnsearch-atr/seed{seed}/gates.test.json"
        f.parent.mkdir(parents=True)
        f.write_text(json.dumps({"dec": {"mean_input_gate_by_position": [1.0 - v for v in forget],
                                         "mean_forget_gate_by_position": forget, "pearson_r": r}}))
        gates.append(f)
    table = load_table(root / "workflow/experiments/atr-figure3.yaml", "c")
    system = table.trained_rows[0].system
    figures.draw(table, tmp_path / "g.png", gate_files=gates)
    assert drawn(f"{system} (mean of 3 seeds): forget gate, r = 0.700") == pytest.approx([0.4, 0.6])
    assert drawn(f"{system} (mean of 3 seeds): input gate (dec)") == pytest.approx([0.6, 0.4])
    assert sum(x.get_label() == "_seed" for x in saved[-1].axes[0].get_lines()) == 6     # each seed's two lines

    path = root / "workflow/experiments/dtmt-figure3.yaml"
    table = load_table(path, "c")
    lengths = [m for m in table.metrics if tokenized(m)[1].startswith("bleu_len@")]
    assert yaml.safe_load(path.read_text())["figure"]["kind"] == "length" and lengths

    def scores(bleu: float) -> dict:
        out: dict = {}
        for name in lengths:
            tok, base = tokenized(name)
            lo, hi = length_range(base)
            if hi is None:
                out.setdefault(f"{tok}bleu_longer_than", {})[str(lo)] = bleu
            else:
                out.setdefault(f"{tok}bleu_by_length", {})[bucket_name(lo, hi)] = {"bleu": bleu, "sentences": 100}
        return out

    files = []
    row = table.trained_rows[0]
    for seed, bleu in ((1, 20.0), (2, 30.0), (3, None)):          # seed 3 gave no output: no BLEU at all
        f = tmp_path / f"metrics/c/{row.variant}/seed{seed}/test.json"
        f.parent.mkdir(parents=True)
        f.write_text(json.dumps({"variant": row.variant, "scores": scores(bleu) if bleu else {}}))
        files.append(f)
    figures.draw(table, tmp_path / "l.png", metrics=files)
    assert drawn(f"{row.system} (mean of 2 of 3 seeds)") == [25.0] * len(lengths)
