"""The Triton kernels of ATR, GRU, SRU and SR-NMT (src/rnmt/cells/triton) against the plain step loop and
the CPU whole-sequence paths: outputs, final states and the gradients of the input, the initial state and
every parameter, with padding (one sentence of length 0), reversal and nonzero initial states.

No GPU is needed: the kernels run on CPU tensors through triton's interpreter. TRITON_INTERPRET=1 must be
set before triton decorates the kernels, so the comparisons run in a fresh process (this file run as a
script, once for the whole module) and cannot leak into other tests; each case comes back as a test here.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import rnmt
from rnmt.cells import build_cell, run
from rnmt.cells import triton as triton_cells
from rnmt.cells.base import use_path
from rnmt.cells.srnmt import DecoderUnit, EncoderUnit
from rnmt.machine import matmul

NAMES = list(triton_cells.CELLS)           # every cell with a Triton file (cells/triton/<cell>.py)
CASES = [f"{name}-float64-{pad}-{direction}" for name in NAMES for pad in ("full", "padded")
         for direction in ("forward", "reverse")]
CASES += [f"{name}-float32-padded-reverse" for name in NAMES]
CASES += [f"{name}-wide-float32-padded-forward" for name in NAMES]      # several programs per grid axis
CASES += [f"{name}-gaps" for name in NAMES]                             # `sequence` with any mask
CASES += ["srnmt-units-float64", "dispatch"]
# ATR's persistent kernels (RNMT_ATR_PERSISTENT=1): all steps in one launch, which the interpreter runs as one
# program (its programs run one after another, so a barrier between several would never open); and their
# tiling, several programs over rows and hidden units launched a step at a time
CASES += ["atr-persistent-float64-padded-forward", "atr-persistent-float32-padded-reverse"]
CASES += ["atr-persistent-tiles", "atr-persistent-narrow-products"]
# which of ATR's two Triton ways a cell takes: timed (RNMT_ATR_PERSISTENT=auto), forced, or per step unmeasured
CASES += ["atr-persistent-chosen"]
# the row kernels (one step's elementwise work on rows of the batch-major buffers) in the chained loop of step
# kernels: the context-aware encoder's two ATR cells a timestep (cells/composite.py), the GRU with the reset
# gate inside the product (the ATR tables' GRU)
CASES += ["atr-two-input-rows", "gru-reset-before-rows"]
# under autocast (`products_in`) the cuBLAS products those kernels keep a step take bfloat16 operands
CASES += ["narrow-products"]
# the row kernels of DTMT's gated cells (cells/triton/gated.py): L-GRU, LAU, T-GRU and the gate-normalised GRU,
# with layer-normalised gates or gate biases and candidate dropout, alone and chained in transition blocks
CASES += ["gated-float64", "gated-float32"]
# a decoder step where nothing is differentiated (beam search's) on its cells' step kernels (cells/base.py
# `fast_step`), for every recurrent architecture
CASES += ["search-steps"]
# and the search's own bookkeeping of a step after its top-k as one kernel (decode/triton/select.py)
CASES += ["search-select"]
TOLERANCE = {torch.float64: {"rtol": 1e-10, "atol": 1e-12}, torch.float32: {"rtol": 1e-4, "atol": 1e-5}}

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                  reason="triton is not installed (it comes with `pip install -e .[dev]` on Linux); "
                                         "the CUDA kernels are tested through its interpreter")


# ---------------------------------------------------------------- run in the interpreter process

def outputs_and_grads(cell: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor, h0: torch.Tensor,
                      reverse: bool) -> list[torch.Tensor]:
    out, final = run(cell, x, mask, h0, reverse=reverse)
    loss = out.sin().sum() + (final * torch.linspace(-1, 1, final.size(1), dtype=final.dtype)).sum()
    return [out, final, *torch.autograd.grad(loss, [x, h0, *cell.parameters()])]


def three_paths(fn) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
    """fn() under the step loop, today's CPU sequence path, and the Triton kernels."""
    with use_path("loop"):
        loop = fn()
    seq = fn()
    with triton_cells.force_on_cpu():
        kernels = fn()
    return loop, seq, kernels


def assert_all_close(triton_result: list[torch.Tensor], reference: list[torch.Tensor], what: str,
                     dtype: torch.dtype) -> None:
    assert len(triton_result) == len(reference)
    for k, (a, b) in enumerate(zip(triton_result, reference, strict=True)):
        torch.testing.assert_close(a, b, **TOLERANCE[dtype], msg=lambda m, k=k: f"tensor {k} vs {what}: {m}")


def check_cell(case: str) -> None:
    name, rest = case.split("-", 1)
    wide, persistent = rest.startswith("wide-"), rest.startswith("persistent-")
    dtype = torch.float32 if "float32" in rest else torch.float64
    padded, reverse = "padded" in rest, rest.endswith("reverse")
    torch.manual_seed(0)
    # wide: input = hidden (SRU's highway then reads x itself), several kernel programs along hidden / B·H;
    # persistent: 20 rows of 40 units, one 128 x 64 tile whose products take two blocks of 32 units
    batch, length, inp, hidden = (2, 4, 136, 136) if wide else (20, 5, 5, 40) if persistent else (4, 7, 5, 6)
    if persistent:
        assert triton_cells.load("atr").persistent_launch(batch, hidden, torch.device("cpu")) is not None
    cell = build_cell(name, inp, hidden).to(dtype)
    x = torch.randn(batch, length, inp, dtype=dtype, requires_grad=True)
    h0 = torch.randn(batch, cell.state_size, dtype=dtype, requires_grad=True)
    mask = torch.ones(batch, length, dtype=torch.bool)
    if padded:
        mask[1, 3:] = False
        if not wide:
            mask[2, 1:] = False
            mask[3, :] = False                            # length 0: the final state is h0
    with triton_cells.force_on_cpu():
        states = cell.sequence(cell.project_inputs(x), mask if padded else None, h0)
    assert triton_cells.uses_triton(states), f"{case}: the forced path did not run the Triton kernels"
    loop, seq, kernels = three_paths(lambda: outputs_and_grads(cell, x, mask, h0, reverse))
    assert_all_close(kernels, loop, "the step loop", dtype)
    assert_all_close(kernels, seq, "the CPU sequence path", dtype)


