"""The metrics a table may list, with their column labels: one list, from which the experiment schema's
`metric` block is made (`x-generated-from`), so a new metric is named in one place."""

from __future__ import annotations

import re
from typing import Any

TOKENIZED = "tok_"          # the prefix of a BLEU on tokenized text (multi-bleu; evaluate/score.py)
METRIC_LABELS = {
    "bleu": "BLEU",
    "tok_bleu_compound": "tok BLEU (compounds split)",
    "chrf": "chrF",
    "params_m": "#Params (M)",
    "train_tgt_words_per_s": "Train words/s",
    "train_src_words_per_s": "Train src words/s",
    "decode_words_per_s": "Decode words/s",
    "decode_seconds_per_sentence": "Decode s/sent",
    "decode_words_per_s_beam1": "Decode words/s (beam 1)",
    "decode_seconds_per_sentence_beam1": "Decode s/sent (beam 1)",
    "train_tgt_words_per_s_ratio": "Train speed ×",
    "decode_words_per_s_beam1_ratio": "Decode speed ×",
    "gate_pearson_r": "Pearson r (i, f)",
    "weight_matrices": "#WM",
    "matrix_transformations": "#MT",
    "train_minutes": "Train min",
    "best_dev_ppl": "Dev ppl",
    "bleu_avg": "Avg",
}
# which way a metric is better, for colouring differences: higher (+1), lower (-1), neither (0: a size or
# a count, which a scale changes, and ATR's gate correlation, which the paper reports rather than ranks)
LOWER_IS_BETTER = ("decode_seconds_per_sentence", "best_dev_ppl", "train_minutes")
NEITHER = ("params_m", "gate_pearson_r", "weight_matrices", "matrix_transformations")


def better(metric: str) -> int:
    """+1 where a higher value is better, -1 where a lower one is, 0 where neither."""
    if metric.startswith(LOWER_IS_BETTER):
        return -1
    return 0 if metric in NEITHER else 1


def timed(metric: str) -> bool:
    """Whether a metric measures time (a speed, a duration, or a ratio of speeds): it varies with the
    machine and its load, while every other metric follows from the run's settings and data."""
    return any(word in metric for word in ("_per_s", "seconds", "minutes"))


# BLEU per test set of a merged test split and per source-length bucket (each also with TOKENIZED)
BLEU_FAMILIES = (r"bleu@[a-z0-9-]+", r"bleu_len@[0-9]+-[0-9]+", r"bleu_len@[0-9]+-inf")


def length_range(metric: str) -> tuple[int, int | None]:
    """(lo, hi) of a bleu_len@<lo>-<hi> metric (without tok_): sources of lo+1..hi words; hi None for
    bleu_len@<lo>-inf, sources longer than lo."""
    lo, hi = metric.removeprefix("bleu_len@").split("-")
    return int(lo), None if hi == "inf" else int(hi)


def bleu_family(metric: str) -> bool:
    """bleu and the metrics made of it: per test set (bleu@), per source length (bleu_len@), the sets' mean."""
    return metric in ("bleu", "bleu_avg") or metric.startswith(("bleu@", "bleu_len@"))


def metric_schema() -> dict[str, Any]:
    """The experiment schema's `metric` block: the BLEU family, each also on tokenized text, and every other
    metric of METRIC_LABELS."""
    bleu = [m for m in METRIC_LABELS if bleu_family(m)]
    others = [re.escape(m) for m in METRIC_LABELS if not bleu_family(m)]
    family = "|".join([*bleu, *BLEU_FAMILIES])
    return {"type": "string", "pattern": f"^(({TOKENIZED})?({family})|{'|'.join(others)})$",
            "description": "a metric of the runs' metrics files; bleu@<test part> is BLEU on one test set of a "
                           "merged test split (NIST MT02..MT08), bleu_avg their mean; bleu_len@a-b BLEU on "
                           "sources of a..b words; each of these with tok_ before it is the same on tokenized "
                           "text (multi-bleu, as tok_bleu); tok_bleu_compound is tok_bleu after tensor2tensor's "
                           "compound splitting (SR-NMT); *_ratio a speed divided by the baseline row's; "
                           "weight_matrices / matrix_transformations count a cell (ATR Table 1) without training"}
