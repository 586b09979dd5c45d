"""The matrix products of rnmt's own loops: float32 on the CPU through oneDNN or the BLAS, whichever measured
faster here, and under autocast with narrow operands.

torch hands a CPU float32 `F.linear`, `addmm` or `mm` to its BLAS (MKL's sgemm). oneDNN, which torch
bundles (it is behind `nn.LSTM` on the CPU and inductor's CPU linear layers), can be faster: on AMD CPUs
MKL takes its AVX2 code path even where the CPU has AVX-512, which oneDNN uses; on Intel CPUs the BLAS
can win. Which route is faster depends on the CPU and on the product's size (oneDNN's per-call overhead
loses on small ones), so it is measured (rnmt.machine.fastpath): once per machine, thread count and size class
(the number of multiply-adds to a power of two), on a product of the first shape met in that class.
The measurements behind the defaults are in benchmarks/README.md ("Matrix products on the CPU").

`linear`, `addmm` and `mm` are drop-ins for `F.linear`, `torch.addmm` and `torch.mm` that take the
oneDNN route where it applies (`linear`'s backward products too) and torch's own everywhere else
(CUDA, other dtypes, autocast, tensors on the meta device). A run and its resumed rerun on one machine
multiply the same way (the choices are kept per machine). `RNMT_MATMUL` chooses: `auto` (the default,
as above; with RNMT_FASTPATH=default, oneDNN from MIN_MACS multiply-adds up, without measuring),
`onednn` (every float32 CPU product) or `blas` (always torch's own); `backend()` does the same within a
block (FLOP counting needs `blas`: FlopCounterMode does not see oneDNN's ops).

Narrow products. The recurrences run in float32 with autocast off (cells/base.py `_whole`, the fused
decoder of models/decoder_sequence.py), which keeps a state carried through hundreds of steps at float32's
precision; their products need not be float32 too, which on a GPU are IEEE float32 on the FMA units where
autocast's own products (the step loop's) take bfloat16 on the tensor cores. `products_in(dtype)` says
what autocast's products would have taken (the caller's autocast dtype); `products_dtype(x)` reads it.
A recurrence's autograd function that has a narrow form reads it once in its forward and runs its forward
and its backward inside `narrow(dtype, weights)`: there `mm` and `addmm` round both operands to `dtype`
and give a float32 result, `addmm`'s c added in float32 (a gradient carried through the steps is never
rounded). On CUDA cuBLAS multiplies the rounded operands on the tensor cores into float32 (`out_dtype`,
torch 2.8 on; before it, as autocast's products, rounded to `dtype` and widened). On the CPU the rounded
operands are widened again and multiplied as ever: the GPU's numbers (but for the order of the sums) for
the CPU's tests, where most CPUs have no bfloat16 units to gain from. The weights named are rounded once
on entry, as they and their transposes are met again at every step; everything else once a product.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from rnmt.machine import fastpath
from rnmt.machine.switches import Switches, switch

MIN_MACS = 1 << 20                 # the default split where nothing is measured: smaller products stay with the BLAS
MODES = Switches.__dataclass_fields__["matmul"].metadata["choices"]


def _op() -> Any:
    try:
        return torch.ops.mkldnn._linear_pointwise if torch.backends.mkldnn.is_available() else None
    except (AttributeError, RuntimeError):          # a torch build without oneDNN
        return None


_LINEAR = _op()


ENV_MODE = switch("matmul")       # RNMT_MATMUL, read once at import
_MODE: ContextVar[str] = ContextVar("rnmt_matmul", default=ENV_MODE)
_PRODUCTS: ContextVar[torch.dtype | None] = ContextVar("rnmt_products", default=None)


@contextmanager
def products_in(dtype: torch.dtype | None) -> Iterator[None]:
    """Within the block, recurrences that have a narrow form take their products' operands in `dtype` (the
    caller's autocast dtype), accumulating in float32 (`narrow`, and ATR's persistent kernels in
    cells/triton/atr.py); None: in the tensors' own dtype."""
    token = _PRODUCTS.set(dtype)
    try:
        yield
    finally:
        _PRODUCTS.reset(token)


def _wider(x: Tensor, dtype: torch.dtype) -> bool:
    """Whether x is floating and wider than `dtype` (so rounding it to `dtype` loses digits)."""
    return x.is_floating_point() and torch.finfo(x.dtype).bits > torch.finfo(dtype).bits


def products_dtype(x: Tensor) -> torch.dtype:
    """The dtype the recurrent products over x's states take their operands in (`products_in`): the
    narrower of x's and the block's."""
    low = _PRODUCTS.get()
    return low if low is not None and _wider(x, low) else x.dtype


