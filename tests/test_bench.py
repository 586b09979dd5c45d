"""The benchmarks at tiny sizes: CSV columns, ratios and FLOP rates computed from the measured times,
the device and thread count recorded. No speed is asserted (timings on shared CPUs are noise)."""

import csv
import re

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from conftest import ROOT
from rnmt.bench import cells, data, decode, decoder, profile, train
from rnmt.bench.runner import run_benchmark
from rnmt.bench.timing import measure
from rnmt.cells import build_cell, run
from rnmt.cli import main
from rnmt.config import ConfigError
from rnmt.io import InputError

CPU = torch.device("cpu")
TOP_THREE = re.compile(r"[a-z/ -]+ \d+%(, [a-z/ -]+ \d+%){2}")   # Trace.top(): three kinds with shares


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_measure_warms_up_then_times_each_repetition() -> None:
    calls = []
    t = measure(lambda: calls.append(1), CPU, warmup=2, reps=3)
    assert len(calls) == 5 and len(t.seconds) == 3 and t.median == sorted(t.seconds)[1]
    with pytest.raises(ValueError, match="reps"):
        measure(lambda: None, CPU, reps=0)


def test_cell_flops_formula_matches_torch_flop_counter() -> None:
    """2 × weight entries per token is what the cell's forward pass multiplies (FlopCounterMode agrees)."""
    for name in ("atr", "gru", "lstm", "sru"):
        cell = build_cell(name, 12, 12)
        x = torch.randn(3, 4, 12)
        counter = FlopCounterMode(display=False)
        with counter:
            run(cell, x, torch.ones(3, 4, dtype=torch.bool))
        assert counter.get_total_flops() == cells.matmul_flops_per_token(cell) * 12, name
    gru = torch.nn.GRU(12, 12)
    assert cells.matmul_flops_per_token(gru) == 2 * (3 * 12 * 12 * 2)


def test_cells_rows_and_ratios_come_from_measured_times() -> None:
    rows = cells.bench(CPU, quick=True, hidden=(16,), cells=["atr", "sru"], batch=4, length=5)
    assert [r["cell"] for r in rows] == ["nn.GRU", "nn.LSTM", "atr", "sru"]
    gru = rows[0]
    for r in rows:
        assert r["tokens_per_s"] == pytest.approx(4 * 5 / r["seconds"])
        assert r["ratio_to_nn_gru"] == pytest.approx(r["tokens_per_s"] / gru["tokens_per_s"])
        assert r["fraction_of_peak"] == pytest.approx(r["gflops"] / r["peak_gflops"], rel=0.01)
        assert r["device"] == "cpu" and r["threads"] == 1 and r["peak_gflops"] > 0
    assert {r["cell"]: r["path"] for r in rows}["atr"] == "sequence"


def test_torchs_layers_are_timed_at_the_cells_precision_whatever_ran_before(monkeypatch) -> None:
    """cuDNN may take TF32 for float32 (torch's default) and rnmt's cells do not: the baselines beside the
    cells are timed without it from the first row on, not only once an rnmt cell's cuDNN path turned it off
    (on GPUs the same layer ran twice as fast with it, and the ratios to it compared precisions)."""
    flags: dict[str, bool] = {}
    timed = cells.measure_layer

    def spied(name: str, *args, **kwargs):
        flags[name] = torch.backends.cudnn.allow_tf32
        return timed(name, *args, **kwargs)

    monkeypatch.setattr(cells, "measure_layer", spied)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)     # a fresh process's default
    cells.bench(CPU, quick=True, hidden=(8,), cells=["atr"], batch=2, length=3)
    assert flags == {"nn.GRU": False, "nn.LSTM": False, "atr": False}


