"""The fast path of a computation is the candidate measured fastest on this machine, measured once and
kept per machine; torch's own GRU and LSTM layers are a path of rnmt's GRU and LSTM cells with the step
loop's numbers. Timings here come from a given clock, never the machine's."""

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from cellpaths import float64, outputs_and_grads  # noqa: F401 (float64: autouse fixture)
from rnmt.cells import base, build_cell, taken
from rnmt.cells.base import use_path
from rnmt.io import InputError
from rnmt.machine import fastpath, matmul

CPU = torch.device("cpu")


def clock(durations: dict[str, float], calls: list[str]):
    """A timer whose readings make each candidate take `durations[name]` seconds (calls: the run order)."""
    now = [0.0]

    def timer() -> float:
        return now[0]

    def candidate(name: str):
        def run() -> None:
            calls.append(name)
            now[0] += durations[name]
        return run
    return timer, candidate


@pytest.fixture
def measuring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "fastpath.json"
    monkeypatch.setenv("RNMT_FASTPATH", "measure")
    monkeypatch.setenv("RNMT_FASTPATH_CACHE", str(cache))
    fastpath.forget()
    yield cache
    fastpath.forget()


def test_the_candidate_with_the_lowest_median_time_wins_and_is_kept_for_the_machine(
        measuring: Path, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    calls: list[str] = []
    timer, candidate = clock({"a": 0.003, "b": 0.001, "c": 0.002}, calls)
    names = ("a", "b", "c")
    with caplog.at_level(logging.INFO):
        assert fastpath.choose("k", {n: candidate(n) for n in names}, "a", CPU, reps=3, timer=timer) == "b"
    # the choice and its times are for a reader of the metrics file, not 10 of a job log's 17 lines
    assert not [r for r in caplog.records if r.name == "rnmt.machine.fastpath" and r.levelno >= logging.INFO]
    assert calls == ["a", "b", "c"] * 4          # a warm-up run each, then three interleaved rounds
    kept = json.loads(measuring.read_text())
    # the choice, and beside it the candidates' median times that decided it, for a person reading the file
    machine = fastpath.machine(CPU)
    assert kept == {machine: {"k": "b"}, "medians_ms": {machine: {"k": {"a": 3.0, "b": 1.0, "c": 2.0}}}}
    assert any(k.endswith("| k") and v == "b" for k, v in fastpath.chosen().items())
    fastpath.forget()                              # a new process: the file answers, nothing runs
    calls.clear()
    assert fastpath.choose("k", {n: candidate(n) for n in names}, "a", CPU, timer=timer) == "b"
    assert calls == []


def test_cpus_of_one_name_but_another_generation_measure_apart(
        measuring: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cloud VM calls a Zen 4 and a Zen 5 both "AMD EPYC", and a cluster's nodes may share one home folder:
    a choice measured on one generation is not the other's."""
    from rnmt.machine import hardware

    calls: list[str] = []
    timer, candidate = clock({"a": 0.003, "b": 0.001}, calls)
    try:
        for family in ("family 26, model 2", "family 25, model 17"):
            monkeypatch.setattr(hardware, "cpu_family_model", lambda family=family: family)
            fastpath._processor.cache_clear()
            fastpath.forget()
            assert fastpath.machine(CPU).startswith(f"{hardware.cpu_model()} ({family}) | torch ")
            calls.clear()
            assert fastpath.choose("k", {n: candidate(n) for n in "ab"}, "a", CPU, reps=3, timer=timer) == "b"
            assert calls, f"{family} measured for itself"
        kept = json.loads(measuring.read_text())
        assert len(kept) == 3 and len(kept["medians_ms"]) == 2, kept
    finally:
        fastpath._processor.cache_clear()


def test_a_switch_that_changes_the_candidates_keeps_its_choices_apart(
        measuring: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A choice measured with ATR's persistent kernels forced on or off (or Triton off) weighed other
    candidates than the measured default's, so it is kept under its own machine name."""
    calls: list[str] = []
    timer, candidate = clock({"a": 0.003, "b": 0.001}, calls)
    plain = fastpath.machine(CPU)
    for env, value in (("RNMT_ATR_PERSISTENT", "1"), ("RNMT_ATR_PERSISTENT", "0"), ("RNMT_TRITON", "0")):
        monkeypatch.setenv(env, value)
        assert fastpath.machine(CPU) == f"{plain} | {env}={value}"
        fastpath.forget()
        calls.clear()
        assert fastpath.choose("k", {n: candidate(n) for n in "ab"}, "a", CPU, reps=3, timer=timer) == "b"
        assert calls, f"{env}={value} measured for itself"
        monkeypatch.delenv(env)
    monkeypatch.setenv("RNMT_ATR_PERSISTENT", "auto")                # the default, said aloud
    assert fastpath.machine(CPU) == plain
    kept = json.loads(measuring.read_text())
    assert len(kept) == 4 and len(kept["medians_ms"]) == 3, kept


def test_without_measuring_the_default_is_taken(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RNMT_FASTPATH", "default")
    monkeypatch.setenv("RNMT_FASTPATH_CACHE", str(tmp_path / "c.json"))
    calls: list[str] = []
    timer, candidate = clock({"a": 1.0, "b": 0.0}, calls)
    assert fastpath.choose("k", {"a": candidate("a"), "b": candidate("b")}, "a", CPU, timer=timer) == "a"
    assert calls == [] and not (tmp_path / "c.json").exists()
    monkeypatch.setenv("RNMT_FASTPATH", "fastest")
    with pytest.raises(InputError, match="RNMT_FASTPATH='fastest': valid values are measure, default"):
        fastpath.choose("k", {"a": candidate("a"), "b": candidate("b")}, "a", CPU)


def test_an_unreadable_cache_is_measured_again(measuring: Path) -> None:
    measuring.write_text("{not json")
    calls: list[str] = []
    timer, candidate = clock({"a": 0.002, "b": 0.001}, calls)
    assert fastpath.choose("k", {"a": candidate("a"), "b": candidate("b")}, "a", CPU, timer=timer) == "b"
    assert json.loads(measuring.read_text())[fastpath.machine(CPU)] == {"k": "b"}


def test_measuring_leaves_the_random_number_stream_as_it_was(measuring: Path) -> None:
    torch.manual_seed(3)
    expected = torch.rand(4)
    torch.manual_seed(3)
    fastpath.choose("rng", {"a": lambda: torch.rand(100), "b": lambda: torch.rand(10)}, "a", CPU)
    assert torch.equal(torch.rand(4), expected)


@pytest.mark.parametrize("name", ["gru", "lstm"])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_torchs_own_layer_gives_the_step_loops_numbers(name: str, padded: bool, reverse: bool) -> None:
    torch.manual_seed(0)
    cell = build_cell(name, 5, 6)
    x = torch.randn(3, 7, 5, requires_grad=True)
    mask = torch.ones(3, 7, dtype=torch.bool)
    if padded:
        mask[1, 4:] = False
        mask[2, 1:] = False
    h0 = torch.randn(3, cell.state_size, requires_grad=True)
    got = {}
    for path in ("loop", "torch"):
        with use_path(path):
            got[path] = outputs_and_grads(cell, x, mask, h0, reverse)
    for a, b in zip(got["loop"], got["torch"], strict=True):
        torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-12)


def test_cells_without_torchs_layer_for_their_options_take_the_next_path() -> None:
    torch.manual_seed(0)
    x, mask = torch.randn(2, 4, 5), torch.ones(2, 4, dtype=torch.bool)
    for cell in (build_cell("gru", 5, 6, reset="before"), build_cell("gru", 5, 6, gate_norm=True),
                 build_cell("atr", 5, 6)):
        with use_path("sequence"):
            want = base.run(cell, x, mask)[0]
        with use_path("torch"):
            torch.testing.assert_close(base.run(cell, x, mask)[0], want)
    assert build_cell("gru", 5, 6, gate_norm=True).torch_layer(x, None, torch.zeros(2, 6)) is None


def test_run_takes_the_measured_path_once_per_cell_and_size(measuring: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every path the cell has is a candidate; the choice holds for later batches of the same size class."""
    seen: list[tuple[str, ...]] = []

    def fake_timings(candidates, device, reps=3, timer=None, graphed=False):
        seen.append(tuple(candidates))
        return {name: 1.0 if name != "torch" else 0.5 for name in candidates}

    monkeypatch.setattr(fastpath, "timings", fake_timings)
    monkeypatch.setattr(base, "_CHOICES", {})
    cell = build_cell("gru", 5, 6)
    x, mask = torch.randn(3, 4, 5), torch.ones(3, 4, dtype=torch.bool)
    state = torch.get_rng_state()
    base.run(cell.eval(), x, mask)
    assert torch.equal(torch.get_rng_state(), state), "measuring drew from the training's random numbers"
    cell.train()
    seen.clear()
    base.run(cell, x, mask)
    base.run(cell, torch.randn(2, 9, 5), torch.ones(2, 9, dtype=torch.bool))      # batch 2 and 3: one class
    assert seen == [("loop", "sequence", "torch")]       # training measured once (evaluation: its own choice)
    assert list(base._CHOICES.values()) == ["torch", "torch"]
    base.run(build_cell("atr", 5, 6), x, mask)
    assert seen[-1] == ("loop", "sequence")


@pytest.mark.parametrize(("sequence", "want"), [(0.97, "torch"), (0.90, "sequence")])
def test_a_gru_takes_its_own_path_only_where_it_beats_torchs_layer_by_the_margin(
        measuring: Path, monkeypatch: pytest.MonkeyPatch, sequence: float, want: str) -> None:
    monkeypatch.setattr(fastpath, "timings", lambda candidates, device, reps=3, timer=None, graphed=False: {
        "loop": 2.0, "sequence": sequence, "torch": 1.0})
    monkeypatch.setattr(base, "_CHOICES", {})
    base.run(build_cell("gru", 5, 6), torch.randn(3, 4, 5), torch.ones(3, 4, dtype=torch.bool))
    assert list(base._CHOICES.values()) == [want]


def test_the_product_route_is_measured_per_size_class(measuring: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    measured: list[tuple[str, ...]] = []

    def fake_timings(candidates, device, reps=3, timer=None, graphed=False):
        measured.append(tuple(candidates))
        return {"blas": 1.0, "onednn": 2.0}

    monkeypatch.setattr(fastpath, "timings", fake_timings)
    monkeypatch.setattr(matmul, "_ROUTES", {})
    a, b = torch.randn(64, 256, dtype=torch.float32), torch.randn(256, 500, dtype=torch.float32)
    state = torch.get_rng_state()
    torch.testing.assert_close(matmul.mm(a, b), a @ b)
    assert torch.equal(torch.get_rng_state(), state), "measuring drew from the training's random numbers"
    torch.testing.assert_close(matmul.mm(a, b[:, :480]), a @ b[:, :480])     # the same class: not measured again
    assert measured == [("blas", "onednn")] and list(matmul._ROUTES.values()) == [False]


def test_a_candidate_within_the_margin_of_the_default_leaves_the_default(measuring: Path) -> None:
    calls: list[str] = []
    timer, candidate = clock({"a": 0.0100, "b": 0.0098}, calls)
    assert fastpath.choose("close", {"a": candidate("a"), "b": candidate("b")}, "a", CPU, timer=timer) == "a"


def test_the_first_choice_written_stands_and_a_resumed_run_adopts_its_own(measuring: Path) -> None:
    """Two jobs measuring one key at once keep one answer (the first written); a checkpoint's choices
    come back with `adopt`, whatever the file says by then."""
    calls: list[str] = []
    timer, candidate = clock({"a": 0.003, "b": 0.001}, calls)
    section = fastpath.machine(CPU)
    measuring.write_text(json.dumps({section: {}}))
    original = fastpath._read

    def racing(path: Path) -> dict:      # another job writes "a" between our read and our write
        data = original(path)
        if calls:
            data.setdefault(section, {})["k"] = "a"
        return data

    fastpath._read = racing
    try:
        assert fastpath.choose("k", {"a": candidate("a"), "b": candidate("b")}, "a", CPU, timer=timer) == "a"
    finally:
        fastpath._read = original
    assert fastpath.measuring_seconds() > 0
    fastpath.forget()
    fastpath.adopt({f"{section} | k": "b"})
    assert fastpath.choose("k", {"a": candidate("a"), "b": candidate("b")}, "a", CPU, timer=timer) == "b"


def test_a_choice_measured_inside_anothers_candidate_is_counted_once(measuring: Path) -> None:
    """Measuring time is left out of timed regions (training and decoding speed): a choice made inside another's
    candidate (ATR's ways inside a cell's paths) is within the outer measurement's time, so the seconds spent
    measuring are no more than the outer choice's own wall time, not that plus the inner's again."""
    import time

    def inner(delay: float) -> Callable[[], None]:
        return lambda: time.sleep(delay)

    def outer() -> Callable[[], None]:
        def run() -> None:
            fastpath.choose("inner", {"x": inner(0.01), "y": inner(0.002)}, "x", CPU)
        return run

    before = fastpath.measuring_seconds()
    start = time.perf_counter()
    fastpath.choose("outer", {"a": outer(), "b": outer()}, "a", CPU)
    wall = time.perf_counter() - start
    spent = fastpath.measuring_seconds() - before
    assert 0.04 < spent <= wall, (spent, wall)        # the inner candidates alone slept 4 x (10 + 2) ms


def test_a_runs_choices_are_fixed_for_the_run_on_any_machine(measuring: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The first choice a run makes is kept in the run's own file, by computation alone; a later job of
    the run on a machine that measures the other way (another cache file) takes the run's choice unmeasured,
    while a job of another run there takes that machine's."""
    run_file = tmp_path / "results/run/fast_paths.json"
    monkeypatch.setenv("RNMT_FASTPATH_RUN", str(run_file))
    calls: list[str] = []
    timer, candidate = clock({"a": 0.003, "b": 0.001}, calls)
    assert fastpath.choose("cell x", {"a": candidate("a"), "b": candidate("b")}, "a", CPU, timer=timer) == "b"
    kept = json.loads(run_file.read_text())
    assert kept == {"paths": {"cell x": "b"}, "measured_on": {"cell x": fastpath.machine(CPU)}}

    fastpath.forget()                                   # another machine: its own cache, "a" faster there
    monkeypatch.setenv("RNMT_FASTPATH_CACHE", str(tmp_path / "other-machine.json"))
    calls.clear()
    timer, candidate = clock({"a": 0.001, "b": 0.003}, calls)
    assert fastpath.choose("cell x", {"a": candidate("a"), "b": candidate("b")}, "a", CPU, timer=timer) == "b"
    assert calls == []                                  # nothing measured: the run's record decides

    fastpath.forget()                                   # another run on that machine measures for itself
    monkeypatch.setenv("RNMT_FASTPATH_RUN", str(tmp_path / "results/other/fast_paths.json"))
    assert fastpath.choose("cell x", {"a": candidate("a"), "b": candidate("b")}, "a", CPU, timer=timer) == "a"
    assert json.loads(run_file.read_text())["paths"] == {"cell x": "b"}


def test_a_cells_path_follows_the_runs_file(measuring: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cell's run takes the path its run's file names, though this machine would measure another."""
    run_file = tmp_path / "fast_paths.json"
    monkeypatch.setenv("RNMT_FASTPATH_RUN", str(run_file))
    monkeypatch.setattr(base, "_CHOICES", {})
    monkeypatch.setattr(fastpath, "timings", lambda candidates, device, reps=3, timer=None, graphed=False: {
        name: 0.5 if name == "loop" else 1.0 for name in candidates})
    cell = build_cell("atr", 5, 6)
    x, mask = torch.randn(3, 4, 5), torch.ones(3, 4, dtype=torch.bool)
    base.run(cell, x, mask)
    (key, path), = json.loads(run_file.read_text())["paths"].items()
    assert path == "loop" and key.startswith("cell ")
    run_file.write_text(json.dumps({"paths": {key: "sequence"}}))      # the run was first measured elsewhere
    fastpath.forget()
    base._CHOICES.clear()                       # (forget clears the module's own lookup, patched here)
    base.run(cell, x, mask)
    assert list(base._CHOICES.values()) == ["sequence"]


def test_work_graphed_on_a_cpu_is_chosen_as_eager_work(measuring: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU has no CUDA graphs: a choice asked for graphed work there is the eager one, measured and kept once."""
    asked: list[bool] = []

    def fake_timings(candidates, device, reps=3, timer=None, graphed=False):
        asked.append(graphed)
        return {"a": 1.0, "b": 0.5}

    monkeypatch.setattr(fastpath, "timings", fake_timings)
    candidates = {"a": lambda: None, "b": lambda: None}
    assert fastpath.choose("work", candidates, "a", torch.device("cpu"), graphed=True) == "b"
    assert fastpath.choose("work", candidates, "a", torch.device("cpu")) == "b"
    assert asked == [False] and [k.split(" | ")[-1] for k in fastpath.chosen()] == ["work"]


def test_forgotten_paths_are_recorded_again() -> None:
    """A benchmark that times a model's step eagerly and then by graph replay records the paths of each."""
    cell = build_cell("atr", 5, 6)
    x, mask = torch.randn(3, 4, 5), torch.ones(3, 4, dtype=torch.bool)
    taken.forget_taken()
    base.run(cell, x, mask)
    assert list(taken.taken_paths().values()) == ["rnmt kernel"]
    taken.forget_taken()
    assert taken.taken_paths() == {}
    with use_path("loop"):
        base.run(cell, x, mask)
    assert list(taken.taken_paths().values()) == ["step loop"]
