"""Addition-subtraction twin-gated recurrent unit (ATR; Zhang et al. 2018, eqs. 6-9).

    p = W_x x + b_x,   q = W_h h + b_h                     (eq. 6)
    i = σ(p + q)                                           (eq. 7)
    f = σ(p − q)                                           (eq. 8, as corrected in the reference README)
    h' = i ⊙ p + f ⊙ h                                     (eq. 9)

Options from the reference code: `state_tanh` gives h' = tanh(i ⊙ p + f ⊙ h); `twin="one_minus"`
uses i = 1 − f instead of eq. 7; `output_tanh` passes o = tanh(h) to the next layer and keeps h as the
state (the reference README's third "optional design"; the paper's RNNSearch reads its ATR states
through tanh too, eq. 12). A stack of ATR layers with residual connections (GNMT) needs it: eq. 9 does
not bound h, so each layer's output grows with its input and the stack's values grow layer by layer.
`bias=False` is eq. 6 as printed, p = W_x x and q = W_h h (the ATR tables' setting); the reference code
adds the biases. Two weight matrices (Table 1); p of all timesteps is one product.

Whole-sequence paths (default options): on CUDA the Triton kernels of cells/triton, a step at a time or
persistent (all steps in one launch), whichever was timed faster (`persistent_chosen`); on the CPU
`ATRSequence`, a time-major loop without an autograd graph whose backward computes per step only the
state gradient, and the weight gradient of all steps as one product, ∂L/∂W_h = Σ_t δ_tᵀ h_{t−1}.
Backward at step t from ∂h' (δ = ∂q):

    ∂a_i = ∂h' ⊙ p ⊙ σ'(a_i),   ∂a_f = ∂h' ⊙ h ⊙ σ'(a_f)            (a_i = p + q, a_f = p − q)
    ∂p = ∂h' ⊙ i + ∂a_i + ∂a_f,   δ = ∂a_i − ∂a_f,   ∂h = ∂h' ⊙ f + δ W_h

`ATRKernel` is the same step, batch-major, for composite cells that chain it with other cells'
kernels (cells/kernel.py; the context-aware encoder runs two ATR steps a timestep). The single cell
keeps its own loop, which measured faster at hidden 256 (benchmarks/README.md, "Fast paths in the cells").
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from rnmt.cells.base import MEASURE_STEPS, RecurrentCell, graphed, probing
from rnmt.cells.kernel import StepKernel, product_grad, row_sum, sigmoid_grad, time_major, weight_grads
from rnmt.cells.registry import register_cell
from rnmt.cells.triton import triton_path
from rnmt.io import InputError
from rnmt.machine import fastpath
from rnmt.machine.matmul import addmm, linear, mm, narrow, products_dtype

log = logging.getLogger(__name__)


@register_cell("atr")
class ATR(RecurrentCell):
    def __init__(self, input_size: int, hidden_size: int, state_tanh: bool = False, twin: str = "add",
                 bias: bool = True, output_tanh: bool = False) -> None:
        super().__init__(input_size, hidden_size)
        if twin not in ("add", "one_minus"):
            raise InputError(f"atr: twin must be 'add' (i = σ(p + q)) or 'one_minus' (i = 1 − f), not {twin!r}")
        self.state_tanh, self.twin, self.output_tanh = state_tanh, twin, output_tanh
        self.weight_ih = nn.Parameter(torch.empty(hidden_size, input_size))
        self.weight_hh = nn.Parameter(torch.empty(hidden_size, hidden_size))
        self.bias_ih = nn.Parameter(torch.empty(hidden_size)) if bias else None
        self.bias_hh = nn.Parameter(torch.empty(hidden_size)) if bias else None
        # the kernels take a bias: without one they add this constant zero (no parameter, no gradient kept)
        self.register_buffer("no_bias", None if bias else torch.zeros(hidden_size), persistent=False)
        for p in self.parameters():
            nn.init.uniform_(p, -0.08, 0.08)        # the reference LM code's init (zero biases gave NaNs)

    @property
    def projection_size(self) -> int:
        return self.hidden_size

    def project_inputs(self, x: Tensor) -> Tensor:
        return linear(x, self.weight_ih, self.bias_ih)

    def input_weights(self) -> tuple[Tensor, Tensor | None]:
        return self.weight_ih, self.bias_ih

    def output(self, state: Tensor) -> Tensor:
        return torch.tanh(state) if self.output_tanh else state

    def passes_state(self) -> bool:
        return not self.output_tanh

    def gates(self, p: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """(input gate, forget gate) for one step; also used by the gate-correlation analysis."""
        q = linear(state, self.weight_hh, self.bias_hh)
        f = torch.sigmoid(p - q)
        i = 1 - f if self.twin == "one_minus" else torch.sigmoid(p + q)
        return i, f

    def step(self, p: Tensor, state: Tensor) -> Tensor:
        i, f = self.gates(p, state)
        h = i * p + f * state
        return torch.tanh(h) if self.state_tanh else h

    def step_kernel(self) -> ATRKernel | None:
        """The step for composite cells' chained loops (`ATRKernel`, below); the default options only."""
        if self.state_tanh or self.twin != "add":
            return None
        return ATRKernel(self.weight_hh, self._recurrent_bias())

    def sequence(self, projected: Tensor, mask: Tensor | None, state: Tensor) -> Tensor | None:
        """Eqs. 6-9 over all steps in one loop (`ATRSequence`, below; Triton kernels on CUDA, cells/triton);
        the default options only."""
        if self.state_tanh or self.twin != "add":
            return None
        p, m = time_major(projected, mask)
        kernels, bias = triton_path(p, "atr"), self._recurrent_bias()
        if kernels is None:
            return ATRSequence.apply(p, m, state.contiguous(), self.weight_hh, bias).transpose(0, 1)
        persistent = persistent_chosen(kernels, p, m is not None, self.weight_hh, bias)
        return kernels.TritonATR.apply(p, m, state.contiguous(), self.weight_hh, bias, persistent).transpose(0, 1)

    def _recurrent_bias(self) -> Tensor:
        return self.bias_hh if self.bias_hh is not None else self.no_bias