def test_bfloat16_rows_run_torchs_layers_in_bfloat16_and_the_cells_under_autocast(monkeypatch, tmp_path) -> None:
    """`--precision bfloat16` compares like with like: torch's GRU and LSTM with bfloat16 weights and inputs,
    rnmt's cells as training runs them (under bfloat16 autocast), every row saying so; a float32 row beside a
    bfloat16 one would compare precisions, not cells."""
    outputs: dict[str, torch.dtype] = {}
    layer = cells._layer

    def spied(name: str, *args, **kwargs):
        module, forward = layer(name, *args, **kwargs)

        def watched(x: torch.Tensor) -> torch.Tensor:
            out = forward(x)
            outputs[name] = out.dtype
            return out
        return module, watched

    monkeypatch.setattr(cells, "_layer", spied)
    rows = cells.bench(CPU, quick=True, hidden=(8,), cells=["atr"], batch=2, length=3, precision="bfloat16")
    assert [r["precision"] for r in rows] == ["bfloat16"] * 3
    assert outputs["nn.GRU"] == outputs["nn.LSTM"] == torch.bfloat16
    autocast_inside = []
    monkeypatch.setattr(cells, "run", lambda *a, **k: autocast_inside.append(torch.is_autocast_enabled("cpu"))
                        or run(*a, **k))
    cells.measure_layer("atr", 8, CPU, 2, 3, 0, 1, precision="bfloat16")
    cells.measure_layer("atr", 8, CPU, 2, 3, 0, 1)
    assert autocast_inside == [True, False]
    with pytest.raises(InputError, match="unknown precision 'float16'"):
        cells.bench(CPU, quick=True, hidden=(8,), cells=["atr"], precision="float16")
    with pytest.raises(InputError, match="has no --precision"):
        run_benchmark("train", tmp_path, quick=True, device="cpu", precision="bfloat16")


def test_decoder_rows_give_both_paths_of_each_cell_with_the_loop_as_reference() -> None:
    rows = decoder.bench(CPU, quick=True, hidden=(8,), batch=3, source=4)
    assert [(r["decoder"], r["path"]) for r in rows] == [("rnnsearch-gru", "step loop"), ("rnnsearch-gru", "fused"),
                                                        ("rnnsearch-atr", "step loop"), ("rnnsearch-atr", "fused"),
                                                        ("dtmt-1", "step loop"), ("dtmt-1", "fused")]
    assert [r["heads"] for r in rows] == [1, 1, 1, 1, 8, 8]          # DTMT's 16 heads do not divide 8
    for r in rows:
        assert r["tokens_per_s"] == pytest.approx(3 * decoder.LENGTH / r["seconds"])
        loop = next(x for x in rows if x["decoder"] == r["decoder"] and x["path"] == "step loop")
        assert r["ratio_to_loop"] == pytest.approx(r["tokens_per_s"] / loop["tokens_per_s"])
        assert r["device"] == "cpu" and r["source_length"] == 4


def test_train_rows_relative_to_rnnsearch_gru() -> None:
    cfg = train.Config(emb=8, hidden=8, vocab=30, batch=3, max_len=4)
    rows = train.bench(CPU, quick=True, systems=("RNNSearch+ATR", "LSTM 2L", "SR-NMT 1L"), cfg=cfg, root=ROOT)
    assert [r["system"] for r in rows] == ["RNNSearch+GRU", "RNNSearch+ATR", "LSTM 2L", "SR-NMT 1L"]
    assert rows[1]["paths"] == "ATR: rnmt kernel; RNNSearch decoder (ATR): step loop"      # what the row ran
    batch = train.random_batch(cfg, CPU)
    for r in rows:
        assert r["tgt_words_per_s"] == pytest.approx(batch.tgt_tokens / r["step_seconds"])
        assert r["ratio_to_rnnsearch_gru"] == pytest.approx(r["tgt_words_per_s"] / rows[0]["tgt_words_per_s"])
        assert r["ratio_to_lstm_2l"] == pytest.approx(r["tgt_words_per_s"] / rows[2]["tgt_words_per_s"])
        assert r["gflops"] > 0 and r["device"] == "cpu" and r["threads"] == 1
        assert isinstance(r["page_faults"], int) and r["page_faults"] >= 0


