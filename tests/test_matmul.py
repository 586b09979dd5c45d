"""The oneDNN route for CPU float32 products (rnmt.machine.matmul): the same values and gradients as torch's own
products, taken where it applies and only there, in the cells' fused loops and whole models too."""

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from rnmt.cells import build_cell, run
from rnmt.machine import matmul
from rnmt.models import build_model

pytestmark = pytest.mark.skipif(not matmul.available(), reason="this torch build has no oneDNN (mkldnn)")


class Ops(TorchDispatchMode):
    """Records the name of every aten/mkldnn op that runs inside the block."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))

    def onednn(self) -> int:
        return sum("mkldnn._linear_pointwise" in n for n in self.names)


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, rtol=2e-5, atol=2e-5 * float(b.detach().abs().max()))


def test_linear_equals_torch_values_and_gradients() -> None:
    torch.manual_seed(0)
    x = torch.randn(6, 30, 128, requires_grad=True)
    w = torch.randn(384, 128, requires_grad=True)
    b = torch.randn(384, requires_grad=True)
    grads = []
    for fn in (F.linear, matmul.linear):
        with Ops() as ops:
            y = fn(x, w, b)
            g = torch.autograd.grad((y.sin() * y).sum(), [x, w, b])
        grads.append((y, *g, ops.onednn()))
    (y0, *g0, n0), (y1, *g1, n1) = grads
    assert n0 == 0 and n1 == 3                         # forward, ∂x and ∂W all went to oneDNN
    assert y1.shape == y0.shape
    for a, c in zip([y1, *g1], [y0, *g0], strict=True):
        close(a, c)


def test_only_inputs_that_need_gradients_get_them() -> None:
    x = torch.randn(64, 128)
    w = torch.randn(256, 128, requires_grad=True)
    with Ops() as ops:
        y = matmul.linear(x, w)
        (gw,) = torch.autograd.grad(y.sum(), [w])
    assert ops.onednn() == 2                           # forward and ∂W; no ∂x
    close(gw, torch.ones(64, 256).t() @ x)


def test_addmm_and_mm_take_transposed_views_and_both_kinds_of_addend() -> None:
    torch.manual_seed(1)
    a, w = torch.randn(80, 200), torch.randn(300, 200)
    bias, c = torch.randn(300), torch.randn(80, 300)
    with Ops() as ops:
        close(matmul.addmm(bias, a, w.t()), torch.addmm(bias, a, w.t()))
        close(matmul.addmm(c, a, w.t()), torch.addmm(c, a, w.t()))
        close(matmul.mm(a.t(), c), a.t() @ c)             # [200, 80] · [80, 300], a strided left operand
    assert ops.onednn() == 3


def test_right_operand_with_strided_rows_is_made_dense_for_onednn() -> None:
    """oneDNN's slow path (1,700× slower): b a column slice, as h in an LSTM state [h; c] for ∂W = gᵀ h."""
    g, state, c = torch.randn(80, 1024), torch.randn(80, 512), torch.randn(1024, 256)
    with matmul.backend("onednn"), Ops() as ops:
        close(matmul.mm(g.t(), state[:, :256]), g.t() @ state[:, :256])
        close(matmul.addmm(c, g.t(), state[:, 256:]), torch.addmm(c, g.t(), state[:, 256:]))
    assert ops.onednn() == 2
    assert ops.names.count("aten.clone") + ops.names.count("aten.copy_") >= 2           # the dense copies


def test_route_is_chosen_by_size_dtype_and_mode() -> None:
    small = (torch.randn(8, 16), torch.randn(16, 16))     # 2,048 multiply-adds: torch's own is faster
    big = (torch.randn(64, 256), torch.randn(256, 256))   # 4 M: oneDNN
    for mode, expected in (("auto", (0, 1)), ("onednn", (1, 1)), ("blas", (0, 0))):
        counts = []
        for a, b in (small, big):
            with matmul.backend(mode), Ops() as ops:
                matmul.mm(a, b)
            counts.append(ops.onednn())
        assert tuple(counts) == expected, mode
    with Ops() as ops:
        matmul.mm(big[0].double(), big[1].double())                      # oneDNN has no float64
        with torch.autocast("cpu", dtype=torch.bfloat16):
            matmul.linear(big[0], big[1])                                # autocast decides the dtype
    assert ops.onednn() == 0
    with pytest.raises(ValueError, match="valid"), matmul.backend("mkl"):
        pass


def test_fused_cell_loops_give_torch_products_results() -> None:
    """ATR's and GRU's fused loops (per-step products, backward and weight gradients) on oneDNN."""
    for name in ("atr", "gru"):
        torch.manual_seed(0)
        cell = build_cell(name, 96, 96)
        x = torch.randn(12, 9, 96, requires_grad=True)
        mask = torch.ones(12, 9, dtype=torch.bool)
        mask[3, 5:] = False
        results = []
        for mode in ("blas", "onednn"):
            with matmul.backend(mode), Ops() as ops:
                out, final = run(cell, x, mask)
                grads = torch.autograd.grad(out.pow(2).sum() + final.sum(), [x, *cell.parameters()])
            results.append(([out, final, *grads], ops.onednn()))
        (ref, n_blas), (got, n_onednn) = results
        assert n_blas == 0 and n_onednn > 9, name
        for a, c in zip(got, ref, strict=True):
            close(a, c)


def test_whole_model_training_step_agrees_across_routes() -> None:
    src = torch.randint(4, 50, (4, 7))
    tgt = torch.randint(4, 50, (4, 6))
    mask = torch.ones(4, 7, dtype=torch.bool)
    results = []
    for mode in ("blas", "onednn"):
        torch.manual_seed(0)
        model = build_model("rnnsearch", 50, 50, emb=32, hidden=48, cell="atr", dropout=0.0)
        with matmul.backend(mode):
            logits = model(src, mask, tgt)
            loss = F.cross_entropy(logits.flatten(0, 1), tgt.flatten())
            loss.backward()
        results.append([logits.detach(), *(p.grad for p in model.parameters())])
    for a, c in zip(results[1], results[0], strict=True):
        close(a, c)


def test_flop_counting_sees_the_products_it_counts() -> None:
    """FlopCounterMode does not know oneDNN's op; the benchmark counts under the 'blas' route."""
    from rnmt.bench.train import QUICK as cfg
    from rnmt.bench.train import forward_flops, random_batch

    model = build_model("rnnsearch", cfg.vocab, cfg.vocab, emb=cfg.emb, hidden=cfg.hidden, cell="atr")
    b = random_batch(cfg, torch.device("cpu"))
    with matmul.backend("onednn"):
        counted = forward_flops(model, b)
    with matmul.backend("blas"):
        assert counted == forward_flops(model, b) > 0


def test_bad_environment_value_names_the_valid_ones() -> None:
    env = {**os.environ, "RNMT_MATMUL": "fast"}
    out = subprocess.run([sys.executable, "-c", "import rnmt.machine.matmul"], env=env, capture_output=True, text=True)
    assert out.returncode != 0 and "RNMT_MATMUL='fast'" in out.stderr and "auto, onednn, blas" in out.stderr
    env["RNMT_MATMUL"] = "blas"
    code = "from rnmt import provenance; import torch; print(provenance.describe(torch.device('cpu'))['matmul'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "blas"
