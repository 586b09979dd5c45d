"""The CUDA paths on a real GPU (`pytest -m cuda`; skipped, with the reason, where torch sees no GPU).

- Every cell's paths on CUDA, for every case its test file declares (tests/test_cell_<cell>.py): the step
  loop, the whole-sequence path (Triton kernels for ATR, GRU, SRU and SR-NMT; the chained loop of step kernels
  on Triton row kernels for the L-GRU, LAU, T-GRU and the GRU with gate norm or the reset gate inside the
  product) and cuDNN for GRU and LSTM
  agree in float32 to 1e-4 relative, 1e-5 absolute, outputs, final states and every gradient, with
  padding, reversal and an initial state.
- Under bfloat16 autocast (training's default on a GPU) each path stays within 2% (norm of the difference
  over the norm) of the float32 step loop, gradients included.
- The fused decoders (models/decoder_sequence.py: RNNSearch's, GNMT's first layer, DTMT's multi-head one on
  its cells' row kernels and, with heads of 16 or more, the Triton attention) equal their step loops in
  float32 (logits and every gradient, 1e-4 relative), and under bfloat16 autocast are no further from
  float32 than the loops.
- Every architecture trains 100 steps on CUDA under bfloat16 autocast with a falling loss.
- Beam search and ensembles on CUDA give the CPU's hypotheses and scores on a tiny model, with the steps
  replayed as CUDA graphs (the default) and eagerly; on CUDA its cells step through their step kernels
  (cells/base.py `fast_step`) and its bookkeeping after the top-k is one kernel (decode/triton/select.py), on
  the CPU both are torch's operations.
- Every architecture's search steps on CUDA (the cells' step kernels and the attention kernels) equal torch's
  operations' steps on the same card (RNMT_TRITON=0) in float32 to 1e-4 relative, 1e-5 absolute, those whose
  cells have step kernels running Triton kernels; the search's bookkeeping kernel gives torch's operations' state,
  rows and host part exactly on the card (a done sentence's rows aside).
- Decode setting tf32: the products take other numbers than float32's, near them, and a search replayed under
  it captures graphs of its own and gives the eager TF32 search's results.
- Every recurrent architecture's search step captures as a CUDA graph (rnmt.decode.graphs), and the replayed search
  gives the eager steps' hypotheses and scores on the same padded inputs bit for bit, and the plain search's
  hypotheses.
- A training step replayed as a CUDA graph (rnmt.train.graphs) gives the eager step's weights bit for bit on
  the same padded batch; every architecture captures and trains by replay with a falling loss.
- `rnmt train` on CUDA, eager and with CUDA graphs, stopped with SIGTERM and rerun, ends with the uninterrupted
  run's weights, and the graphed run replayed its graphs; a run that restarts on a plateau counts every
  replayed step.
- ATR's persistent kernels (RNMT_ATR_PERSISTENT=1) equal its per-step kernels at batch 80, hidden 1000; unforced,
  ATR times the two ways (eagerly and as replays) and takes the faster.
- Narrow products (rnmt.machine.matmul `narrow`) multiply bfloat16 operands into float32 on cuBLAS, and under
  autocast every product of the fused decoder, forward and backward, takes bfloat16 operands.
- The fast paths inside a captured training step are chosen by timing graph replays, keyed apart from eager
  work; an uncapturable candidate is timed eagerly, and random draws work after its failed capture.
- An RNNSearch+LSTM trains by replay across validations, and no captured step holds cuDNN's LSTM; a GRU's and an
  LSTM's cuDNN path run eagerly leaves the cell's weights where a captured update writes them.
- `rnmt bench decode --profile --graphs` names where the device time went, and the card's product kernels
  are counted as products.

With RNMT_CUDA_REPORT=<file>, the measured errors are written there as JSON lines (the GPU script keeps them).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from cellcases import all_cases
from conftest import SESSION_ENV
from rnmt.cells import build_cell, run
from rnmt.cells import triton as triton_cells
from rnmt.cells.base import graph_safe, use_path
from rnmt.data.batching import Batch, ParallelData, make_batch, pad
from rnmt.decode import graphs as decode_graphs
from rnmt.decode.beam import beam_search
from rnmt.decode.ensemble import Ensemble
from rnmt.machine import fastpath, hardware, matmul
from rnmt.models import build_model
from rnmt.train import graphs
from rnmt.train.loss import token_loss
from test_archs import ARCHS, AUTOCAST, SRC, TGT, source
from test_decoder_sequence import MODELS as DECODERS
from test_decoder_sequence import logits_and_grads, make
from tinytrain import MODEL, assert_same_weights

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU (torch.cuda.is_available() "
                                 "is False): the CUDA tests run on a machine with one, `pytest -m cuda`")]
CUDA = torch.device("cuda")
ROOT = Path(__file__).resolve().parents[1]

# every case of every cell (its options), from the cells' own test files (tests/test_cell_<cell>.py), and
# those whose whole-sequence path on CUDA is a Triton kernel
CELLS = {name: (case.kind, case.options) for name, case in all_cases().items()}
TRITON = {name for name, case in all_cases().items() if case.triton}
FLOAT32 = {"rtol": 1e-4, "atol": 1e-5}
BF16_RELATIVE = 0.02


def report(**fields: object) -> None:
    """Append one measurement to RNMT_CUDA_REPORT, where set."""
    path = os.environ.get("RNMT_CUDA_REPORT")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(fields) + "\n")


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().float(), b.detach().float()
    return float((a - b).norm() / b.norm().clamp(min=1e-12))


def cell_case(name: str, hidden: int = 48, batch: int = 5, length: int = 11):
    torch.manual_seed(0)
    kind, options = CELLS[name]
    width = 0 if 0 in all_cases()[name].path_inputs else 32      # T-GRU reads no input (DTMT's transition)
    cell = build_cell(kind, width, hidden, **options).to(CUDA)
    x = torch.randn(batch, length, width, device=CUDA, requires_grad=True)
    h0 = torch.randn(batch, cell.state_size, device=CUDA, requires_grad=True)
    mask = torch.ones(batch, length, dtype=torch.bool, device=CUDA)
    mask[1, 6:] = False
    mask[3, 2:] = False
    return cell, x, h0, mask


def outputs_and_grads(cell, x, mask, h0, reverse: bool) -> list[torch.Tensor]:
    out, final = run(cell, x, mask, h0, reverse=reverse)
    loss = out.float().sin().sum() + (final.float() * torch.linspace(-1, 1, final.size(1), device=CUDA)).sum()
    grads = torch.autograd.grad(loss, ([x] if x.size(-1) else []) + [h0, *cell.parameters()])
    return [out, final, *grads]


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("name", sorted(CELLS))
def test_cell_paths_agree_in_float32(name: str, reverse: bool) -> None:
    cell, x, h0, mask = cell_case(name)
    with use_path("loop"):
        reference = outputs_and_grads(cell, x, mask, h0, reverse)
    for path in ("sequence", "torch"):
        with use_path(path):
            got = outputs_and_grads(cell, x, mask, h0, reverse)
        if path == "sequence" and name in TRITON:
            with use_path(path):
                out, _ = run(cell, x, mask, h0, reverse=reverse)
            assert triton_cells.uses_triton(out), f"{name}: the whole-sequence path on CUDA is not the Triton kernel"
        worst = max(relative_error(g, r) for g, r in zip(got, reference, strict=True))
        report(test="float32", cell=name, path=path, reverse=reverse, max_relative_error=worst)
        for k, (g, r) in enumerate(zip(got, reference, strict=True)):
            torch.testing.assert_close(g, r, **FLOAT32, msg=lambda m, k=k, p=path: f"{name} {p}, tensor {k}: {m}")


@pytest.mark.parametrize("name", sorted(CELLS))
def test_cell_paths_under_bfloat16_autocast_stay_near_float32(name: str) -> None:
    cell, x, h0, mask = cell_case(name)
    with use_path("loop"):
        reference = outputs_and_grads(cell, x, mask, h0, False)
    for path in ("loop", "sequence", "torch"):
        with use_path(path), torch.autocast("cuda", torch.bfloat16):
            got = outputs_and_grads(cell, x, mask, h0, False)
        errors = [relative_error(g, r) for g, r in zip(got, reference, strict=True)]
        report(test="bf16", cell=name, path=path, max_relative_error=max(errors))
        assert max(errors) <= BF16_RELATIVE, f"{name} {path}: relative errors {errors}"


def architecture(key: str) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    """The tiny model of `key` (tests/test_archs.py) on CUDA, seeded, and its source batch and mask there."""
    arch, settings = AUTOCAST[key]
    torch.manual_seed(0)
    model = build_model(arch, 20, 20, **settings).to(CUDA)
    src, mask = source(key) if key in ARCHS else pad(SRC, eos=True)
    return model, src.to(CUDA), mask.to(CUDA)


@pytest.mark.parametrize("key", sorted(AUTOCAST))
def test_every_architecture_trains_on_cuda_with_a_falling_loss(key: str) -> None:
    model, src, mask = architecture(key)
    model.train()
    tgt_in, tgt_out = pad(TGT, bos=True)[0].to(CUDA), pad(TGT, eos=True)[0].to(CUDA)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(100):
        with torch.autocast("cuda", torch.bfloat16):
            logits = model(src, mask, tgt_in)
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), tgt_out.flatten(), ignore_index=0)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    report(test="train100", arch=key, first_loss=losses[0], last_loss=losses[-1])
    assert losses[-1] < 0.3 * losses[0], losses[::10]


def tiny_models(n: int) -> list[torch.nn.Module]:
    out = []
    for seed in range(n):
        torch.manual_seed(seed)
        out.append(build_model("rnnsearch", 20, 20, emb=16, hidden=24, cell="atr", dropout=0.0).eval())
    return out


@pytest.mark.parametrize("cuda_graphs", [True, False], ids=["graphs", "eager"])
@pytest.mark.parametrize("members", [1, 2], ids=["one model", "ensemble of 2"])
def test_beam_search_on_cuda_equals_the_cpu(members: int, cuda_graphs: bool) -> None:
    models = tiny_models(members)
    src, mask = pad(SRC, eos=True)
    limits = (mask.sum(1) * 2 + 5).long()
    found = {}
    for device in ("cpu", "cuda"):
        ms = [m.to(device) for m in models]
        model = ms[0] if members == 1 else Ensemble(ms).eval()
        with torch.no_grad():
            found[device] = beam_search(model, src.to(device), mask.to(device), 5, limits.to(device),
                                        cuda_graphs=cuda_graphs)
    assert [h for h, _ in found["cuda"]] == [h for h, _ in found["cpu"]]
    for (_, a), (_, b) in zip(found["cuda"], found["cpu"], strict=True):
        assert abs(float(a) - float(b)) < 1e-4


@pytest.mark.parametrize("key", sorted(AUTOCAST))
def test_every_architecture_searches_by_graph_replay(key: str) -> None:
    model, src, mask = architecture(key)
    model.eval()
    limits = (mask.sum(1) * 2 + 3).long()
    replayed = decode_graphs.GraphedDecoder(model, CUDA)
    eager = decode_graphs.GraphedDecoder(model, CUDA, capture=False)
    found = {name: beam_search(model, src, mask, 3, limits, cuda_graphs=d)
             for name, d in (("replayed", replayed), ("eager", eager), ("plain", False))}
    summary = replayed.summary()
    report(test="decode-graphs", arch=key, **{k: v for k, v in summary.items() if k != "failed"})
    if key == "transformer":        # its state grows at every step: no graph
        assert summary["off"] and summary["graphs"] == 0, summary
    else:
        assert summary["graphs"] >= 1 and summary["replays"] >= 1 and not summary["failed"], summary
        # a layout steps eagerly once, then by replay: the model's step, the search's and the reorder in one
        assert summary["eager_steps"] == len(replayed.warmed) and summary["graphs"] <= len(replayed.warmed), summary
    assert found["replayed"] == found["eager"]
    assert [h for h, _ in found["replayed"]] == [h for h, _ in found["plain"]]


def rnmts_triton_kernels() -> set[str]:
    """The names of the Triton kernels of rnmt's imported modules (the profiler names a kernel so)."""
    from triton.runtime.jit import JITFunction

    return {name for module, m in list(sys.modules.items()) if module.startswith("rnmt.") and m is not None
            for name, f in vars(m).items() if isinstance(f, JITFunction)}


