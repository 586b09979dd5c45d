"""Narrow products (rnmt.machine.matmul `narrow`): under autocast the recurrences that run in float32 (the cells'
whole-sequence paths, the fused RNNSearch decoder) take their products' operands in autocast's dtype, forward
and backward, as autocast's own products do, while states, gates, attention and every addend stay float32.

The reference is the step loop in float64 whose products over the same weights take operands rounded to
bfloat16 (forward, and both products of their backward), everything else exact: the narrow paths must be as
close to it as float32 is to float64, and visibly further without the rounding (so the test sees whether the
rounding happened, forward and backward)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from rnmt.cells import build_cell
from rnmt.cells.base import _whole, use_path
from rnmt.cells.composite import TransitionCell, TwoInputCell
from rnmt.machine import matmul
from rnmt.models import build_model, decoder_sequence

LOW = torch.bfloat16


def rounded(x: torch.Tensor) -> torch.Tensor:
    return x.to(LOW).to(x.dtype)


class RoundedLinear(torch.autograd.Function):
    """y = r(x) r(W)ᵀ + b; ∂x = r(∂y) r(W), ∂W = r(∂y)ᵀ r(x), ∂b = Σ ∂y: autocast's products, exact otherwise."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        ctx.has_bias = b is not None
        y = rounded(x) @ rounded(w).T
        return y if b is None else y + b

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, w = ctx.saved_tensors
        rows, xs = dy.reshape(-1, dy.size(-1)), x.reshape(-1, x.size(-1))
        return (rounded(dy) @ rounded(w), rounded(rows).T @ rounded(xs),
                rows.sum(0) if ctx.has_bias else None)


class RoundedProducts(TorchFunctionMode):
    """Within the block, F.linear over one of `weights` is `RoundedLinear`."""

    def __init__(self, weights: list[torch.Tensor]) -> None:
        super().__init__()
        self.ids = {id(w) for w in weights}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear and id(args[1]) in self.ids:
            bias = args[2] if len(args) > 2 else kwargs.get("bias")
            return RoundedLinear.apply(args[0], args[1], bias)
        return func(*args, **kwargs)


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.detach().double() - b.detach().double()).norm() / b.detach().double().norm())


def test_narrow_products_round_both_operands_and_nothing_else() -> None:
    torch.manual_seed(0)
    a, w, c = torch.randn(5, 70), torch.randn(30, 70), torch.randn(5, 30)
    bias = torch.randn(30)
    exact = rounded(a).double() @ rounded(w).double().T
    with matmul.narrow(LOW, [w]):
        got_mm, got_addmm = matmul.mm(a, w.t()), matmul.addmm(c, a, w.t())
        got_bias = matmul.addmm(bias, a, w.t())
        wide = matmul.mm(a.double(), w.double().t())            # float64 is narrowed too (bfloat16 is narrower)
    assert got_mm.dtype == got_addmm.dtype == torch.float32
    assert relative(got_mm, exact) < 1e-6 and relative(got_addmm, exact + c.double()) < 1e-6
    assert relative(got_bias, exact + bias.double()) < 1e-6      # the addend is added in float32, not rounded
    assert relative(wide, exact) < 1e-14
    assert relative(matmul.mm(a, w.t()), exact) > 1e-3           # outside the block: full precision


def test_a_kept_weight_changed_in_the_block_is_rounded_again() -> None:
    torch.manual_seed(0)
    a, w = torch.randn(4, 8), torch.randn(6, 8)
    with matmul.narrow(LOW, [w]):
        before = matmul.mm(a, w.t())
        w.mul_(3)                                                   # an in-place change bumps its version
        after = matmul.mm(a, w.t())
    assert relative(after, rounded(a) @ rounded(w).T) < 1e-6 and relative(after, 3 * before) > 1e-4


@pytest.mark.parametrize("route", ["blas", "onednn"])
@pytest.mark.parametrize("dtype", [None, LOW], ids=["full", "narrow"])
def test_products_write_into_a_slice_of_wider_rows(dtype: torch.dtype | None, route: str) -> None:
    """`out`: the product (and c + product) written into a step's slice of a [B, T, N] buffer, the same values
    as returned without it, the other steps untouched (the fused decoder writes W_c's product there)."""
    if route == "onednn" and not matmul.available():
        pytest.skip("this torch build has no oneDNN (mkldnn)")
    torch.manual_seed(0)
    a, w, bias, c = torch.randn(5, 64), torch.randn(40, 64), torch.randn(40), torch.randn(5, 40)
    with matmul.backend(route), matmul.narrow(dtype, [w]):
        for product in (lambda **o: matmul.mm(a, w.t(), **o), lambda **o: matmul.addmm(bias, a, w.t(), **o),
                        lambda **o: matmul.addmm(c, a, w.t(), **o)):
            buffer = torch.zeros(5, 3, 40)
            got = product(out=buffer[:, 1])
            assert torch.equal(buffer[:, 1], product()) and torch.equal(got, buffer[:, 1])
            assert not buffer[:, 0].any() and not buffer[:, 2].any()