_PERSISTENT: dict[tuple[Any, ...], bool | tuple[int, int]] = fastpath.lookup({})


def persistent_chosen(kernels: Any, p: Tensor, masked: bool, weight: Tensor, bias: Tensor) -> bool | tuple[int, int]:
    """Whether ATR's Triton recurrence over p [T, B, H] runs as its persistent kernels (cells/triton/atr.py), and
    in which tiles: as RNMT_ATR_PERSISTENT forces, else whichever way was fastest, timed once a run like every
    fast path (rnmt.machine.fastpath: replays where the work runs in a CUDA graph) over MEASURE_STEPS steps at
    p's batch (to a power of two) and width, with the backward where autograd records and in the products'
    dtype: the per-step kernels, the persistent ones in their most programs' tiles, and in the tiles that read
    the fewest bytes a step where those differ (`fewer_reads_tile`). Per step where nothing is timed
    (RNMT_FASTPATH=default), where the persistent kernels' programs do not fit the GPU at once, and in work a
    CUDA graph will hold where no graph can hold them. → False, True or a (rows, units) tile, as
    `TritonATR` takes them."""
    T, B, H = p.shape
    forced = kernels.forced_persistent()
    if forced is not None:
        return forced
    if fastpath.mode() == "default" or probing():
        return False
    grad = torch.is_grad_enabled() and (p.requires_grad or weight.requires_grad or bias.requires_grad)
    products = products_dtype(p)
    key = (H, B.bit_length(), masked, grad, p.device, p.dtype, products, graphed(p.device))
    if key in _PERSISTENT:
        return _PERSISTENT[key]
    if kernels.persistent_launch(B, H, p.device) is None:
        _PERSISTENT[key] = False
    else:
        what = (f"ATR recurrence, hidden {H}, batch < {2 ** key[1]}{', masked' if masked else ''}, "
                f"{'forward+backward' if grad else 'forward'}, {p.device.type} {str(p.dtype).removeprefix('torch.')}"
                f", products in {str(products).removeprefix('torch.')}: per step or persistent kernels")
        with torch.random.fork_rng(devices=[p.device] if p.device.type == "cuda" else []):   # training's RNG
            x = torch.randn(MEASURE_STEPS, B, H, device=p.device, dtype=p.dtype, requires_grad=grad)
        m = x.new_ones(MEASURE_STEPS, B, 1) if masked else None
        h0, params = x.new_zeros(B, H), [w for w in (weight, bias) if w.requires_grad]

        def timed(way: bool | tuple[int, int]) -> Any:
            def fn() -> None:
                out = kernels.TritonATR.apply(x, m, h0, weight, bias, way)
                if grad:
                    torch.autograd.grad(out.sum(), [x, *params], allow_unused=True)
            return fn

        ways: dict[str, bool | tuple[int, int]] = {"per step": False, "persistent": True}
        tile = kernels.fewer_reads_tile(B, H, p.device, products.itemsize)
        if tile is not None:
            ways[f"persistent, {tile[0]} x {tile[1]} tiles"] = tile
        runs = {name: timed(way) for name, way in ways.items()}
        runs = {name: fn for name, fn in runs.items() if name == "per step" or _runs(name, fn)}
        persistent = runs.get("persistent")
        if persistent is None:
            _PERSISTENT[key] = False
        elif key[-1] and fastpath.as_replay("ATR's persistent kernels", persistent, p.device) is persistent:
            _PERSISTENT[key] = False        # no graph holds them here: a step holding them would run eagerly
        else:
            _PERSISTENT[key] = ways[fastpath.choose(what, runs, "per step", p.device, graphed=key[-1])]
    return _PERSISTENT[key]


def _runs(name: str, fn: Any) -> bool:
    """Whether a way ATR's recurrence could take runs here (once, eagerly: its kernels compile): a launch the
    driver refuses (a cooperative grid larger than the GPU holds at once, under MPS) or a kernel that does not
    compile leaves it out of the timing, with a warning, rather than ending the run."""
    try:
        fn()
        return True
    except Exception as e:          # noqa: BLE001 - any failure: the way is not offered, the others still are
        log.warning("ATR's recurrence could not run as '%s' here, so that way is not timed (%s)", name,
                    f"{type(e).__name__}: {e}".splitlines()[0][:200])
        return False