def check_gaps(name: str) -> None:
    """`sequence` itself with padding anywhere (leading, between tokens, a whole row): every state, padded
    steps included, and the gradients of the projection and the initial state ([c₀; h₀] for SRU) equal
    the step loop's, where a padded step carries the state. `run` only pads at the end and masks the
    outputs, so this reaches what it cannot (e.g. ∂L/∂h₀ of SRU through padded steps)."""
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(0)
    cell = build_cell(name, 5, 6)
    p = cell.project_inputs(torch.randn(3, 6, 5)).detach().requires_grad_()
    s0 = torch.randn(3, cell.state_size, requires_grad=True)
    mask = torch.tensor([[False, True, True, False, True, False], [False] * 6, [True] * 6])
    weights = torch.randn(3, 6, cell.state_size)
    state, expected = s0, []
    for t in range(6):
        state = torch.where(mask[:, t, None], cell.step(p[:, t], state), state)
        expected.append(state)
    expected = torch.stack(expected, 1)
    with triton_cells.force_on_cpu():
        states = cell.sequence(p, mask, s0)
    assert triton_cells.uses_triton(states)
    loop = [expected, *torch.autograd.grad((expected * weights).sum(), [p, s0])]
    kernels = [states, *torch.autograd.grad((states * weights).sum(), [p, s0])]
    assert_all_close(kernels, loop, "the step loop", torch.float64)