def test_the_weights_named_are_rounded_once_for_the_block() -> None:
    """A named weight (and its transpose) is rounded on entry to the block, not again at each product; other
    operands are rounded at each product."""
    torch.manual_seed(0)
    a, w = torch.randn(4, 8), torch.randn(6, 8)

    class Casts(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.shapes: list[tuple[int, ...]] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if str(func.overloadpacket) == "aten._to_copy" and (kwargs or {}).get("dtype") == LOW:
                self.shapes.append(tuple(args[0].shape))
            return func(*args, **(kwargs or {}))

    with matmul.narrow(LOW, [w]), Casts() as casts:
        for _ in range(3):
            matmul.mm(a, w.t())
            matmul.mm(w, a.t())
    assert casts.shapes == [(4, 8), (8, 4)] * 3, casts.shapes            # a and aᵀ only


def test_no_dtype_or_a_dtype_no_narrower_leaves_products_as_they_are() -> None:
    torch.manual_seed(0)
    a, w = torch.randn(4, 8), torch.randn(6, 8)
    for dtype in (None, torch.float32):
        with matmul.narrow(dtype, [w]):
            assert torch.equal(matmul.mm(a, w.t()), a @ w.t())
    with matmul.narrow(LOW), matmul.products_in(LOW):
        assert matmul.products_dtype(a) == LOW and matmul.products_dtype(a.to(torch.float16)) == torch.float16


class Products(TorchDispatchMode):
    """Records every matrix product that runs inside the block, with whether both operands hold bfloat16
    values (a narrow product on the CPU multiplies them widened again): the products of the cells and of the
    decoder's W_q and W_c (aten's mm and addmm, oneDNN's linear) in `narrow`, the attention's (bmm, mv) in
    `attention`."""

    OPERANDS = {"aten.mm": (0, 1), "aten.addmm": (1, 2), "mkldnn._linear_pointwise": (0, 1), "aten.bmm": (0, 1),
                "aten.mv": (0, 1)}

    def __init__(self) -> None:
        super().__init__()
        self.narrow: list[bool] = []
        self.attention: list[bool] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        if name in self.OPERANDS:
            first, second = (0, 2) if str(func).endswith(".binary") else self.OPERANDS[name]
            rounded = all(torch.equal(x, x.to(LOW).to(x.dtype)) for x in (args[first], args[second]))
            (self.attention if name in ("aten.bmm", "aten.mv") else self.narrow).append(rounded)
        return func(*args, **(kwargs or {}))


def forward_and_backward(run: Any, inputs: list[torch.Tensor]) -> tuple[list[torch.Tensor], Products, Products]:
    """run() → outputs; their gradients for inputs, with the products of each pass recorded."""
    with Products() as forward:
        outs = run()
    with Products() as backward:
        grads = torch.autograd.grad(sum((o * torch.linspace(-1, 1, o.numel(), device=o.device).view_as(o)).sum()
                                        for o in outs), inputs)
    return [*outs, *grads], forward, backward


DECODERS = {
    "atr": ({"cell": "atr"}, 4),                                   # products a step: U, W_q, W_c, U
    "gru-reset-before": ({"cell": "gru", "cell_options": {"reset": "before"}}, 6),
    "gru": ({"cell": "gru"}, 4),
}


def decoder_inputs(key: str, T: int) -> tuple[Any, dict[str, torch.Tensor], torch.Tensor]:
    torch.manual_seed(0)
    model = build_model("rnnsearch", 20, 20, emb=6, hidden=24, dropout=0.0, **DECODERS[key][0])
    for w in model.parameters():
        torch.nn.init.uniform_(w, -0.2, 0.2)
    B, S = 3, 5
    inputs = {"p": torch.randn(B, T, model.dec_lower.project_inputs(torch.zeros(1, 6)).size(-1)),
              "state": torch.randn(B, 24), "memory": torch.randn(B, S, model.attention.memory_proj.in_features)}
    mask = torch.ones(B, S, dtype=torch.bool)
    mask[1, 3:] = False
    return model, inputs, mask


def decoder(model: Any, inputs: dict[str, torch.Tensor], mask: torch.Tensor, dtype: torch.dtype,
            how: str) -> tuple[list[torch.Tensor], Products, Products]:
    """The decoder's outputs and contexts and the gradients of inputs and of the weights its steps multiply by:
    the fused decoder under autocast ("narrow") or without ("full"), or the rounded-products step loop."""
    xs = {k: v.to(dtype).requires_grad_() for k, v in inputs.items()}
    xs["keys"] = model.attention.keys(xs["memory"]).detach().requires_grad_()
    weights = [model.attention.query_proj.weight, *model.dec_higher.parameters(),
               *(w for n, w in model.dec_lower.named_parameters() if "_ih" not in n)]
    state = {"state": xs["state"], "memory": xs["memory"], "keys": xs["keys"], "mask": mask}

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        if how == "loop":
            with RoundedProducts([w for w in weights if w.dim() == 2]):
                return model.decoder_loop(xs["p"], state)
        with torch.autocast(mask.device.type, LOW, enabled=how == "narrow"), use_path("sequence"):
            return decoder_sequence.decode(model, xs["p"], state)

    return forward_and_backward(run, [*xs.values(), *weights])


@pytest.mark.parametrize("key", sorted(DECODERS))
def test_every_product_of_the_fused_decoder_under_autocast_multiplies_bfloat16_values(key: str) -> None:
    """Under autocast every product of the fused decoder's steps (the cells', W_q's and W_c's), forward and
    backward, and its weight gradients after the loop, multiply operands rounded to bfloat16, and the
    attention's products none; without autocast none is rounded."""
    model, inputs, mask = decoder_inputs(key, T=5)
    per_step = DECODERS[key][1]
    _, forward, backward = decoder(model, inputs, mask, torch.float32, "narrow")
    assert all(forward.narrow) and len(forward.narrow) == 5 * per_step, forward.narrow
    assert all(backward.narrow) and len(backward.narrow) >= 5 * per_step, backward.narrow
    assert forward.attention and backward.attention and not any(forward.attention + backward.attention)
    _, forward, backward = decoder(model, inputs, mask, torch.float32, "full")
    assert not any(forward.narrow) and not any(backward.narrow)


def test_the_fused_atr_decoder_under_autocast_equals_the_rounded_products_loop() -> None:
    """ATR's fused decoder under autocast: outputs, contexts and every gradient equal the step loop in float64
    whose products take bfloat16 operands (forward and backward) to a small part of their distance from the
    unrounded fused decoder. (The two compute in float32 and float64, so an operand can round to the other
    side of a bfloat16 step; in a GRU's recurrence such a flip can grow to a third of the rounding itself.)"""
    model, inputs, mask = decoder_inputs("atr", T=4)
    want, _, _ = decoder(copy.deepcopy(model).double(), inputs, mask, torch.float64, "loop")
    narrow, _, _ = decoder(model, inputs, mask, torch.float32, "narrow")
    full, _, _ = decoder(model, inputs, mask, torch.float32, "full")
    errors = [relative(a, e) / relative(f, e) for a, f, e in zip(narrow, full, want, strict=True)]
    assert max(errors) < 0.05, errors


CHAINS = {
    "atr": (lambda: build_cell("atr", 12, 16), 1),                 # its own loop (cells/atr.py ATRSequence)
    "gru-reset-before": (lambda: build_cell("gru", 12, 16, reset="before"), 2),
    "atr-two-input": (lambda: TwoInputCell(build_cell("atr", 7, 16), build_cell("atr", 5, 16)), 2),
    "dtmt-transition": (lambda: TransitionCell(build_cell("lgru", 12, 16), [build_cell("tgru", 0, 16)]), 2),
}


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_every_product_of_a_whole_sequence_path_under_autocast_multiplies_bfloat16_values(name: str) -> None:
    """The cells' whole-sequence paths on the CPU under autocast (cells/base.py `_whole`): ATR's own loop and
    the chained step kernels (cells/kernel.py `StepSequence`: the reset-before GRU; two ATR cells a step, as
    the context-aware encoder chains them; DTMT's L-GRU and T-GRU): every product, forward and backward,
    multiplies bfloat16 values; without autocast none does."""
    torch.manual_seed(0)
    make, per_step = CHAINS[name]
    cell = make()
    B, T = 4, 6
    x = torch.randn(B, T, 12)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[2, 4:] = False
    recurrent = [w for n, w in cell.named_parameters() if "_ih" not in n]
    p = cell.project_inputs(x).detach()
    for amp in (True, False):
        def go(amp: bool = amp) -> tuple[torch.Tensor]:
            with torch.autocast("cpu", LOW, enabled=amp), use_path("sequence"):
                return (_whole(cell, p, mask, False, torch.zeros(B, 16))[0],)
        _, forward, backward = forward_and_backward(go, recurrent)
        assert len(forward.narrow) == T * per_step and len(backward.narrow) >= T * per_step
        assert all(forward.narrow + backward.narrow) if amp else not any(forward.narrow + backward.narrow)