def test_train_profile_counts_kernels_per_decoder_step_and_where_the_step_went() -> None:
    cfg = train.Config(emb=8, hidden=8, vocab=30, batch=3, max_len=4)
    rows = train.bench(CPU, quick=True, systems=("RNNSearch+ATR",), cfg=cfg, root=ROOT, profile=True)
    for r in rows:
        assert r["kernels_per_step_forward"] > 0 and r["kernels_per_step_backward"] > 0
        assert r["kernels_per_decoder_step"] == pytest.approx(r["kernels_per_step_forward"]
                                                              + r["kernels_per_step_backward"], abs=0.1)
        assert r["kernels_per_training_step"] > r["kernels_per_decoder_step"] and r["gpu_busy_fraction"] == ""
        assert TOP_THREE.fullmatch(r["time_by_kind"])


def test_train_rows_are_the_tables_systems_from_any_working_directory(tmp_path, monkeypatch) -> None:
    """Run outside the checkout, `rnmt bench train` reads the systems of the checkout rnmt runs from."""
    monkeypatch.chdir(tmp_path)
    here = train.rows()
    assert [(r.table, r.system) for r in here] == list(train.SYSTEMS)
    assert here == train.rows(ROOT)
    with pytest.raises(ConfigError, match="has no workflow/experiments; run it from the checkout's root"):
        train.rows(tmp_path)


def test_train_row_failing_in_its_process_names_the_row() -> None:
    """Each row trains in a process of its own: an error there, or the process dying, is raised in the
    parent with the row's name, not left as a hang or a bare EOFError."""
    cfg = train.Config(emb=8, hidden=8, vocab=30, batch=3, max_len=4)
    broken = train.TraineeProcess(train.Row("t", "Broken row", "no-such-arch", {}, cfg), cfg, CPU)
    try:
        with pytest.raises(RuntimeError, match="Broken row failed in its process(.|\n)*no-such-arch"):
            broken.ready()
    finally:
        broken.close()
    worker = train.TraineeProcess(train.rows(ROOT)[0], cfg, CPU)
    try:
        worker.ready()
        assert worker.call("step") is None and worker.call("result")["reps"] == 1
        worker.process.kill()
        worker.process.join()
        with pytest.raises(RuntimeError, match="process of RNNSearch\\+GRU died"):
            worker.call("step")
    finally:
        worker.close()


def test_decode_rows_compare_batched_with_one_at_a_time() -> None:
    rows = decode.bench(CPU, quick=True, cfg=decode.Config(emb=8, hidden=8, vocab=30, sentences=3, max_len=4))
    assert len(rows) == 8                                      # 2 models × 2 beams × 2 modes
    by = {(r["model"], r["beam"], r["mode"]): r for r in rows}
    for (model, beam, _mode), r in by.items():
        other = by[(model, beam, "one at a time")]
        assert r["batched_speedup"] == pytest.approx(by[(model, beam, "batched")]["sentences_per_s"]
                                                     / other["sentences_per_s"])
        assert r["seconds_per_sentence"] == pytest.approx(r["seconds"] / 3)
        assert r["words"] == other["words"]                  # same hypotheses either way
        assert r["batched_gflop"] > 0
        assert r["batched_floor_seconds"] == pytest.approx(r["batched_gflop"] / r["peak_gflops"], rel=0.01)
        assert r["speedup_bound"] == pytest.approx(other["seconds"] / r["batched_floor_seconds"])