def check_persistent_tiles() -> None:
    """ATR's persistent kernels over tiles of several shapes (20 rows, 40 units: 2 x 3 tiles of 16 rows and 16
    units, 2 x 2 of 16 x 32, 1 x 3 of 32 x 16, 2 x 1 of 16 x 64, the squarer tiles `fewer_reads_tile` offers;
    products in blocks of 16), launched one step at a time, against ATRSequence: states and every gradient."""
    from rnmt.cells.atr import ATRSequence

    atr = triton_cells.load("atr")
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(0)
    T, B, H = 4, 20, 40
    p, h0 = torch.randn(T, B, H, requires_grad=True), torch.randn(B, H, requires_grad=True)
    w, b = (0.3 * torch.randn(H, H)).requires_grad_(), torch.randn(H, requires_grad=True)
    m = torch.ones(T, B, 1)
    m[2:, 3] = 0.0
    m[:, 17] = 0.0
    hs = ATRSequence.apply(p, m, h0, w, b)
    weights = torch.randn(T, B, H)
    expected = [hs, *torch.autograd.grad((hs * weights).sum(), [p, h0, w, b])]

    for block_b, block_n in ((16, 16), (16, 32), (32, 16), (16, 64)):
        opts = {"BLOCK_B": block_b, "BLOCK_N": block_n, "BLOCK_K": 16, "HAS_MASK": True, "SYNC": False}
        row_blocks = -(-B // block_b)
        grid, sync = (row_blocks * -(-H // block_n),), torch.zeros(row_blocks, dtype=torch.int32)
        states = torch.empty(T + 1, B, H)
        states[0] = h0.detach()
        i_all, f_all = torch.empty(T, B, H), torch.empty(T, B, H)
        for t in range(T):
            atr.atr_persistent_forward[grid](p.detach(), m, w.detach(), b.detach(), states, i_all, f_all, sync, t,
                                             t + 1, B, H, **opts)
        dp, dq, carry = torch.empty(T, B, H), torch.zeros(T + 1, B, H), torch.zeros(B, H)
        for t in range(T - 1, -1, -1):
            atr.atr_persistent_backward[grid](weights, m, p.detach(), states, i_all, f_all, w.detach(), dp, dq,
                                              carry, sync, t, t + 1, B, H, **opts)
        g = carry + dq[0] @ w.detach()
        dw, db = atr.weight_grads(dq[:T], states[1:], states[0])
        assert_all_close([states[1:], dp, g, dw, db], expected, f"ATRSequence ({block_b} x {block_n} tiles)",
                         torch.float64)


def narrow_atr_reference(p: torch.Tensor, m: torch.Tensor, h0: torch.Tensor, w: torch.Tensor, b: torch.Tensor,
                         grad: torch.Tensor, low: torch.dtype) -> list[torch.Tensor]:
    """ATR's recurrence in float64 with the operands of its recurrent products rounded to `low` (h_{t-1} and W_h
    forward, ∂q and W_h backward, and after the loop ∂h0's last product and the weight gradient's ∂q and
    states) and every other operation exact: (states, ∂p, ∂h0, ∂W_h, ∂b_h) for the loss Σ states ⊙ grad."""
    def r(x: torch.Tensor) -> torch.Tensor:
        return x.to(low).double()

    T = p.size(0)
    h, hs, gates = h0, [], []
    for t in range(T):
        q = r(h) @ r(w).T + b
        i, f = torch.sigmoid(p[t] + q), torch.sigmoid(p[t] - q)
        new = torch.where(m[t] != 0, i * p[t] + f * h, h)
        gates.append((i, f, h))
        hs.append(new)
        h = new
    dp, dq = torch.zeros_like(p), torch.zeros(T + 1, *h0.shape, dtype=torch.float64)
    carry = torch.zeros_like(h0)
    for t in range(T - 1, -1, -1):
        i, f, h = gates[t]
        g = carry + r(dq[t + 1]) @ r(w) + grad[t]
        di, df = g * i * (1 - i) * p[t], g * f * (1 - f) * h
        keep = m[t] != 0
        dq[t] = torch.where(keep, di - df, 0.0)
        dp[t] = torch.where(keep, g * i + di + df, 0.0)
        carry = torch.where(keep, g * f, g)
    states = torch.stack(hs)
    previous = torch.cat([h0[None], states[:-1]])
    return [states, dp, carry + r(dq[0]) @ r(w), torch.einsum("tbi,tbj->ij", r(dq[:T]), r(previous)),
            dq[:T].sum((0, 1))]


def check_persistent_narrow_products() -> None:
    """ATR's persistent kernels with their products in float16 (`products_in`, the form bfloat16 autocast
    takes on a GPU, whose bfloat16 the interpreter does not compute): states and every gradient equal the
    float64 recurrence whose product operands are rounded to float16, and differ from the full-precision
    kernels' by the rounding (so the narrow form was taken)."""
    atr = triton_cells.load("atr")
    torch.manual_seed(0)
    T, B, H = 5, 20, 40
    p, h0 = torch.randn(T, B, H), torch.randn(B, H)
    w, b = 0.3 * torch.randn(H, H), torch.randn(H)
    m = torch.ones(T, B, 1)
    m[3:, 2] = 0.0
    m[:, 7] = 0.0
    grad = torch.randn(T, B, H)
    expected = narrow_atr_reference(*(x.double() for x in (p, m, h0, w, b, grad)), torch.float16)

    def kernels(dtype: torch.dtype | None) -> list[torch.Tensor]:
        inputs = [x.clone().requires_grad_() for x in (p, h0, w, b)]
        os.environ["RNMT_ATR_PERSISTENT"] = "1"
        try:
            with triton_cells.force_on_cpu(), matmul.products_in(dtype):
                states = atr.TritonATR.apply(inputs[0], m, inputs[1], inputs[2], inputs[3])
            return [states, *torch.autograd.grad((states * grad).sum(), inputs)]
        finally:
            del os.environ["RNMT_ATR_PERSISTENT"]

    narrow, full = kernels(torch.float16), kernels(None)
    for k, (a, e, f) in enumerate(zip(narrow, expected, full, strict=True)):
        error = float((a.detach().double() - e).norm() / e.norm())
        assert error < 2e-5, f"tensor {k}: float16 products {error:.2e} of its norm from the reference"
        assert float((f.detach().double() - e).norm() / e.norm()) > 1e-4, f"tensor {k}: no rounding seen"

    # what asks for them: `run` under autocast, whose recurrence runs in float32 with autocast off
    cell = build_cell("atr", 5, H)
    asked = []
    products_dtype = atr.products_dtype
    atr.products_dtype = lambda x: asked.append(products_dtype(x)) or products_dtype(x)
    os.environ["RNMT_ATR_PERSISTENT"] = "1"
    try:
        with triton_cells.force_on_cpu(), use_path("sequence"):
            for dtype in (torch.float16, None):
                with torch.autocast("cpu", dtype or torch.float16, enabled=dtype is not None):
                    out, _ = run(cell, torch.randn(B, T, 5), m[:, :, 0].T != 0)
                assert out.isfinite().all()
    finally:
        atr.products_dtype = products_dtype
        del os.environ["RNMT_ATR_PERSISTENT"]
    assert asked == [torch.float16, torch.float32], asked


def check_persistent_chosen() -> None:
    """ATR's `sequence` on the Triton path: with fast paths measured and RNMT_ATR_PERSISTENT unset (auto) it
    times its per-step against its persistent kernels once for its sizes (a choice in the machine's file, the
    random stream left as it was) and takes the winner, whose states and gradients equal the CPU path's and
    whose kind the run records; forced by the switch it takes that way unmeasured; per step where nothing is
    measured (RNMT_FASTPATH=default), where the persistent programs do not fit the GPU, and on the CPU."""
    import tempfile

    from rnmt.machine import fastpath

    torch.manual_seed(0)
    cell = build_cell("atr", 5, 40)                   # 20 rows of 40 units: one program, all the interpreter has
    x = torch.randn(20, 6, 5)
    mask = torch.ones(20, 6, dtype=torch.bool)
    mask[3, 4:] = False
    h0 = torch.randn(20, 40)
    grad = torch.randn(20, 6, 40)

    def states_and_grads(**env: str) -> tuple[list[torch.Tensor], str | None, dict[str, str]]:
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        fastpath.forget()
        try:
            p = cell.project_inputs(x).detach().requires_grad_()
            with triton_cells.force_on_cpu():
                out = cell.sequence(p, mask, h0)
            kind = triton_cells.kind(out)
            grads = torch.autograd.grad((out * grad).sum(), [p, *cell.parameters()], allow_unused=True)
            return [out, *(g for g in grads if g is not None)], kind, fastpath.chosen()
        finally:
            for k, v in saved.items():
                if v is None:
                    del os.environ[k]
                else:
                    os.environ[k] = v

    p = cell.project_inputs(x).detach().requires_grad_()
    reference = cell.sequence(p, mask, h0)                               # not forced: the CPU loop
    assert triton_cells.kind(reference) is None
    expected = [reference, *(g for g in torch.autograd.grad((reference * grad).sum(), [p, *cell.parameters()],
                                                            allow_unused=True) if g is not None)]
    with tempfile.TemporaryDirectory() as folder:
        cache = str(Path(folder) / "fastpath.json")
        torch.manual_seed(5)
        drawn = torch.rand(3)
        torch.manual_seed(5)
        found, kind, chosen = states_and_grads(RNMT_FASTPATH="measure", RNMT_FASTPATH_CACHE=cache)
        assert torch.equal(torch.rand(3), drawn), "measuring moved the random stream"
        keys = [k for k in chosen if "ATR recurrence, hidden 40, batch < 32, masked, forward+backward" in k]
        assert len(keys) == 1, chosen
        way = chosen[keys[0]]
        assert way in ("per step", "persistent", "persistent, 32 x 64 tiles"), chosen
        assert kind == ("Triton, persistent" if way.startswith("persistent") else "Triton"), (kind, chosen)
        times = json.loads(Path(cache).read_text())["medians_ms"]                   # every way was timed
        assert {len(t.get(keys[0].split(" | ")[-1], {})) for t in times.values()} >= {3}, times
        assert json.loads(Path(cache).read_text()), "the choice was not kept for the machine"
        assert_all_close(found, expected, "the CPU loop", torch.float32)
        for setting, taken in (("1", "Triton, persistent"), ("0", "Triton")):
            found, kind, chosen = states_and_grads(RNMT_FASTPATH="measure", RNMT_FASTPATH_CACHE=cache,
                                                   RNMT_ATR_PERSISTENT=setting)
            assert kind == taken and not [k for k in chosen if "ATR recurrence" in k], (setting, kind, chosen)
            assert_all_close(found, expected, "the CPU loop", torch.float32)
    # each way the choice weighed, run directly: 20 rows of 40 units fit one program in 128 x 64 tiles (the
    # most programs') and in 32 x 64 ones (the fewest bytes read a step), the interpreter's one slot
    atr = triton_cells.load("atr")
    assert atr.fewer_reads_tile(20, 40, torch.device("cpu"), 4) == (32, 64)
    from rnmt.cells.atr import ATRSequence
    from rnmt.cells.kernel import time_major

    t_major, m = time_major(cell.project_inputs(x).detach(), mask)

    def direct(way: bool | tuple[int, int] | None) -> list[torch.Tensor]:
        inputs = [t.clone().requires_grad_() for t in (t_major, h0, cell.weight_hh.detach(), cell.bias_hh.detach())]
        with triton_cells.force_on_cpu():
            states = (ATRSequence.apply(*inputs[:1], m, *inputs[1:]) if way is None
                      else atr.TritonATR.apply(inputs[0], m, *inputs[1:], way))
        assert way is None or states.grad_fn.persistent == (way is not False)
        return [states, *torch.autograd.grad((states * grad.transpose(0, 1)).sum(), inputs)]

    for way in (False, True, (32, 64)):
        assert_all_close(direct(way), direct(None), f"ATRSequence (way {way})", torch.float32)
    found, kind, chosen = states_and_grads(RNMT_FASTPATH="default")
    assert kind == "Triton" and not chosen, (kind, chosen)
    assert_all_close(found, expected, "the CPU loop", torch.float32)
    wide = build_cell("atr", 5, 136)                   # 3 blocks of 64 units: more programs than the one slot
    assert triton_cells.load("atr").persistent_launch(20, 136, torch.device("cpu")) is None
    mode = os.environ.get("RNMT_FASTPATH", "default")
    os.environ["RNMT_FASTPATH"] = "measure"
    fastpath.forget()
    try:
        with triton_cells.force_on_cpu():
            out = wide.sequence(wide.project_inputs(x), mask, torch.zeros(20, 136))
    finally:
        os.environ["RNMT_FASTPATH"] = mode
    assert triton_cells.kind(out) == "Triton" and not [k for k in fastpath.chosen() if "ATR recurrence" in k]

    # measured through `run`: the cell's path choice probes whether a whole-sequence path exists on one
    # sentence of two steps, which times nothing of ATR's ways (only the work's own batch is timed); a second
    # ATR layer forced per step over the first's persistent states records its own kind, not the first's;
    # a persistent launch that fails (as a cooperative grid the driver refuses would) leaves that way out of
    # the timing with a warning, and the recurrence runs per step
    from rnmt.cells.base import chosen_path

    upper = build_cell("atr", 40, 40)
    atr = triton_cells.load("atr")
    with tempfile.TemporaryDirectory() as folder:
        saved = {k: os.environ.get(k) for k in ("RNMT_FASTPATH", "RNMT_FASTPATH_CACHE")}
        os.environ.update(RNMT_FASTPATH="measure", RNMT_FASTPATH_CACHE=str(Path(folder) / "fastpath.json"))
        fastpath.forget()
        try:
            with triton_cells.force_on_cpu():
                chosen_path(cell, x.requires_grad_())        # times the loop against the whole-sequence path
            ways = {k.split(" | ")[-1] for k in fastpath.chosen() if "ATR recurrence" in k}
            assert ways and all("batch < 32," in k for k in ways), ways
            with triton_cells.force_on_cpu(), use_path("sequence"):
                os.environ["RNMT_ATR_PERSISTENT"] = "1"
                lower_out, _ = run(cell, x, mask)
                os.environ["RNMT_ATR_PERSISTENT"] = "0"
                upper_out, _ = run(upper, lower_out, mask)
                del os.environ["RNMT_ATR_PERSISTENT"]
            assert triton_cells.kind(upper_out) == "Triton, persistent"      # the walk reaches the lower layer
            assert triton_cells.kind(upper_out, (lower_out,)) == "Triton"
            fastpath.forget()
            forward = atr.atr_persistent_forward

            class Refused:
                def __getitem__(self, grid: object) -> object:
                    def launch(*args: object, **kwargs: object) -> None:
                        raise RuntimeError("Triton Error [CUDA]: too many blocks in cooperative launch")
                    return launch

            atr.atr_persistent_forward = Refused()
            try:
                with triton_cells.force_on_cpu():
                    out = cell.sequence(cell.project_inputs(x.detach()).requires_grad_(), mask, h0)
            finally:
                atr.atr_persistent_forward = forward
            assert triton_cells.kind(out) == "Triton"
            assert not [k for k in fastpath.chosen() if "ATR recurrence" in k], fastpath.chosen()
        finally:
            os.environ.pop("RNMT_ATR_PERSISTENT", None)
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


@contextlib.contextmanager
def counted(module: object, entry: str) -> Iterator[list[int]]:
    """Within the block, every call of `module.entry` (a row kernels' launch function) is counted in the list
    yielded."""
    calls: list[int] = []
    real = getattr(module, entry)
    setattr(module, entry, lambda *args: calls.append(1) or real(*args))
    try:
        yield calls
    finally:
        setattr(module, entry, real)


def check_rows(case: str) -> None:
    """A chained loop of step kernels through the row kernels (the context-aware encoder's backward pass, two
    ATR cells a timestep; the GRU with the reset gate inside the product) equals the step loop and the CPU
    kernels: states and every gradient, padded, reversed."""
    from rnmt.cells.composite import TwoInputCell

    torch.set_default_dtype(torch.float64)
    torch.manual_seed(0)
    if case == "atr-two-input-rows":
        cell, width, name, entry = TwoInputCell(build_cell("atr", 5, 6), build_cell("atr", 6, 6)), 11, "atr", \
            "rows_forward"
    else:
        cell, width, name, entry = build_cell("gru", 5, 6, reset="before"), 5, "gru", "reset_before_forward"
    x = torch.randn(4, 7, width, requires_grad=True)
    h0 = torch.randn(4, 6, requires_grad=True)
    mask = torch.ones(4, 7, dtype=torch.bool)
    mask[1, 3:] = False
    mask[2, 1:] = False
    with counted(triton_cells.load(name), entry) as steps:
        with use_path("loop"):
            loop = outputs_and_grads(cell, x, mask, h0, reverse=True)
        with use_path("sequence"):
            seq = outputs_and_grads(cell, x, mask, h0, reverse=True)
            with triton_cells.force_on_cpu():
                kernels = outputs_and_grads(cell, x, mask, h0, reverse=True)
    assert len(steps) == (2 if isinstance(cell, TwoInputCell) else 1) * 7, "the forced path took no row kernels"
    assert_all_close(kernels, loop, "the step loop", torch.float64)
    assert_all_close(kernels, seq, "the CPU kernels", torch.float64)


def check_gated(dtype: torch.dtype) -> None:
    """DTMT's gated cells on their row kernels (one launch a cell a step each way) equal the step loop and the
    CPU step kernels: states and every gradient (the layer norms' γ and β included), padded, reversed, with
    candidate dropout drawing the same noise as the step loop's under one seed; the path is labelled Triton."""
    from rnmt.cells.composite import TransitionCell

    torch.set_default_dtype(dtype)
    torch.manual_seed(0)
    hidden = 40 if dtype == torch.float32 else 6          # float32: a row of 40 in a block of 64

    def block(bottom: str, depth: int, norm: bool, rate: float) -> torch.nn.Module:
        cells = [build_cell("tgru", 0, hidden, gate_norm=norm, candidate_dropout=rate) for _ in range(depth)]
        return TransitionCell(build_cell(bottom, 5, hidden, gate_norm=norm, candidate_dropout=rate), cells)

    cells = {"l-gru + 2 t-gru, norm, dropout": (block("lgru", 2, True, 0.3), 3),
             "lau + t-gru, gate biases": (block("lau", 1, False, 0.0), 2),
             "gru, norm, dropout": (build_cell("gru", 5, hidden, gate_norm=True, candidate_dropout=0.2), 1),
             "l-gru, gate biases, dropout": (build_cell("lgru", 5, hidden, gate_norm=False, candidate_dropout=0.1), 1),
             "lau, norm": (build_cell("lau", 5, hidden), 1)}
    if dtype == torch.float32:                             # the transition block: the L-GRU and T-GRU kinds
        cells = {k: v for k, v in cells.items() if k.startswith("l-gru + 2")}
    module = triton_cells.load("gated")
    x = torch.randn(4, 7, 5, requires_grad=True)
    h0 = torch.randn(4, hidden, requires_grad=True)
    mask = torch.ones(4, 7, dtype=torch.bool)
    mask[1, 3:] = False
    mask[2, 1:] = False
    for name, (cell, per_step) in cells.items():
        cell.train()
        for p in cell.parameters():                        # layer norms away from their initial γ = 1, β = 0
            p.data.add_(0.1 * torch.randn_like(p))
        results = {}
        with counted(module, "rows_forward") as launches:
            for path in ("loop", "sequence", "triton"):
                torch.manual_seed(1)
                with use_path("loop" if path == "loop" else "sequence"), \
                        (triton_cells.force_on_cpu() if path == "triton" else contextlib.nullcontext()):
                    results[path] = outputs_and_grads(cell, x, mask, h0, reverse=True)
        assert len(launches) == per_step * 7, (name, len(launches))
        with triton_cells.force_on_cpu():
            states = cell.sequence(cell.project_inputs(x), mask, h0)
        assert triton_cells.kind(states) == "Triton", name
        assert_all_close(results["triton"], results["loop"], f"the step loop ({name})", dtype)
        assert_all_close(results["triton"], results["sequence"], f"the CPU kernels ({name})", dtype)


def sequence_under(cell: torch.nn.Module, p: torch.Tensor, mask: torch.Tensor, h0: torch.Tensor,
                   low: torch.dtype | None) -> tuple[list[torch.Tensor], list[bool], bool]:
    """The cell's whole-sequence path on the Triton kernels inside `products_in(low)`: its states and the
    gradients of p and the recurrent weights, whether each product multiplied bfloat16 values, and whether
    the states came from a Triton autograd function."""
    from test_narrow_products import Products

    weights = [w for n, w in cell.named_parameters() if "_ih" not in n]
    with triton_cells.force_on_cpu(), matmul.products_in(low), Products() as seen:
        out = cell.sequence(p, mask, h0)
        grads = torch.autograd.grad((out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum(), [p, *weights])
    return [out, *grads], seen.narrow, triton_cells.uses_triton(out)


def check_narrow_products() -> None:
    """Under `products_in(bfloat16)`, as cells/base.py runs a recurrence under autocast, the Triton paths whose
    recurrent products stay torch products a step (ATR's and the GRU's per-step kernels; the row kernels in the
    chained loop: two ATR cells a step, the reset-before GRU, DTMT's L-GRU and T-GRU) multiply bfloat16 values
    only, forward and backward, and stay within bfloat16's tolerance of their float32 results."""
    from rnmt.cells.composite import TransitionCell, TwoInputCell

    torch.manual_seed(0)
    cells = {"atr": build_cell("atr", 5, 16), "gru": build_cell("gru", 5, 16),
             "gru-reset-before": build_cell("gru", 5, 16, reset="before"),
             "atr-two-input": TwoInputCell(build_cell("atr", 5, 16), build_cell("atr", 6, 16)),
             "dtmt-block": TransitionCell(build_cell("lgru", 5, 16), [build_cell("tgru", 0, 16)])}
    mask = torch.ones(4, 7, dtype=torch.bool)
    mask[1, 3:] = False
    h0 = torch.randn(4, 16)
    for name, cell in cells.items():
        p = cell.project_inputs(torch.randn(4, 7, cell.input_size)).detach().requires_grad_()
        (narrow, seen, triton), (full, seen_full, _) = (sequence_under(cell, p, mask, h0, low)
                                                        for low in (torch.bfloat16, None))
        assert triton, name               # a Triton function, or the chained loop on its row kernels
        assert len(seen) >= 14 and all(seen), (name, seen)
        assert not any(seen_full), name
        errors = [float((a - b).norm() / b.norm()) for a, b in zip(narrow, full, strict=True)]
        assert 1e-4 < max(errors) < 2e-2, (name, errors)


def check_srnmt_units() -> None:
    """The SR-NMT encoder (both directions) and decoder units; the decoder hands its recurrence a
    non-contiguous slice of its projection, which the kernels read through its strides."""
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(0)
    enc, dec = EncoderUnit(6, 6, dropout=0.0), DecoderUnit(6, 6, dropout=0.0)
    x, y = torch.randn(2, 5, 6, requires_grad=True), torch.randn(2, 4, 6, requires_grad=True)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    s0 = torch.randn(2, 6)

    def go() -> list[torch.Tensor]:
        h = enc(x, mask)
        s, last = dec(y, s0, dec.attention.keys(h), h, mask)
        loss = s.pow(2).sum() + last.sum()
        return [s, last, *torch.autograd.grad(loss, [x, y, *enc.parameters(), *dec.parameters()])]

    loop, seq, kernels = three_paths(go)
    assert_all_close(kernels, loop, "the step loop", torch.float64)
    assert_all_close(kernels, seq, "the CPU sequence path", torch.float64)


def check_dispatch() -> None:
    """Forced: the Triton path for every cell (the L-GRU: its chained loop on the gated cells' row kernels);
    RNMT_TRITON=0 or not forced: today's path; the benchmark's `path` column says which."""
    from rnmt.bench.cells import sequence_path

    for name in (*NAMES, "lgru"):
        cell = build_cell(name, 6, 6)
        x = torch.zeros(2, 3, cell.input_size)
        with triton_cells.force_on_cpu():
            assert sequence_path(cell, x) == "triton", name
            if name == "atr":
                os.environ["RNMT_ATR_PERSISTENT"] = "1"
                try:
                    assert sequence_path(cell, x) == "triton, persistent", name
                finally:
                    del os.environ["RNMT_ATR_PERSISTENT"]
            os.environ["RNMT_TRITON"] = "0"
            try:
                assert sequence_path(cell, x) == "sequence", name
            finally:
                del os.environ["RNMT_TRITON"]
        assert sequence_path(cell, x) == "sequence", name


def check_search_steps() -> None:
    """Beam search's decoder steps on CUDA run their cells' step kernels, on their row kernels where they have
    them (cells/base.py `fast_step`), and their attention as the Triton attention kernels (models/attention.py):
    forced, every recurrent architecture's steps from one encoding give the torch steps' log-probabilities and
    states (float64, 1e-10), each cell a step once through `kernel_step`, RNNSearch+ATR's two cells and DTMT#1's
    two transition blocks (an L-GRU and a T-GRU each) launch their row kernels (two and four a step), and the
    attention runs as the kernels once a step where its widths fit them (one head; DTMT's 4 heads of 16 and 32)."""
    from rnmt.cells import base
    from rnmt.cells.triton import atr as atr_rows
    from rnmt.cells.triton import gated
    from rnmt.data.batching import pad
    from rnmt.models import build_model
    from rnmt.models.triton import attention
    from test_archs import ARCHS, SRC, TINY, source

    counted: list[str] = []
    entries = {"kernel_step": (base, "kernel_step"), "atr rows": (atr_rows, "rows_forward"),
               "gated rows": (gated, "rows_forward"), "attention": (attention, "forward")}
    reals = {what: getattr(module, name) for what, (module, name) in entries.items()}
    heads = {"dtmt-4-heads": ("dtmt", {"cell": "lgru", "depth": 1, "heads": 4, "hidden": 64, "rnn_dropout": 0.0})}
    try:
        for what, (module, name) in entries.items():
            setattr(module, name, lambda *a, real=reals[what], what=what: counted.append(what) or real(*a))
        for key, (arch, settings) in {**ARCHS, **heads}.items():
            torch.manual_seed(0)
            model = build_model(arch, 20, 20, **{**TINY, **settings}).double().eval()
            src, mask = source(key) if key in ARCHS else pad(SRC, eos=True)
            runs = []
            for forced in (False, True):
                counted.clear()
                with torch.no_grad():
                    st = model.start(src, mask)
                    with triton_cells.force_on_cpu() if forced else contextlib.nullcontext():
                        logps = []
                        for token in (1, 7, 9):
                            logp, st = model.step(torch.full((src.size(0),), token), st)
                            logps.append(logp)
                runs.append(([*logps, st["state"] if "state" in st else st["states"]], list(counted)))
            (torch_steps, none), (kernel_steps, calls) = runs
            assert not none, (key, none)
            for a, b in zip(kernel_steps, torch_steps, strict=True):
                torch.testing.assert_close(a, b, **TOLERANCE[torch.float64], msg=key)
            cells = {"gnmt-atr-3": 3, "gnmt-atr-8-tanh": 8, "deep-rnnsearch": 5}.get(key, 2)    # decoder layers
            assert calls.count("kernel_step") == 3 * cells, (key, calls)
            rows = {"rnnsearch-atr": ("atr rows", 2), "dtmt1-lgru": ("gated rows", 4)}.get(key)
            if rows:
                assert calls.count(rows[0]) == 3 * rows[1], (key, calls)
            # DTMT's 2 heads of widths 6 and 12 at TINY's hidden 12 leave the kernels' blocks: torch's operations
            fits = key == "dtmt-4-heads" or not key.startswith(("dtmt", "shallow"))
            assert calls.count("attention") == (3 if fits else 0), (key, calls)
    finally:
        for what, (module, name) in entries.items():
            setattr(module, name, reals[what])


def check_search_select() -> None:
    """decode/select.py's step as the Triton kernel gives torch's operations' state, rows and host part
    exactly, over sentences that end hypotheses, reach their limit without one, become done or were done, at
    a first step (one live hypothesis) and at widths 1 to 6; only a done sentence's rows, whose candidates are
    all -inf, may hold other ones. A forced beam search (the kernel and the cells' step kernels) finds torch's
    hypotheses and scores."""
    from rnmt.data.batching import pad
    from rnmt.data.vocab import EOS_ID
    from rnmt.decode import select as search
    from rnmt.decode.beam import beam_search
    from rnmt.models import build_model

    def state(A: int, W: int, seed: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        st = search.new_state(A, W, 20, torch.device("cpu"))
        st["scores"].copy_(-torch.rand(A, W, generator=g) * 5)
        st["scores"][0, 1:] = float("-inf")                          # a first step: one live hypothesis
        st["limit"].copy_(torch.randint(3, 8, (A,), generator=g))
        st["n_finished"].copy_(torch.randint(0, W + 1, (A,), generator=g))
        st["best_finished"].copy_(-torch.rand(A, generator=g, dtype=torch.float64) * 3)
        st["best_finished"][1] = float("-inf")
        st["done"].copy_(torch.rand(A, generator=g) < 0.2)
        st["scores"][st["done"]] = float("-inf")
        st["length"].fill_(int(torch.randint(3, 8, (1,), generator=g)))
        st["denom"].fill_(float(st["length"]) ** 0.6)
        return st

    seen = {"ends": 0, "newly done": 0, "no end": 0}
    for seed in range(40):
        A, W, V = 5, (1, 2, 4, 6)[seed % 4], 30
        g = torch.Generator().manual_seed(1000 + seed)
        logp = torch.log_softmax(torch.randn(A * W, V, generator=g) * 3, -1)
        logp[:, EOS_ID] += 2.0 * (seed % 3)                          # fewer or more hypotheses end
        outs = []
        for forced in (False, True):
            st = state(A, W, seed)
            with triton_cells.force_on_cpu() if forced else contextlib.nullcontext():
                outs.append((*search.select(logp, st, W), st))
        (flat, token, host, st), (k_flat, k_token, k_host, k_st) = outs
        rows = (~state(A, W, seed)["done"]).repeat_interleave(W)
        assert torch.equal(k_flat[rows], flat[rows]) and torch.equal(k_token[rows], token[rows]), seed
        AW = A * W
        assert torch.equal(k_host[torch.cat([torch.ones(3 * AW + 3 * A, dtype=torch.bool), rows, rows])],
                           host[torch.cat([torch.ones(3 * AW + 3 * A, dtype=torch.bool), rows, rows])]), seed
        for key in st:
            assert torch.equal(k_st[key], st[key]), (seed, key)
        seen["ends"] += int(host[:AW].sum())
        seen["no end"] += int(host[3 * AW:3 * AW + A].sum())
        seen["newly done"] += int((st["done"] & ~state(A, W, seed)["done"]).sum())
    assert min(seen.values()) >= 10, seen
    torch.manual_seed(0)
    model = build_model("rnnsearch", 20, 20, emb=8, hidden=12, dropout=0.0, cell="atr").eval()
    src, mask = pad([[5, 6, 7, 8], [9, 10, 11], [12, 13, 5, 6, 7]], eos=True)
    for beam in (1, 4):
        found = []
        for forced in (False, True):
            with triton_cells.force_on_cpu() if forced else contextlib.nullcontext():
                found.append(beam_search(model, src, mask, beam, (mask.sum(1) * 2 + 3).long(), cuda_graphs=False))
        assert [h for h, _ in found[1]] == [h for h, _ in found[0]], beam
        for (_, a), (_, b) in zip(*found, strict=True):
            assert abs(float(a) - float(b)) < 1e-5, beam


def main() -> None:
    """Every case; prints {case: None (passed) or the failure} as one JSON line."""
    torch.set_num_threads(1)
    results: dict[str, str | None] = {}
    for case in CASES:
        torch.set_default_dtype(torch.float32)
        try:
            if case == "dispatch":
                check_dispatch()
            elif case.endswith("-gaps"):
                check_gaps(case.split("-")[0])
            elif case == "srnmt-units-float64":
                check_srnmt_units()
            elif case == "atr-persistent-tiles":
                check_persistent_tiles()
            elif case == "atr-persistent-chosen":
                check_persistent_chosen()
            elif case == "atr-persistent-narrow-products":
                check_persistent_narrow_products()
            elif case == "narrow-products":
                check_narrow_products()
            elif case == "search-steps":
                check_search_steps()
            elif case == "search-select":
                check_search_select()
            elif case.startswith("gated-"):
                check_gated(torch.float32 if case.endswith("32") else torch.float64)
            elif case.endswith("-rows"):
                check_rows(case)
            elif "-persistent-" in case:
                os.environ["RNMT_ATR_PERSISTENT"] = "1"
                try:
                    check_cell(case)
                finally:
                    del os.environ["RNMT_ATR_PERSISTENT"]
            else:
                check_cell(case)
            results[case] = None
        except Exception as e:                            # reported by the test of that case
            results[case] = f"{type(e).__name__}: {e}"[:4000]
    print(json.dumps(results))


# ---------------------------------------------------------------- pytest, in the ordinary process

@pytest.fixture(scope="module")
def interpreted() -> dict[str, str | None]:
    env = {k: v for k, v in os.environ.items() if k not in ("RNMT_TRITON", "RNMT_ATR_PERSISTENT")}
    src = str(Path(rnmt.__file__).resolve().parents[1])          # the rnmt this process imported
    env.update(TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join([src, env.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@needs_triton
@pytest.mark.parametrize("case", CASES)
def test_triton_kernels_match_the_cpu_paths(interpreted: dict[str, str | None], case: str) -> None:
    assert case in interpreted, f"{case} did not run"
    assert interpreted[case] is None, interpreted[case]


@needs_triton
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1", reason="compiles the kernels, not interpreted ones")
def test_kernels_compile_for_cuda(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The interpreter runs Python, so it misses what only the compiler rejects: every kernel is compiled
    here to a CUDA binary for sm_90 (triton's own ptxas, no GPU needed) in the variants launches produce:
    float32 and float64, with and without a mask, and with the int arguments 1 (triton makes those constants)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")              # the default; unset, triton warns
    assert set(NAMES) >= {"atr", "gru", "sru", "srnmt"}
    kernels = [(fn, module.BLOCK) for module in map(triton_cells.load, NAMES) for fn in module.KERNELS]
    for fn, block in kernels:
        for dtype, has_mask, ones in (("fp32", True, False), ("fp64", False, False), ("fp32", True, True)):
            signature: dict[str, str] = {}
            constants: dict[str, object] = {k: v for k, v in (("HAS_MASK", has_mask), ("BLOCK", block))
                                            if k in fn.arg_names}
            for arg in fn.arg_names:
                if arg.endswith("_ptr"):
                    signature[arg] = f"*{dtype}"
                elif arg in constants or (ones and arg in ("T", "N", "B", "H")):
                    signature[arg] = "constexpr"
                    constants.setdefault(arg, 1)
                else:
                    signature[arg] = "i32"
            compiled = triton.compile(ASTSource(fn, signature, constants), target=GPUTarget("cuda", 90, 32),
                                      options={"num_warps": 4})
            assert compiled.asm["cubin"], (fn.__name__, dtype, has_mask, ones)


@needs_triton
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1", reason="compiles the kernels, not interpreted ones")
def test_atrs_persistent_kernels_compile_with_their_barrier(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """ATR's persistent kernels compile for sm_90 in float32 at the tiles a launch picks at the ATR paper's
    sizes on an H100 (batch 80, hidden 1000: 64 rows x 16 units, and the squarer tiles that read fewer bytes a
    step, 16 x 64 with W_h in bfloat16, 32 x 32 in float32), and keep the barrier between their steps:
    a releasing add and acquiring reads of the counter at GPU scope (a barrier compiled away would let a
    program read states the others have not written yet). With W_h in bfloat16 (their form under bfloat16
    autocast) the products are tensor-core instructions on bfloat16 operands; in float32, IEEE float32 (no
    tensor-core product, which would round to TF32). Float64 runs through the interpreter only."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
    atr = triton_cells.load("atr")
    for fn in atr.PERSISTENT:
        for dtype, weight, has_mask, (block_b, block_n) in (("fp32", "fp32", True, (64, 16)),
                                                            ("fp32", "bf16", True, (64, 16)),
                                                            ("fp32", "bf16", True, (16, 64)),      # fewer reads,
                                                            ("fp32", "fp32", True, (32, 32))):     # the squarer tiles
            constants = {"HAS_MASK": has_mask, "SYNC": True, "BLOCK_B": block_b, "BLOCK_N": block_n, "BLOCK_K": 32}
            pointers = {"sync_ptr": "*i32", "w_ptr": f"*{weight}"}
            signature = {arg: pointers.get(arg, f"*{dtype}") if arg.endswith("_ptr")
                         else "constexpr" if arg in constants else "i32" for arg in fn.arg_names}
            compiled = triton.compile(ASTSource(fn, signature, constants), target=GPUTarget("cuda", 90, 32),
                                      options={"num_warps": 4})
            ptx = compiled.asm["ptx"]
            assert compiled.asm["cubin"], (fn.__name__, dtype)
            assert "gpu.release" in ptx and "gpu.acquire" in ptx, (fn.__name__, dtype, "no barrier")
            tensor_cores = [line for line in ptx.splitlines() if "mma" in line and "bf16" in line]
            assert bool(tensor_cores) == (weight == "bf16"), (fn.__name__, weight, tensor_cores[:2])


@needs_triton
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1", reason="compiles the kernels, not interpreted ones")
def test_gated_row_kernels_compile_for_cuda(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """DTMT's gated cells' row kernels compile for sm_90 for each cell they serve (the T-GRU without an input,
    the GRU, L-GRU and LAU with one), with layer-normalised gates or gate biases, with and without dropout, at
    DTMT's hidden 1024 (one block of 1024 units a row) in float32, and the L-GRU in float64: the variants
    launches produce, which the interpreter, running Python, does not compile."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
    gated = triton_cells.load("gated")
    for kind, k, has_p, norm, noise, dtype in (("tgru", 2, False, True, True, "fp32"),
                                               ("gru", 2, True, True, False, "fp32"),
                                               ("lgru", 3, True, True, True, "fp32"),
                                               ("lau", 3, True, False, False, "fp32"),
                                               ("lgru", 3, True, True, True, "fp64")):
        constants = {"KIND": gated.KINDS[kind], "K": k, "HAS_P": has_p, "NORM": norm, "HAS_NOISE": noise,
                     "BLOCK": 1024}
        for fn in gated.KERNELS:
            signature = {arg: f"*{dtype}" if arg.endswith("_ptr") else "constexpr" if arg in constants
                         else "fp32" if arg == "eps" else "i32" for arg in fn.arg_names}
            compiled = triton.compile(ASTSource(fn, signature, constants), target=GPUTarget("cuda", 90, 32),
                                      options={"num_warps": 4})
            assert compiled.asm["cubin"], (fn.__name__, kind, dtype)


@needs_triton
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1", reason="compiles the kernels, not interpreted ones")
def test_the_search_select_kernel_compiles_for_cuda(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Beam search's bookkeeping kernel (decode/triton/select.py) compiles for sm_90 with the search state's
    dtypes (float64 normalised scores, int64 counts and limits, bool done), at beam 1 and 10."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from rnmt.decode.triton import select as triton_select

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
    pointers = {"top": "fp32", "idx": "i64", "best": "fp64", "n_fin": "i64", "done": "i1", "limit": "i64",
                "length": "i64", "denom": "fp64", "scores": "fp32", "flat": "i64", "token": "i64", "host": "fp32"}
    fn = triton_select.search_select
    for block in (2, 32):
        signature = {arg: f"*{pointers[arg[:-4]]}" if arg.endswith("_ptr") else "constexpr" if arg == "BLOCK"
                     else "i32" for arg in fn.arg_names}
        compiled = triton.compile(ASTSource(fn, signature, {"BLOCK": block}), target=GPUTarget("cuda", 90, 32),
                                  options={"num_warps": 4})
        assert compiled.asm["cubin"], block


def takes_triton(cell: torch.nn.Module) -> bool:
    """Whether the cell's whole-sequence path (on a small CPU input) went through the Triton kernels."""
    x = torch.randn(2, 3, 6)
    return triton_cells.uses_triton(cell.sequence(cell.project_inputs(x), None, torch.zeros(2, cell.state_size)))


@pytest.mark.parametrize("name", NAMES)
def test_cpu_tensors_and_rnmt_triton_0_take_todays_path(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cell = build_cell(name, 6, 6)
    assert triton_cells.triton_path(torch.zeros(1), name) is None
    assert not takes_triton(cell)                                    # CPU, not forced
    monkeypatch.setenv("RNMT_TRITON", "0")
    with triton_cells.force_on_cpu():
        assert triton_cells.triton_path(torch.zeros(1), name) is None
        assert not takes_triton(cell)


def test_without_triton_the_kernels_report_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "triton", None)                   # `import triton` raises ImportError
    for module in [m for m in sys.modules if m.startswith("rnmt.cells.triton.")]:     # every kernel file
        monkeypatch.delitem(sys.modules, module)
    triton_cells.imported.cache_clear()                                # load() imports once; again here
    try:
        assert not triton_cells.available()
        with triton_cells.force_on_cpu():
            assert all(triton_cells.triton_path(torch.zeros(1), name) is None for name in (*NAMES, "gated"))
            for name in (*NAMES, "lgru"):
                assert not takes_triton(build_cell(name, 6, 6)), name
    finally:
        triton_cells.imported.cache_clear()                            # later tests import the real one


if __name__ == "__main__":
    main()