def _key(x: Tensor) -> tuple[Any, ...]:
    return x.device, x.data_ptr(), tuple(x.shape), x.stride()


class _Narrow:
    """The rounding of `narrow`'s block: its dtype and its weights' rounded copies, each found again by its
    address and layout (a transposed view of a weight included) while the weight is unchanged."""

    def __init__(self, dtype: torch.dtype, weights: Iterable[Tensor]) -> None:
        self.dtype = dtype
        self.kept: dict[tuple[Any, ...], tuple[Tensor, int, Tensor]] = {}
        for w in weights:
            if _wider(w, dtype):
                low = self.rounded(w.detach())
                for view, low_view in ((w, low), (w.t(), low.t())) if w.dim() == 2 else ((w, low),):
                    self.kept[_key(view)] = (w, w._version, low_view)

    def rounded(self, x: Tensor) -> Tensor:
        """x rounded to the block's dtype: in it on CUDA, widened again to x's elsewhere."""
        return x.to(self.dtype) if x.is_cuda else x.to(self.dtype).to(x.dtype)

    def of(self, x: Tensor) -> Tensor:
        """x rounded (`rounded`): the weight's copy where x is a kept weight (or its transpose), unchanged."""
        hit = self.kept.get(_key(x))
        if hit is not None and hit[0]._version == hit[1]:
            return hit[2]
        return self.rounded(x)


_NARROW: ContextVar[_Narrow | None] = ContextVar("rnmt_narrow", default=None)


@contextmanager
def narrow(dtype: torch.dtype | None, weights: Iterable[Tensor] = ()) -> Iterator[None]:
    """Within the block, `mm` and `addmm` over wider floating operands take them rounded to `dtype` and give
    their result in the operands' dtype; `weights` are rounded once here. None, or a dtype no narrower than
    the operands: products as they are."""
    token = _NARROW.set(_Narrow(dtype, weights) if dtype is not None else None)
    try:
        yield
    finally:
        _NARROW.reset(token)


def _narrowing(a: Tensor) -> _Narrow | None:
    n = _NARROW.get()
    return n if n is not None and _wider(a, n.dtype) else None


# torch multiplies float16 and bfloat16 into float32 on CUDA through cuBLAS (`torch.mm(a, b, out_dtype=...)`, the
# `aten::mm.dtype` overload, pytorch/pytorch#150812, in 2.8 on): read from the operator's schema, not from a
# trial product, so a CUDA graph captured before any eager product takes the form the eager steps take.
_WIDE_OUT = "dtype" in torch.ops.aten.mm.overloads()


def _wide_out(low: Tensor) -> bool:
    """Whether torch multiplies `low` (CUDA, float16 or bfloat16) into float32 directly here."""
    return _WIDE_OUT and low.is_cuda and low.dtype in (torch.float16, torch.bfloat16)


def _narrow_mm(n: _Narrow, a: Tensor, b: Tensor, out: Tensor | None) -> Tensor:
    """a @ b with both rounded to n's dtype, in a's dtype (into `out` where given)."""
    a_low, b_low = n.of(a), n.of(b)
    if not a.is_cuda:                           # the rounded operands, widened again: the usual route
        return _mm(a_low, b_low, out)
    if _wide_out(a_low) and (out is None or out.dtype == torch.float32):
        return torch.mm(a_low, b_low, out_dtype=torch.float32, **({} if out is None else {"out": out})).to(a.dtype)
    return _into(torch.mm(a_low, b_low).to(a.dtype), out)


def _into(x: Tensor, out: Tensor | None) -> Tensor:
    return x if out is None or x is out else out.copy_(x)


def available() -> bool:
    """Whether this torch build has oneDNN's linear op."""
    return _LINEAR is not None


def mode() -> str:
    """The route in force: 'auto', 'onednn' or 'blas' ('blas' where oneDNN is not available)."""
    return _MODE.get() if available() else "blas"


@contextmanager
def backend(name: str) -> Iterator[None]:
    """Within the block, products take route `name` ('auto', 'onednn' or 'blas')."""
    if name not in MODES:
        raise ValueError(f"unknown matmul backend {name!r}; valid: {', '.join(MODES)}")
    token = _MODE.set(name)
    try:
        yield
    finally:
        _MODE.reset(token)


def _onednn(a: Tensor, b: Tensor, M: int, K: int, N: int) -> bool:
    """Whether the product of a [M, K] (or [..., K]) and b (K by N) goes to oneDNN."""
    m = mode()
    if not (m != "blas" and a.dtype == torch.float32 and b.dtype == torch.float32 and a.device.type == "cpu"
            and b.device.type == "cpu" and not torch.is_autocast_enabled("cpu")):
        return False
    return m == "onednn" or (M * K * N > 0 and _measured(M, K, N))