class ATRKernel(StepKernel):
    """ATR's step for cells/kernel.py's chained loop (batch-major); the equations above."""

    def __init__(self, weight: Tensor, bias: Tensor) -> None:
        """U = weight [H, H], b = bias [H]; the projection is p = W x + b_x (H)."""
        super().__init__([weight, bias], weight.size(0))
        self.weight, self.bias = weight, bias

    def begin(self, p: Tensor, h0: Tensor) -> None:
        B, T, H = h0.size(0), p.size(1), h0.size(1)
        self.wt = self.weight.t()
        self.gates = h0.new_empty(B, T, 2 * H)                          # i, f
        self.delta = h0.new_empty(B, T, H)                              # ∂q of every step
        self.rows = triton_path(h0, "atr")          # on CUDA a step's elementwise work is one Triton kernel

    def forward(self, t: int, p: Tensor, h: Tensor, out: Tensor) -> None:
        H = h.size(1)
        i, f = self.gates[:, t].split(H, 1)
        if self.rows is not None:
            self.rows.rows_forward(p, mm(h, self.wt), self.bias, h, i, f, out)
            return
        q = addmm(self.bias, h, self.wt)
        torch.sigmoid(torch.add(p, q, out=i), out=i)
        torch.sigmoid(torch.sub(p, q, out=f), out=f)
        torch.mul(i, p, out=out).addcmul_(f, h)

    def backward(self, t: int, p: Tensor, h: Tensor, g: Tensor, dp: Tensor) -> Tensor:
        H = h.size(1)
        gates = self.gates[:, t]
        i, f = gates.split(H, 1)
        if self.rows is not None:
            delta = self.delta[:, t]
            return addmm(self.rows.rows_backward(g, p, h, i, f, dp, delta), delta, self.weight)
        ds_i, ds_f = sigmoid_grad(gates).split(H, 1)
        d_i = g * p * ds_i
        d_f = g * h * ds_f
        torch.addcmul(d_i + d_f, g, i, out=dp)
        delta = torch.sub(d_i, d_f, out=self.delta[:, t])
        return mm(delta, self.weight).addcmul_(g, f)

    def grads(self, ins: Tensor, dp: Tensor) -> list[Tensor]:
        return [product_grad(self.delta, ins), row_sum(self.delta)]


def _carry(new: Tensor, h: Tensor, m: Tensor | None, out: Tensor) -> Tensor:
    """out ← m ⊙ new + (1 − m) ⊙ h (just new without a mask)."""
    if m is None:
        return out.copy_(new)
    return torch.lerp(h, new, m, out=out)


class ATRSequence(torch.autograd.Function):
    """The single cell's loop: time-major p [T, B, H], float mask m [T, B, 1] or None (padded steps carry
    the state, h' = m ⊙ new + (1 − m) ⊙ h), h0 [B, H], W_h, b_h → all states [T, B, H]."""

    @staticmethod
    def forward(ctx: Any, p: Tensor, m: Tensor | None, h0: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        T = p.size(0)
        hs, i_all, f_all = torch.empty_like(p), torch.empty_like(p), torch.empty_like(p)
        wt, h, low = weight.t(), h0, products_dtype(p)
        with narrow(low, [weight]):
            for t in range(T):
                q = addmm(bias, h, wt)
                i = torch.sigmoid(torch.add(p[t], q, out=i_all[t]), out=i_all[t])
                f = torch.sigmoid(torch.sub(p[t], q, out=f_all[t]), out=f_all[t])
                new = torch.addcmul(i * p[t], f, h)
                h = _carry(new, h, None if m is None else m[t], hs[t])
        ctx.low = low
        ctx.save_for_backward(p, m, h0, weight, hs, i_all, f_all)
        return hs

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        p, m, h0, weight, hs, i_all, f_all = ctx.saved_tensors
        grad = grad.contiguous()
        T = p.size(0)
        dp, dq = torch.empty_like(p), torch.empty_like(p)
        g = torch.zeros_like(h0)
        with narrow(ctx.low, [weight]):
            for t in range(T - 1, -1, -1):
                g = g + grad[t]
                h = hs[t - 1] if t else h0
                gn = g if m is None else g * m[t]
                i, f = i_all[t], f_all[t]
                gi, gf = gn * i, gn * f                              # gf: the state's direct path
                di = gi * (1 - i) * p[t]                             # ∂L/∂(p + q) through i
                df = gf * (1 - f) * h                                # ∂L/∂(p − q) through f
                torch.sub(di, df, out=dq[t])
                torch.add(gi + di, df, out=dp[t])
                carried = gf if m is None else torch.addcmul(gf, g, 1 - m[t])
                g = addmm(carried, dq[t], weight)
            dw, db = weight_grads(dq, hs, h0)
        return dp, None, g, dw, db
