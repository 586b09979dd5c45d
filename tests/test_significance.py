"""Which decodings a row's significance test pairs, and a row without its metrics refused by name."""

from pathlib import Path

import pytest

from rnmt.io import InputError
from rnmt.planning.table import Row, Table
from rnmt.report.significance import p_values, pairs


def row(name: str, seeds: tuple[int, ...], ensemble: bool = False) -> Row:
    return Row(name, name.lower(), {}, seeds, ensemble)


def test_rows_with_the_reference_rows_seeds_pair_seed_by_seed() -> None:
    base = row("GRU", (1, 2, 3))
    assert pairs(row("ATR", (1, 2, 3)), base) == [("seed1", "seed1"), ("seed2", "seed2"), ("seed3", "seed3")]
    # other seeds, or an ensemble: every decoding of the row against each of the reference row's
    assert pairs(row("ATR", (4, 5)), row("GRU", (1,))) == [("seed4", "seed1"), ("seed5", "seed1")]
    assert pairs(row("ATR ens", (1, 2), ensemble=True), row("GRU", (1, 2))) == [("ens1-2", "seed1"),
                                                                                 ("ens1-2", "seed2")]


def test_a_missing_decoding_or_reference_row_is_named() -> None:
    table = Table("t", Path("t.yaml"), "T", "c", "test", ["bleu"], [row("GRU", (1, 2)), row("ATR", (1, 2))],
                  baseline="GRU")
    with pytest.raises(InputError, match=r"no metrics of gru seed2, atr seed2, which the test of row 'ATR'"):
        p_values(table, {("gru", "seed1"): Path("a.json"), ("atr", "seed1"): Path("b.json")})
    table.baseline = "LSTM"
    with pytest.raises(InputError, match="baseline 'LSTM' is not one of its trained rows"):
        p_values(table, {})


def test_a_scale_with_seeds_trains_that_many_a_row_and_ensembles_keep_theirs() -> None:
    from rnmt.planning.table import row_seeds

    assert row_seeds({"seeds": [1]}, seeds=3) == (1, 2, 3)
    assert row_seeds({"seeds": [2, 5]}, seeds=3) == (2, 5, 1)          # its own first, then the lowest unused
    assert row_seeds({"seeds": [1, 2, 3, 4]}, seeds=3) == (1, 2, 3, 4)
    assert row_seeds({"seeds": [1, 2], "ensemble": True}, seeds=3) == (1, 2)
    assert row_seeds({}, max_seeds=2, seeds=3) == (1, 2)                  # a cap still caps
    assert row_seeds({"seeds": [7]}) == (7,)                              # no setting: the papers' one run


def test_an_ensemble_row_of_one_seed_is_left_empty_with_the_reason() -> None:
    from rnmt.planning.table import table_from_experiment

    exp = {"table": "t", "title": "T", "metrics": ["bleu"],
           "rows": [{"system": "ATR", "variant": "atr", "paper": {"bleu": 20.0}},
                    {"system": "ATR ens", "variant": "atr", "ensemble": True, "seeds": [1, 2, 3],
                     "paper": {"bleu": 22.0}}]}
    one = table_from_experiment(exp, Path("t.yaml"), "c", max_seeds=1)
    assert [r.trained for r in one.rows] == [True, False]
    assert one.rows[1].paper == {"bleu": 22.0} and "max_seeds" in one.rows[1].why_not
    two = table_from_experiment(exp, Path("t.yaml"), "c", max_seeds=2)
    assert two.rows[1].trained and two.rows[1].members() == ["ens1-2"]


def test_a_tables_notes_say_how_many_seeds_its_rows_trained_in_this_run() -> None:
    """The scale's note does not say it: a run may set the seeds otherwise (`scales={mini: {seeds: 1}}`)."""
    from rnmt.report.layout import seeds_ran

    def table(*rows: Row) -> Table:
        return Table("t", Path("t.yaml"), "T", "c", "test", ["bleu"], list(rows))

    assert seeds_ran(table(row("GRU", (1,)), row("ATR", (1,)))) == "; 1 seed a row"
    assert seeds_ran(table(row("GRU", (1, 2, 3)), row("ATR ens", (1, 2, 3), ensemble=True))) == \
        "; 3 seeds a row (mean ± std), ensembles of 3 models"
    assert seeds_ran(table(row("GRU", (1,)), row("ATR", (1, 2)))) == "; 1 or 2 seeds a row (mean ± std)"
    assert seeds_ran(table(Row("Buck et al.", None, {"bleu": 20.7}))) == ""