_ROUTES: dict[tuple[int, int], bool] = fastpath.lookup({})     # (size class, threads) → oneDNN faster


def _measured(M: int, K: int, N: int) -> bool:
    """Whether oneDNN measured faster than the BLAS here for products of as many multiply-adds as M·K·N."""
    macs = M * K * N
    key = (macs.bit_length(), torch.get_num_threads())
    if key not in _ROUTES:
        if fastpath.mode() == "default":
            _ROUTES[key] = macs >= MIN_MACS
            return _ROUTES[key]
        with torch.random.fork_rng(devices=[]), torch.no_grad():      # the RNG stream stays as it was
            a, w = torch.randn(M, K), torch.randn(N, K)
            repeat = max(1, MIN_MACS // macs)           # time at least ~2^20 multiply-adds a run
            candidates = {"blas": lambda: [torch.mm(a, w.t()) for _ in range(repeat)],
                          "onednn": lambda: [_product(a, w) for _ in range(repeat)]}
            default = "onednn" if macs >= MIN_MACS else "blas"
            what = f"float32 product of {1 << (key[0] - 1)} to {(1 << key[0]) - 1} multiply-adds, cpu"
            _ROUTES[key] = fastpath.choose(what, candidates, default, torch.device("cpu"), reps=5) == "onednn"
    return _ROUTES[key]


def _dense(b: Tensor) -> Tensor:
    """b, copied to dense rows where it is a slice of wider ones (such as an LSTM's h in its state [h; c]):
    as oneDNN's weight operand such a b takes a slow path, three orders of magnitude slower, where the copy
    costs microseconds (benchmarks/README.md, "Matrix products on the CPU")."""
    return b if b.is_contiguous() or b.t().is_contiguous() else b.contiguous()


def _product(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """oneDNN's x [M, K] · weight [N, K]ᵀ (+ bias [N]); no autograd."""
    return _LINEAR(x, _dense(weight), bias, "none", [], "")


def mm(a: Tensor, b: Tensor, out: Tensor | None = None) -> Tensor:
    """a [M, K] @ b [K, N] (either may be a transposed view); no autograd. `out`: written there (a slice of wider
    rows too, where torch's product writes it in place of a copy after it)."""
    n = _narrowing(a)
    return _mm(a, b, out) if n is None else _narrow_mm(n, a, b, out)


def _mm(a: Tensor, b: Tensor, out: Tensor | None) -> Tensor:
    if _onednn(a, b, a.size(0), a.size(1), b.size(1)):
        return _into(_product(a, b.t()), out)
    return torch.mm(a, b) if out is None else torch.mm(a, b, out=out)


def addmm(c: Tensor | None, a: Tensor, b: Tensor, out: Tensor | None = None) -> Tensor:
    """c + a [M, K] @ b [K, N], c [N] (a bias) or [M, N], or None (`mm`: a layer without a bias); no autograd.
    `out` as `mm`'s."""
    if c is None:
        return mm(a, b, out)
    n = _narrowing(a)
    if n is not None:
        return _narrow_mm(n, a, b, out).add_(c)
    if _onednn(a, b, a.size(0), a.size(1), b.size(1)):
        if c.dim() == 1:
            return _into(_product(a, b.t(), c), out)
        return _into(_LINEAR.binary(a, c, _dense(b).t(), None, "add"), out)
    return torch.addmm(c, a, b) if out is None else torch.addmm(c, a, b, out=out)


class _Linear(torch.autograd.Function):
    """y = x Wᵀ + b over x [M, K] with every product (y, ∂x = ∂y W, ∂W = ∂yᵀ x) through `mm`."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _product(x, weight, bias)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad
        dx = mm(grad, weight) if need_x else None
        dw = mm(x.t(), grad).t() if need_w else None     # as (xᵀ ∂y)ᵀ, the faster order (benchmarks/README.md)
        db = grad.sum(0) if need_b and ctx.has_bias else None
        return dx, dw, db


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """`F.linear(x, weight, bias)` for x [..., K], weight [N, K], bias [N]."""
    K, N = weight.shape[1], weight.shape[0]
    M = x.numel() // K if K else 0
    if not _onednn(x, weight, M, K, N) or (bias is not None and bias.dtype != torch.float32) or M == 0:
        return F.linear(x, weight, bias)
    x2 = x.reshape(M, K)
    grad = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad
                                        or (bias is not None and bias.requires_grad))
    y = _Linear.apply(x2, weight, bias) if grad else _product(x2, weight, bias)
    return y.view(*x.shape[:-1], N)


class Linear(nn.Linear):
    """`nn.Linear` whose product goes through `linear` (same parameters and state dict)."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)