def test_a_decode_bench_cut_short_leaves_the_csv_of_its_finished_rows(tmp_path, monkeypatch) -> None:
    """`rnmt bench decode` writes its CSV after each (model, beam), the issue's beam 10 of the single model
    first, so a GPU lease's call that its time limit ends brings back what finished: here the run stops in
    its third (model, beam), and the CSV holds the first two, whole (their floors and bounds computed)."""
    monkeypatch.setattr(decode, "QUICK", decode.Config(emb=8, hidden=8, vocab=30, sentences=3, max_len=4))
    counted = decode.batched_flops
    calls = []

    def flops_then_stop(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt("the call's time limit")
        return counted(*args, **kwargs)

    monkeypatch.setattr(decode, "batched_flops", flops_then_stop)
    with pytest.raises(KeyboardInterrupt):
        run_benchmark("decode", tmp_path, quick=True, device="cpu")
    with open(tmp_path / "decode.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["model"], r["beam"], r["mode"]) for r in rows] == [
        ("RNNSearch+ATR", "10", "batched"), ("RNNSearch+ATR", "10", "one at a time"),
        ("RNNSearch+ATR", "1", "batched"), ("RNNSearch+ATR", "1", "one at a time")]
    assert all(float(r["speedup_bound"]) > 0 and r["device"] for r in rows)


@pytest.mark.parametrize(("name", "expected"), [
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32", "matmul"),
    ("nvjet_tst_64x8_64x16_1x1_v_bz_TNT", "matmul"),
    ("ampere_sgemm_128x64_nn", "matmul"),
    ("void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(at::cuda::detail::TensorInfo)", "top-k/sort"),
    ("void at_cuda_detail::cub::DeviceRadixSortOnesweepKernel<Policy, false, float, long>", "top-k/sort"),
    ("void (anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, LogSoftMaxForwardEpilogue>",
     "softmax"),
    ("atr_step_forward", "triton"),
    ("attention_step_backward", "triton"),
    ("Memcpy DtoH (Device -> Pinned)", "copy/fill"),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(...)>", "copy/fill"),
    ("void at::native::index_elementwise_kernel<128, 4>(long, ...)", "gather/index"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, sum_functor<float> > >", "reduce"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::tanh_kernel_cuda(...)>", "element-wise"),
    ("aten::addmm", "matmul"), ("aten::topk", "top-k/sort"), ("aten::_log_softmax", "softmax"),
    ("aten::index_select", "gather/index"), ("aten::tanh", "element-wise"), ("aten::t", "views/allocation"),
    ("aten::empty", "views/allocation"), ("aten::_local_scalar_dense", "other"),
])
def test_kernels_and_operators_are_put_in_the_kind_of_work_they_do(name: str, expected: str) -> None:
    """A profile's "where the time goes" names cuBLAS's products, torch's top-k and rnmt's Triton kernels
    by what they do, from the names the profiler gives them (a misfiled kind would point a reader at the
    wrong work)."""
    assert profile.kind(name) == expected


def test_a_trace_counts_leaf_operators_and_their_time_by_kind() -> None:
    a, b = torch.randn(200, 200), torch.randn(200, 200)
    t = profile.trace(lambda: torch.tanh(a @ b), CPU)
    kinds = dict(t.by_kind)
    assert set(kinds) >= {"matmul", "element-wise"} and t.busy_seconds == 0.0     # no device on a CPU
    assert t.launches >= 2 and all(s >= 0 for s in kinds.values())
    assert [k for k, _ in t.by_kind] == sorted(kinds, key=lambda k: -kinds[k])     # largest first
    shares = [float(part.rsplit(" ", 1)[1].rstrip("%")) for part in t.top(2).split(", ")]
    assert len(shares) == 2 and shares[0] >= shares[1] and sum(shares) <= 100.5


def test_a_trace_names_the_kernels_that_took_the_most_time_with_their_launches() -> None:
    """What a replayed training step reports as its heaviest kernels: each name once, its time summed over its
    launches and the launch count, most time first; on a CPU the operators' own time."""
    a, b = torch.randn(300, 300), torch.randn(300, 300)

    def work() -> None:
        for _ in range(3):
            torch.tanh(a @ b)

    t = profile.trace(work, CPU)
    names = [name for name, _, _ in t.by_name]
    assert len(names) == len(set(names)) and {"aten::tanh", "aten::mm"} <= set(names)
    counts = {name: n for name, _, n in t.by_name}
    assert counts["aten::tanh"] == 3 and counts["aten::mm"] == 3
    assert [s for _, s, _ in t.by_name] == sorted((s for _, s, _ in t.by_name), reverse=True)
    assert sum(s for _, s, _ in t.by_name) == pytest.approx(sum(s for _, s in t.by_kind))
    listed = t.heaviest(2).split("; ")
    assert len(listed) == 2 and listed[0].startswith(f"{names[0]} ") and listed[0].endswith(f" x {counts[names[0]]}")
    long = profile.Trace(1, 0.0, by_name=(("void " + "x" * 200, 2.5e-5, 4),))
    assert long.heaviest() == "void " + "x" * (profile.NAME_CHARS - 5) + " 25 us x 4"


def test_step_profile_counts_what_one_more_target_word_adds() -> None:
    """The per-decoder-step counts are the difference between two target lengths, split into the forward
    pass and the rest of the step: here each word adds one tanh to the forward and one sigmoid after it."""
    x = torch.randn(8, 8)

    def forward(T: int) -> None:
        for _ in range(T):
            torch.tanh(x)

    def step(T: int) -> None:
        forward(T)
        for _ in range(T):
            torch.sigmoid(x)

    got = profile.step_profile(forward, step, (3, 7), CPU)
    assert got.forward_per_step == profile.trace(lambda: torch.tanh(x), CPU).launches
    assert got.backward_per_step == profile.trace(lambda: torch.sigmoid(x), CPU).launches
    assert got.step_launches == profile.trace(lambda: step(7), CPU).launches
    assert "element-wise" in got.time_by_kind
    # what a word adds, by the operator that launched it: one tanh and one sigmoid
    assert got.by_op == (("aten::sigmoid", 1.0), ("aten::tanh", 1.0))
    assert got.row(1.0)["kernels_per_decoder_step_by_op"] == "aten::sigmoid 1, aten::tanh 1"
    with pytest.raises(ValueError, match="two increasing target lengths"):
        profile.step_profile(forward, step, (7, 3), CPU)


def test_decode_profile_gives_each_batched_row_its_launches_and_where_the_time_went() -> None:
    cfg = decode.Config(emb=8, hidden=8, vocab=30, sentences=3, max_len=4)
    rows = decode.bench(CPU, quick=True, cfg=cfg, profile=True)
    for r in rows:
        if r["mode"] == "batched":
            assert r["kernels_per_sentence"] > 0 and r["gpu_busy_fraction"] == ""     # a CPU has no busy GPU
            assert TOP_THREE.fullmatch(r["time_by_kind"])   # the top three kinds
        else:
            assert "time_by_kind" not in r
    with pytest.raises(InputError, match="has no --profile"):
        run_benchmark("data", quick=True, profile=True)


def test_data_rows_per_worker_count() -> None:
    rows = data.bench(CPU, quick=True, lines=300)
    assert [r["workers"] for r in rows] == [1, 2]
    assert rows[1]["ratio_to_1_worker"] == pytest.approx(rows[1]["lines_per_s"] / rows[0]["lines_per_s"])
    assert all(r["lines"] == 300 for r in rows)


def test_cli_writes_the_csv_and_prints_the_table(tmp_path, capsys) -> None:
    assert main(["bench", "data", "--quick", "--threads", "1", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "data on cpu" in printed and "1 threads" in printed and "lines_per_s" in printed
    with open(tmp_path / "data.csv", encoding="utf-8") as f:
        got = list(csv.DictReader(f))
    assert [r["workers"] for r in got] == ["1", "2"]
    assert {"lines_per_s", "ratio_to_1_worker", "device", "threads", "peak_gflops", "load_1min_start",
            "load_1min_end"} <= set(got[0])
    assert got[0]["device"] == "cpu" and got[0]["threads"] == "1"


def test_unknown_benchmark_is_a_clear_error() -> None:
    with pytest.raises(InputError, match="valid: cells, decoder, train, decode, data"):
        run_benchmark("speed")