def searched_steps(model: torch.nn.Module, src: torch.Tensor,
                   mask: torch.Tensor) -> tuple[list[torch.Tensor], list[str]]:
    """The log-probabilities of 4 search steps along fixed target words (start, then step) without
    gradients, and the names of rnmt's Triton kernels the steps launched (from torch's profiler)."""
    prev = pad(TGT, bos=True)[0].to(CUDA)
    logps = []
    with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        state = model.start(src, mask)
        for t in range(4):
            logp, state = model.step(prev[:, min(t, prev.size(1) - 1)], state)
            logps.append(logp)
        torch.cuda.synchronize()
    kernels = {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}
    ours = rnmts_triton_kernels()          # a name with a suffix of its specialisation counts too
    return logps, sorted(k for k in kernels if any(k == n or k.startswith(f"{n}_") for n in ours))


@pytest.mark.parametrize("key", sorted(AUTOCAST))
def test_search_steps_on_cuda_equal_torchs_steps_on_the_card(key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A search step on CUDA runs the cells' step kernels (cells/base.py `fast_step`) and the attention
    kernels (models/attention.py), where the CPU runs torch's operations: on the card, the steps with the
    kernels equal those with them off (RNMT_TRITON=0, read at every call), and those of tests/test_archs.py
    (whose cells have step kernels; SRU's and SR-NMT's steps are elementwise, torch's operations) launched
    Triton kernels (beam search's tests compare whole searches, which near ties may part)."""
    model, src, mask = architecture(key)
    model.eval()
    kernel_logps, launched = searched_steps(model, src, mask)
    monkeypatch.setenv("RNMT_TRITON", "0")
    torch_logps, off = searched_steps(model, src, mask)
    errors = [relative_error(a, b) for a, b in zip(kernel_logps, torch_logps, strict=True)]
    report(test="search-steps", arch=key, max_relative_error=max(errors), kernels=launched)
    assert not off, off
    if key in ARCHS:
        assert launched, f"{key}: no Triton kernel in its search steps"
    for a, b in zip(kernel_logps, torch_logps, strict=True):
        torch.testing.assert_close(a, b, **FLOAT32)


def test_the_search_bookkeeping_kernel_gives_torchs_state_on_the_card(monkeypatch: pytest.MonkeyPatch) -> None:
    """decode/select.py's step after the top-k as one Triton kernel on CUDA equals torch's operations on the
    same card (RNMT_TRITON=0), exactly, over steps where hypotheses end, sentences reach their limit, become
    done or were done, at beams 1, 4 and 10; only a done sentence's rows, whose candidates are all -inf, may
    hold other ones."""
    from rnmt.data.vocab import EOS_ID
    from rnmt.decode import select as search

    def state(A: int, W: int, g: torch.Generator) -> dict[str, torch.Tensor]:
        st = search.new_state(A, W, 20, CUDA)
        st["scores"].copy_(-torch.rand(A, W, generator=g) * 5)
        st["scores"][0, 1:] = float("-inf")                          # a first step: one live hypothesis
        st["limit"].copy_(torch.randint(3, 8, (A,), generator=g))
        st["n_finished"].copy_(torch.randint(0, W + 1, (A,), generator=g))
        st["best_finished"].copy_(-torch.rand(A, generator=g, dtype=torch.float64) * 3)
        st["done"].copy_(torch.rand(A, generator=g) < 0.2)
        st["scores"][st["done"]] = float("-inf")
        st["length"].fill_(int(torch.randint(3, 8, (1,), generator=g)))
        st["denom"].fill_(float(st["length"]) ** 0.6)
        return st

    for seed in range(12):
        A, W, V = 6, (1, 4, 10)[seed % 3], 500
        g = torch.Generator().manual_seed(seed)
        logp = torch.log_softmax(torch.randn(A * W, V, generator=g) * 3, -1)
        logp[:, EOS_ID] += 2.0 * (seed % 4)                          # fewer or more hypotheses end
        outs = []
        for kernels in (True, False):
            monkeypatch.setenv("RNMT_TRITON", "1" if kernels else "0")
            st = state(A, W, torch.Generator().manual_seed(100 + seed))
            outs.append((*search.select(logp.to(CUDA), st, W), st))
        (k_flat, k_token, k_host, k_st), (flat, token, host, st) = outs
        before = state(A, W, torch.Generator().manual_seed(100 + seed))["done"]
        rows = (~before).repeat_interleave(W)
        AW = A * W
        kept = torch.cat([torch.ones(3 * AW + 3 * A, dtype=torch.bool, device=CUDA), rows, rows])
        assert torch.equal(k_flat[rows], flat[rows]) and torch.equal(k_token[rows], token[rows]), seed
        assert torch.equal(k_host[kept], host[kept]), seed
        for key in st:
            assert torch.equal(k_st[key], st[key]), (seed, key)
    report(test="search-select", steps=12)


def test_a_tf32_search_takes_other_products_near_float32s_in_graphs_of_its_own() -> None:
    """Decode setting tf32: under it the model's products are TF32's (other numbers than float32's, within
    TF32's rounding); a search replayed under it captures graphs of its own rather than replaying float32's,
    and gives the eager TF32 search's hypotheses and scores."""
    torch.manual_seed(0)
    model = build_model("rnnsearch", 2000, 2000, emb=256, hidden=256, cell="atr", dropout=0.0).to(CUDA).eval()
    g = torch.Generator().manual_seed(1)
    src, mask = pad([torch.randint(4, 2000, (n,), generator=g).tolist() for n in (9, 14, 6, 11)], eos=True)
    src, mask = src.to(CUDA), mask.to(CUDA)
    with torch.no_grad():
        float32 = model(src, mask, src).float()
        with hardware.tf32_products(CUDA, True) as on:
            tf32 = model(src, mask, src).float()
    error = float((tf32 - float32).norm() / float32.norm())
    report(test="tf32-logits", relative_error=error)
    assert on and 0 < error < 1e-2, error
    limits = (mask.sum(1) * 2 + 3).long()
    replayed = decode_graphs.GraphedDecoder(model, CUDA)
    plain = beam_search(model, src, mask, 4, limits, cuda_graphs=replayed)
    captured = replayed.summary()["graphs"]
    with hardware.tf32_products(CUDA, True):
        found = beam_search(model, src, mask, 4, limits, cuda_graphs=replayed)
        eager = beam_search(model, src, mask, 4, limits,
                            cuda_graphs=decode_graphs.GraphedDecoder(model, CUDA, capture=False))
    summary = replayed.summary()
    report(test="tf32-search", float32_graphs=captured, **{k: v for k, v in summary.items() if k != "failed"},
           same_hypotheses=sum(a == b for (a, _), (b, _) in zip(found, plain, strict=True)))
    assert captured >= 1 and summary["graphs"] > captured and not summary["failed"], summary
    assert found == eager
    for (a, score), (b, score32) in zip(found, plain, strict=True):
        if a == b:
            assert abs(float(score) - float(score32)) < 1e-2


DATA = ParallelData(src=[[5, 6, 7, 8, 9], [10, 11], [12, 13, 5], [7, 8, 9, 10, 11, 12, 13, 5, 6]],
                    tgt=[[7, 6, 5], [11, 10, 9, 8, 7, 6], [6], [9, 8, 7]], src_words=[5, 2, 3, 9],
                    tgt_words=[3, 6, 1, 3])
GRAPHED = ["rnnsearch-gru", "rnnsearch-atr", "rnnsearch-atr-ca", "rnnsearch-lstm", "srnmt", "stacked-srnmt",
           "dtmt1-lgru", "shallow-rnmt", "transformer"]


def graphed_pair(key: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    arch, settings = AUTOCAST[key]
    out = []
    for _ in range(2):
        torch.manual_seed(0)
        out.append(build_model(arch, 20, 20, **{**settings, "dropout": 0.0}).to(CUDA).train())
    return out[0], out[1]


@pytest.mark.parametrize("key", GRAPHED)
def test_graph_replay_equals_the_eager_step_bit_for_bit(key: str) -> None:
    graphed, eager = graphed_pair(key)
    batch = make_batch(DATA, [0, 1, 2, 3])
    opt_g = graphs.graph_optimizer(list(graphed.parameters()), 0.01, (0.9, 0.999), 1e-8, CUDA)
    steps = graphs.GraphedSteps(graphed, opt_g, 1.0, 0.1, True, CUDA, rows=6)
    opt_e = graphs.graph_optimizer(list(eager.parameters()), 0.01, (0.9, 0.999), 1e-8, CUDA)
    opt_e.found_inf = torch.zeros((), device=CUDA)
    padded = graphs.pad_to(batch, graphs.bucket(batch, 6)).to(CUDA)
    for _ in range(3):
        replayed = steps.step(batch, batch.tgt_tokens)
        assert replayed is not None, steps.failed
        opt_e.zero_grad(set_to_none=False)
        with graph_safe(), torch.autocast("cuda", torch.bfloat16):
            logits = eager(padded.src, padded.src_mask, padded.tgt_in)
        loss = token_loss(logits, padded.tgt_out, 0.1) * (1.0 / batch.tgt_tokens)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(eager.parameters()), 1.0)
        opt_e.step()
        assert torch.equal(replayed, loss)
    for (name, a), b in zip(graphed.named_parameters(), eager.parameters(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("key", sorted(AUTOCAST))
def test_every_architecture_captures_and_trains_by_replay(key: str) -> None:
    arch, settings = AUTOCAST[key]
    torch.manual_seed(0)
    model = build_model(arch, 20, 20, **{**settings, "dropout": 0.1}).to(CUDA).train()
    opt = graphs.graph_optimizer(list(model.parameters()), 0.01, (0.9, 0.999), 1e-8, CUDA)
    steps = graphs.GraphedSteps(model, opt, 1.0, 0.0, True, CUDA, rows=4)
    src, mask = source(key) if key in ARCHS else pad(SRC, eos=True)
    tgt_in, tgt_out = pad(TGT, bos=True)[0], pad(TGT, eos=True)[0]
    batch = Batch(src, mask, tgt_in, tgt_out, int((tgt_out != 0).sum()), 0, 0)
    losses = []
    for _ in range(100):
        replayed = steps.step(batch, batch.tgt_tokens)
        assert replayed is not None, steps.failed
        losses.append(replayed.item())
    report(test="graph100", arch=key, first_loss=losses[0], last_loss=losses[-1])
    assert steps.summary()["graphs"] == 1 and steps.replays == 100
    assert losses[-1] < 0.3 * losses[0], losses[::10]


def train_command(corpus: dict[str, Path], model: dict, settings: dict, out: Path) -> list[str]:
    """`rnmt train` of `model` with `settings` on the tiny corpus, into `out`."""
    c = corpus
    return [sys.executable, "-m", "rnmt", "train", "--model", json.dumps(model), "--settings", json.dumps(settings),
            "--train-src", str(c["train_src"]), "--train-tgt", str(c["train_tgt"]), "--dev-src", str(c["dev_src"]),
            "--dev-tgt", str(c["dev_tgt"]), "--src-vocab", str(c["src_vocab"]), "--tgt-vocab", str(c["tgt_vocab"]),
            "--out-dir", str(out)]


def train_env() -> dict[str, str]:
    """The environment a `train_command` runs in: the session's, with this checkout's src/ first."""
    return {**os.environ, **SESSION_ENV,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}


@pytest.mark.parametrize("cuda_graphs", [False, True], ids=["eager", "graphs"])
def test_sigterm_and_rerun_on_cuda_end_with_the_uninterrupted_weights(corpus: dict[str, Path], tmp_path: Path,
                                                                      cuda_graphs: bool) -> None:
    settings = {"batch_size": 8, "lr": 0.003, "valid_every": 50, "valid_bleu": False, "threads": 1,
                "checkpoint_every": 0, "log_every": 1, "max_steps": 300, "device": "cuda",
                "cuda_graphs": cuda_graphs}

    def cmd(out: Path) -> list[str]:
        return train_command(corpus, MODEL, settings, out)

    env = train_env()
    whole = subprocess.run(cmd(tmp_path / "whole"), capture_output=True, text=True, env=env, timeout=300)
    assert whole.returncode == 0, whole.stderr[-2000:]
    stopped = tmp_path / "stopped"
    proc = subprocess.Popen(cmd(stopped), stderr=subprocess.PIPE, text=True, env=env)
    log = stopped / "train.jsonl"
    while proc.poll() is None and not (log.is_file() and sum(1 for _ in log.open()) >= 15):
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, err[-2000:]
    again = subprocess.run(cmd(stopped), capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resumed from" in again.stderr
    assert_same_weights(tmp_path / "whole" / "model.pt", stopped / "model.pt")
    assert_same_weights(tmp_path / "whole" / "last.pt", stopped / "last.pt")
    metrics = json.loads((tmp_path / "whole" / "train.json").read_text())
    record = metrics["cuda_graphs"]
    report(test="trainer-graphs", cuda_graphs=cuda_graphs, record=record)
    if cuda_graphs:                      # every step was a replay
        assert record["graphs"] >= 1 and record["replays"] == metrics["steps"] and not record["failed"], record


def test_a_run_that_restarts_on_a_plateau_counts_every_replayed_step(corpus: dict[str, Path],
                                                                     tmp_path: Path) -> None:
    """train.json's `cuda_graphs` counts the whole run: a restart from the best checkpoint (a fresh optimizer,
    its graphs captured anew) does not start the count again, so every step still reads as replayed."""
    settings = {"batch_size": 8, "lr": 1e-12, "valid_every": 10, "valid_bleu": False, "select_by": "loss",
                "patience": 1, "plateau_retrains": 1, "threads": 1, "checkpoint_every": 0, "log_every": 10,
                "max_steps": 40, "device": "cuda", "cuda_graphs": True}
    done = subprocess.run(train_command(corpus, MODEL, settings, tmp_path / "run"), capture_output=True,
                          text=True, env=train_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((tmp_path / "run" / "train.json").read_text())
    records = [json.loads(line) for line in (tmp_path / "run" / "train.jsonl").open()]
    assert [r for r in records if r["kind"] == "retrain"], records    # weights that round back never improve
    record = metrics["cuda_graphs"]
    report(test="graphs-across-a-restart", record=record, steps=metrics["steps"])
    assert record["replays"] == metrics["steps"] and not record["failed"], record


@pytest.mark.parametrize("requested", ["cuda", "auto", "cuda:0"])
def test_a_gpu_asked_for_without_an_index_is_the_current_one(requested: str) -> None:
    """`--device cuda` (the benchmarks' and the training's flag) names no index: the device picked is the
    process's own GPU with its index (GPU 0 outside torchrun), and becomes the current one."""
    device = hardware.pick_device(requested)
    assert device.type == "cuda" and device.index == torch.cuda.current_device() == 0


@pytest.mark.parametrize("key", sorted(DECODERS))
def test_fused_decoder_equals_its_step_loop_on_cuda(key: str) -> None:
    model = make(key, torch.float32).to(CUDA)
    loop, loop_grads = logits_and_grads(model, "loop")
    fused, fused_grads = logits_and_grads(model, "sequence")
    report(test="fused-decoder-float32", case=key, logits=float((fused - loop).abs().max()))
    torch.testing.assert_close(fused, loop, rtol=1e-4, atol=1e-5)
    for name, g in loop_grads.items():
        torch.testing.assert_close(fused_grads[name], g, rtol=1e-4, atol=1e-5, msg=name)
    amp_loop, _ = logits_and_grads(model, "loop", autocast=True)
    amp_fused, _ = logits_and_grads(model, "sequence", autocast=True)
    errors = [float((x.float() - loop).abs().max() / loop.abs().max()) for x in (amp_loop, amp_fused)]
    report(test="fused-decoder-bf16", case=key, loop=errors[0], fused=errors[1])
    assert errors[1] <= 1.1 * errors[0], errors
    assert errors[0] < BF16_RELATIVE, errors       # candidate dropout drops the units the float32 loop drops


def test_a_captured_candidate_is_timed_by_its_replay_and_an_uncapturable_one_eagerly() -> None:
    """Graphed work's fast paths are timed as replays; a candidate that cannot be captured is timed as it
    would run (eagerly), and the failed capture leaves the random generator usable (torch leaves it marked
    as capturing: `hardware.after_failed_capture`)."""
    a, b = torch.randn(64, 64, device=CUDA), torch.randn(64, 64, device=CUDA)
    out: dict[str, torch.Tensor] = {}

    def product() -> None:
        out["y"] = a @ b

    replay = fastpath.as_replay("product", product, CUDA)
    assert replay is not product
    a.copy_(torch.randn(64, 64, device=CUDA))
    replay()
    torch.testing.assert_close(out["y"], a @ b)          # the replay computes on the inputs as they are now

    def waits_for_the_host() -> None:
        float((a @ b).sum())

    assert fastpath.as_replay("host", waits_for_the_host, CUDA) is waits_for_the_host
    torch.manual_seed(0)                  # random draws still work after the failed capture, and as seeded
    drawn = torch.nn.functional.dropout(torch.ones(1000, device=CUDA), 0.5)
    torch.manual_seed(0)
    assert torch.equal(torch.nn.functional.dropout(torch.ones(1000, device=CUDA), 0.5), drawn)
    times = fastpath.timings({"product": product, "host": waits_for_the_host}, CUDA, graphed=True)
    assert set(times) == {"product", "host"} and all(t > 0 for t in times.values())


def test_a_failed_capture_gives_back_the_stream_and_later_captures_replay() -> None:
    """torch.cuda.graph leaves the current stream on its capture stream where ending a failed capture raises;
    `hardware.capture` gives it back, and a capture into a new pool afterwards records and replays."""
    before = torch.cuda.current_stream(CUDA)
    with pytest.raises(RuntimeError), hardware.capture(torch.cuda.CUDAGraph(), CUDA, torch.cuda.graph_pool_handle()):
        float(torch.ones(4, device=CUDA).sum())          # waits for the host: the capture fails
    assert torch.cuda.current_stream(CUDA) == before
    x = torch.zeros(3, device=CUDA)
    graph = torch.cuda.CUDAGraph()
    with hardware.capture(graph, CUDA, torch.cuda.graph_pool_handle()):
        x.add_(1.0)
    graph.replay()
    graph.replay()
    torch.cuda.synchronize()
    assert x.tolist() == [2.0, 2.0, 2.0]
    assert torch.cuda.current_stream(CUDA) == before


def test_a_graphed_step_chooses_its_paths_by_replays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The decoder's and the cells' paths inside a captured training step are keyed and timed as graph
    replays, apart from the same work run eagerly (a path that wins eagerly by launching fewer kernels can
    lose once replayed)."""
    monkeypatch.setenv("RNMT_FASTPATH", "measure")
    monkeypatch.setenv("RNMT_FASTPATH_CACHE", str(tmp_path / "fastpath.json"))
    fastpath.forget()
    try:
        arch, settings = AUTOCAST["rnnsearch-atr"]
        torch.manual_seed(0)
        model = build_model(arch, 20, 20, **settings).to(CUDA).train()
        opt = graphs.graph_optimizer(list(model.parameters()), 0.01, (0.9, 0.999), 1e-8, CUDA)
        steps = graphs.GraphedSteps(model, opt, 1.0, 0.0, True, CUDA, rows=4)
        src, mask = source("rnnsearch-atr")
        tgt_in, tgt_out = pad(TGT, bos=True)[0], pad(TGT, eos=True)[0]
        batch = Batch(src, mask, tgt_in, tgt_out, int((tgt_out != 0).sum()), 0, 0)
        losses = [float(steps.step(batch, batch.tgt_tokens)) for _ in range(20)]
        assert not steps.failed and steps.replays == 20
        keys = list(fastpath.chosen())
        report(test="graphed-choices", choices=fastpath.chosen())
        assert any("rnnsearch decoder" in k and k.endswith(", as a CUDA graph") for k in keys), keys
        assert any(" | cell " in k and k.endswith(", as a CUDA graph") for k in keys), keys
        # the encoder's ATR layers timed their per-step against their persistent kernels (cooperative
        # launches) as replays too, and the captured step holds the winner
        assert any("ATR recurrence" in k and k.endswith(", as a CUDA graph") for k in keys), keys
        assert losses[-1] < losses[0]
    finally:
        fastpath.forget()


def test_an_lstm_trains_by_replay_across_validations_without_cudnn_in_its_graphs(corpus: dict[str, Path],
                                                                                tmp_path: Path) -> None:
    """`rnmt train` of an RNNSearch+LSTM with CUDA graphs and measured paths: validations (eager, greedy
    decoding) between replayed steps, to the end, and no captured step holding cuDNN's LSTM (a training graph
    holding it failed at its first replay after a validation's eager cuDNN calls)."""
    cache = tmp_path / "fastpath.json"
    settings = {"batch_size": 8, "lr": 0.003, "valid_every": 10, "valid_bleu": True, "threads": 1, "amp": True,
                "checkpoint_every": 0, "log_every": 10, "max_steps": 40, "device": "cuda", "cuda_graphs": True}
    cmd = train_command(corpus, {**MODEL, "cell": "lstm"}, settings, tmp_path / "run")
    env = {**train_env(), "RNMT_FASTPATH": "measure", "RNMT_FASTPATH_CACHE": str(cache)}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((tmp_path / "run" / "train.json").read_text())
    record = metrics["cuda_graphs"]
    # the machine's file of choices: {machine: {computation: path}, "medians_ms": {machine: {computation: times}}}
    graphed = {k: v for name, choices in json.loads(cache.read_text()).items() if name != fastpath.MEDIANS
               for k, v in choices.items() if k.startswith("cell LSTM") and k.endswith(", as a CUDA graph")}
    report(test="lstm-graphs-across-validations", record=record, choices=graphed)
    assert record["replays"] == metrics["steps"] == 40 and not record["failed"], record
    assert graphed and "torch" not in graphed.values(), graphed


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_torchs_layer_leaves_the_cells_weights_where_a_graph_updates_them(kind: str) -> None:
    """A cell's cuDNN path run eagerly (as a validation runs it between replayed training steps) leaves the
    cell's parameters in their memory, so that an update a CUDA graph captured before still reaches them (an
    nn.LSTM given the weights moves them into a new buffer, and the graph then writes into freed memory)."""
    torch.manual_seed(0)
    cell = build_cell(kind, 16, 16, **({"reset": "after"} if kind == "gru" else {})).to(CUDA)
    params = list(cell.parameters())
    where = [p.data_ptr() for p in params]
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        torch._foreach_add_(params, 1.0)                      # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    with torch.no_grad(), torch.cuda.graph(graph):
        torch._foreach_add_(params, 1.0)                      # the graph's "update"
    x = torch.randn(6, 7, 16, device=CUDA)
    state = torch.zeros(6, cell.state_size, device=CUDA)
    lengths = torch.tensor([7, 3, 5, 1, 7, 2], device=CUDA)
    for lens in (None, lengths):
        assert cell.torch_layer(x, lens, state) is not None                        # with gradients
        with torch.no_grad():
            assert cell.torch_layer(x, lens, state) is not None                    # as a validation
    assert [p.data_ptr() for p in params] == where
    before = [p.detach().clone() for p in params]
    graph.replay()
    torch.cuda.synchronize()
    for p, b in zip(params, before, strict=True):
        torch.testing.assert_close(p.detach(), b + 1.0)


def test_the_decode_profile_on_cuda_counts_kernels_and_names_where_the_device_time_went() -> None:
    """`rnmt bench decode --profile --graphs` on a GPU: kernels per sentence, a GPU-busy fraction, and the
    device time by kind, eager and replayed, with the products among the kinds the profiler names."""
    from rnmt.bench import decode as bench_decode
    from rnmt.bench.profile import kind, trace

    cfg = bench_decode.Config(emb=32, hidden=64, vocab=500, sentences=8, max_len=10)
    rows = bench_decode.bench(CUDA, quick=True, cfg=cfg, graphs=True, profile=True)
    batched = [r for r in rows if r["mode"] == "batched"]
    report(test="decode-profile", rows=[{k: r.get(k) for k in ("model", "beam", "kernels_per_sentence",
                                                               "gpu_busy_fraction", "time_by_kind",
                                                               "graph_gpu_busy_fraction", "graph_time_by_kind")}
                                        for r in batched])
    for r in batched:
        assert r["kernels_per_sentence"] > 0 and 0 < r["gpu_busy_fraction"] <= 1, r
        assert r["time_by_kind"] and r["graph_time_by_kind"] and r["graph_same_output"], r
    # the card's product kernels are named as `kind` expects (cuBLAS names them by card and version)
    a = torch.randn(512, 512, device=CUDA)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        a @ a
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert names and {kind(n) for n in names} == {"matmul"}, names
    assert dict(trace(lambda: a @ a, CUDA).by_kind).get("matmul", 0) > 0
    # each kernel counted for the operator that launched it, every kernel once
    t = trace(lambda: (a @ a + a) + a, CUDA)
    report(test="profile-by-op", by_op=list(t.by_op))
    assert dict(t.by_op).get("aten::add") == 2 and sum(n for _, n in t.by_op) == t.launches, t.by_op
    # a replayed CUDA graph's kernels, each named with its time and launches (the training bench's heaviest list)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        b = (a @ a + a) + a
    replayed = trace(graph.replay, CUDA)
    report(test="profile-graph-kernels", heaviest=replayed.heaviest())
    assert sum(n for _, _, n in replayed.by_name) == replayed.launches >= 3, replayed.by_name
    assert b.shape == a.shape and replayed.heaviest(1)


def test_atr_takes_the_faster_of_its_two_triton_ways_at_paper_sizes(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """RNMT_ATR_PERSISTENT unset (auto) with fast paths measured: ATR's recurrence at batch 80, hidden 1000 in
    float32 times its per-step kernels against its persistent ones (cooperative launches) in two tilings once,
    and the way it took gives the per-step kernels' states and gradients, padded; the run records which kind
    of way it was, the machine's file the three ways' times."""
    monkeypatch.setenv("RNMT_FASTPATH", "measure")
    monkeypatch.setenv("RNMT_FASTPATH_CACHE", str(tmp_path / "fastpath.json"))
    monkeypatch.delenv("RNMT_ATR_PERSISTENT", raising=False)
    fastpath.forget()
    try:
        torch.manual_seed(0)
        cell = build_cell("atr", 32, 1000).to(CUDA)
        x = torch.randn(80, 20, 32, device=CUDA, requires_grad=True)
        h0 = torch.randn(80, 1000, device=CUDA, requires_grad=True)
        mask = torch.ones(80, 20, dtype=torch.bool, device=CUDA)
        mask[1, 6:] = False
        with use_path("sequence"):
            chosen = outputs_and_grads(cell, x, mask, h0, reverse=False)
            kind = triton_cells.kind(run(cell, x, mask, h0)[0])
            keys = [k for k in fastpath.chosen() if "ATR recurrence, hidden 1000, batch < 128" in k]
            assert len(keys) == 1, fastpath.chosen()
            way = fastpath.chosen()[keys[0]]
            assert kind == ("Triton, persistent" if way.startswith("persistent") else "Triton"), (kind, way)
            # three ways timed: per step, the most programs' tiles (64 x 16) and the fewest reads' (32 x 32)
            medians = json.loads((tmp_path / "fastpath.json").read_text())["medians_ms"]
            times = [t[keys[0].split(" | ")[-1]] for t in medians.values()]
            assert len(times) == 1 and set(times[0]) == {"per step", "persistent", "persistent, 32 x 32 tiles"}, times
            monkeypatch.setenv("RNMT_ATR_PERSISTENT", "0")
            per_step = outputs_and_grads(cell, x, mask, h0, reverse=False)
        errors = [relative_error(a, b) for a, b in zip(chosen, per_step, strict=True)]
        report(test="atr-persistent-chosen", way=way, medians_ms=times[0], max_relative_error=max(errors))
        assert max(errors) < 1e-5, errors
    finally:
        fastpath.forget()


# last in the file: a barrier that never opened would hang here, after every other test has run
@pytest.mark.parametrize("size", [(80, 1000, 20), (5, 48, 9), (5, 48, 1)],
                         ids=["batch 80 hidden 1000", "one program", "one step"])
def test_atrs_persistent_kernels_equal_its_per_step_kernels(size: tuple[int, int, int],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """RNMT_ATR_PERSISTENT=1: ATR's recurrence as one kernel launch a direction, its programs waiting for each
    other between steps, gives the per-step kernels' states and gradients in float32, padded."""
    batch, hidden, length = size
    atr = triton_cells.load("atr")
    torch.manual_seed(0)
    cell = build_cell("atr", 32, hidden).to(CUDA)
    x = torch.randn(batch, length, 32, device=CUDA, requires_grad=True)
    h0 = torch.randn(batch, hidden, device=CUDA, requires_grad=True)
    mask = torch.ones(batch, length, dtype=torch.bool, device=CUDA)
    mask[1, 6:] = False
    mask[3, 2:] = False
    found = {}
    for persistent in ("0", "1"):
        monkeypatch.setenv("RNMT_ATR_PERSISTENT", persistent)
        with use_path("sequence"):
            found[persistent] = outputs_and_grads(cell, x, mask, h0, reverse=False)
    assert atr.persistent_launch(batch, hidden, CUDA) is not None
    errors = [relative_error(a, b) for a, b in zip(found["1"], found["0"], strict=True)]
    report(test="atr-persistent", size=list(size), max_relative_error=max(errors))
    # the two kernels sum the gradients' products in different orders: float32's rounding, 3.1e-7 of a tensor's
    # norm at batch 80 hidden 1000 on an H100, where 5 of 32000 elements near zero were 1e-3 apart (relative).
    # Under 1e-5 of the norm still fails a single element of 32000 wrong by 1% of the tensor's largest.
    assert max(errors) < 1e-5, errors


def test_narrow_products_multiply_bfloat16_into_float32_on_the_tensor_cores() -> None:
    """rnmt.machine.matmul `narrow` on CUDA: cuBLAS multiplies the rounded operands into float32 (`out_dtype`,
    which torch has from 2.8), so the product equals the float64 product of the rounded operands to float32's
    precision (rounding the result to bfloat16, the fallback's way, would be some 1e-3 away)."""
    torch.manual_seed(0)
    a, w, c = (torch.randn(*shape, device=CUDA) for shape in ((80, 1000), (2000, 1000), (2000,)))
    with matmul.narrow(torch.bfloat16, [w]):
        got = matmul.addmm(c, a, w.t())
    assert matmul._wide_out(a.to(torch.bfloat16)), torch.__version__
    want = a.to(torch.bfloat16).double() @ w.to(torch.bfloat16).double().T + c.double()
    error = relative_error(got.double(), want)
    report(test="narrow-products", max_relative_error=error)
    assert got.dtype == torch.float32 and error < 1e-5, error


@pytest.mark.parametrize("key", ["atr", "gru-reset-before", "gru"])
def test_the_fused_decoder_under_autocast_multiplies_bfloat16_on_cuda(key: str) -> None:
    """Under bfloat16 autocast every product of the fused decoder on CUDA (its cells', W_q's and W_c's, each
    step's and the weight gradients after the loop) takes bfloat16 operands, forward and backward, and its
    outputs and gradients stay within bfloat16's tolerance of the float32 fused decoder's."""
    from test_narrow_products import DECODERS as NARROW
    from test_narrow_products import decoder, decoder_inputs

    model, inputs, mask = decoder_inputs(key, T=5)
    model, inputs, mask = model.to(CUDA), {k: v.to(CUDA) for k, v in inputs.items()}, mask.to(CUDA)
    narrow, forward, backward = decoder(model, inputs, mask, torch.float32, "narrow")
    full, _, _ = decoder(model, inputs, mask, torch.float32, "full")
    assert len(forward.narrow) == 5 * NARROW[key][1] and all(forward.narrow), forward.narrow
    assert len(backward.narrow) >= 5 * NARROW[key][1] and all(backward.narrow), backward.narrow
    errors = [relative_error(a, b) for a, b in zip(narrow, full, strict=True)]
    report(test="fused-decoder-narrow-products", case=key, max_relative_error=max(errors))
    assert max(errors) < BF16_RELATIVE, errors


@pytest.mark.parametrize("size", [(80, 1000, 20), (5, 48, 9)], ids=["batch 80 hidden 1000", "one program"])
def test_atrs_persistent_kernels_under_bfloat16_autocast_round_only_their_products(
        size: tuple[int, int, int], monkeypatch: pytest.MonkeyPatch) -> None:
    """Under bfloat16 autocast (`products_in`, as cells/base.py runs a recurrence) the persistent kernels take
    their products on the tensor cores from bfloat16 operands: states and gradients equal the float64
    recurrence whose product operands are rounded to bfloat16 (nothing else rounded), and stay within the
    bfloat16 tolerance of the float32 per-step kernels."""
    from test_cells_triton import narrow_atr_reference

    batch, hidden, length = size
    atr = triton_cells.load("atr")
    torch.manual_seed(0)
    p = torch.randn(length, batch, hidden, device=CUDA)
    h0 = torch.randn(batch, hidden, device=CUDA)
    w, b = torch.randn(hidden, hidden, device=CUDA) / hidden ** 0.5, 0.1 * torch.randn(hidden, device=CUDA)
    m = torch.ones(length, batch, 1, device=CUDA)
    m[6:, 1] = 0.0
    m[2:, 3] = 0.0
    grad = torch.randn(length, batch, hidden, device=CUDA)

    def kernels(persistent: str, products: torch.dtype | None) -> list[torch.Tensor]:
        monkeypatch.setenv("RNMT_ATR_PERSISTENT", persistent)
        inputs = [x.clone().requires_grad_() for x in (p, h0, w, b)]
        with matmul.products_in(products):
            states = atr.TritonATR.apply(inputs[0], m, inputs[1], inputs[2], inputs[3])
        return [states, *torch.autograd.grad((states * grad).sum(), inputs)]

    narrow = kernels("1", torch.bfloat16)
    assert atr.persistent_launch(batch, hidden, CUDA) is not None
    expected = narrow_atr_reference(*(x.double() for x in (p, m, h0, w, b, grad)), torch.bfloat16)
    to_reference = [relative_error(a.double(), e) for a, e in zip(narrow, expected, strict=True)]
    to_float32 = [relative_error(a, e) for a, e in zip(narrow, kernels("0", None), strict=True)]
    report(test="atr-persistent-bfloat16", size=list(size), max_relative_error=max(to_reference),
           max_relative_error_to_float32=max(to_float32))
    assert max(to_reference) < 1e-4, to_reference
    assert max(to_float32) < BF16_RELATIVE, to_float32
