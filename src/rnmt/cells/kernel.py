"""The engine of the cells' whole-sequence paths on the CPU: a recurrence run as a loop without an autograd
graph, differentiated by hand, for any cell whose file offers a `StepKernel` (its `step_kernel`) and for
composite cells made of such cells. The cells' own files hold their kernels' equations.

A kernel is one cell's step split for a backward through time without an autograd graph:

- `begin(p, h0)`: allocate the per-step buffers for p [B, T, P] (its share of the projection);
- `forward(t, p_t, h, out)`: the new state into `out`, keeping what `backward` needs at step t;
- `backward(t, p_t, h, g, dp_t)`: from g = ∂L/∂(new state), write ∂L/∂p_t into dp_t and return ∂L/∂h,
  keeping δ_t, the gradient of the recurrent product's output, for the parameter gradients;
- `grads(ins, dp)`: the parameter gradients of all steps at once, ∂L/∂W = Σ_t δ_tᵀ r_t = Δᵀ R as ONE
  product over [B·T] rows (r_t: what the product read at step t, from `ins`, the states the kernel read).

`StepSequence` runs a kernel over the timesteps and carries the state over padding, h_t = m_t ⊙ s_t +
(1 − m_t) ⊙ h_{t−1}; its backward runs the steps in reverse, g ← ∂L/∂h_t + (the kernel's ∂L/∂h_{t−1} for step
t + 1). `ChainKernel` is K kernels within one timestep, s⁰ = h_{t−1}, s^k = kernel_k(p^k_t, s^{k−1}), as one
kernel: DTMT's deep transition block (an L-GRU and T-GRUs, whose projections have width 0) and the
context-aware encoder's two cells per step, in that loop and in the fused decoder (models/decoder_sequence.py).
Under autocast (cells/base.py `_whole` says its dtype, rnmt.machine.matmul `products_in`) the kernels'
products, forward and backward, take their operands in that dtype and give float32 (matmul `narrow`): the
products autocast's step loop would have taken in bfloat16, where the states and gates stay float32.
Everything is batch-major ([B, T, …], step t at [:, t]): the projection and its gradient are the input
projection's own tensors (a time-major copy of each costs a pass over them).
`time_major` and `weight_grads` serve the loops that are time-major instead (ATR's own loop in
cells/atr.py and the CUDA kernels of cells/triton).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from rnmt.machine.matmul import addmm, mm, narrow, products_dtype


class StepKernel(ABC):
    """One cell's step with a hand-written backward; `params` are the tensors `grads` differentiates. `rows`:
    the module of the Triton row kernels a pass's steps run on (set by `begin` on CUDA), else None."""

    rows: Any = None

    def __init__(self, params: Sequence[Tensor], projection_size: int) -> None:
        self.params = list(params)
        self.projection_size = projection_size

    @abstractmethod
    def begin(self, p: Tensor, h0: Tensor) -> None:
        """Allocate the buffers for a pass over p [B, T, projection_size] from h0 [B, S]."""

    @abstractmethod
    def forward(self, t: int, p: Tensor, h: Tensor, out: Tensor) -> None:
        """Step t: projection p [B, P] and state h [B, S] → the new state, written into out [B, S]."""

    @abstractmethod
    def backward(self, t: int, p: Tensor, h: Tensor, g: Tensor, dp: Tensor) -> Tensor:
        """Step t, backwards: g = ∂L/∂(new state) → ∂L/∂h; writes ∂L/∂p into dp [B, P]."""

    @abstractmethod
    def grads(self, ins: Tensor, dp: Tensor) -> list[Tensor]:
        """∂L/∂params of all steps, from ins [B, T, S] (the state read at each step) and dp [B, T, P]."""


def product_grad(delta: Tensor, reads: Tensor) -> Tensor:
    """Σ_t δ_tᵀ r_t for δ [B, T, N] and r [B, T, K] → [N, K]: one product over the B·T rows, taken as
    (Rᵀ Δ)ᵀ, the faster order measured. Slices of wider rows (an LSTM's h in [h; c], RAN's gate
    gradients in ∂p) are copied to dense rows first, where oneDNN has its fast path (benchmarks/README.md,
    "Measurements behind the CPU kernels")."""
    rows = delta.flatten(0, 1).contiguous()
    return mm(reads.reshape(-1, reads.size(-1)).contiguous().t(), rows).t().contiguous()


def row_sum(x: Tensor) -> Tensor:
    """Σ over batch and time of x [B, T, N] → [N] (a bias gradient)."""
    return x.flatten(0, 1).sum(0)


def sigmoid_grad(s: Tensor) -> Tensor:
    """σ'(a) = s ⊙ (1 − s) from s = σ(a)."""
    return torch.addcmul(s, s, s, value=-1)


def tanh(x: Tensor, out: Tensor) -> Tensor:
    """tanh x into out; on the CPU as 2σ(2x) − 1, four passes that measured faster than torch's CPU tanh
    (benchmarks/README.md, "Measurements behind the CPU kernels"). Within a few ulps of 1 of tanh x."""
    if x.device.type != "cpu":
        return torch.tanh(x, out=out)
    return torch.sigmoid(torch.mul(x, 2, out=out), out=out).mul_(2).sub_(1)


def tanh_grad(y: Tensor) -> Tensor:
    """tanh'(a) = 1 − y² from y = tanh(a)."""
    return 1 - y * y


class ChainKernel(StepKernel):
    """K kernels applied in turn within one timestep, s⁰ = h, s^k = kernel_k(p^k, s^{k−1}), as one kernel: DTMT's
    transition blocks (a bottom cell and its T-GRUs, whose projections have width 0) and the context-aware
    encoder's two cells a step. p = [p¹; …; p^K]; the states between the kernels are kept for the backward,
    which runs the chain in reverse."""

    def __init__(self, kernels: Sequence[StepKernel]) -> None:
        super().__init__([q for kernel in kernels for q in kernel.params], sum(k.projection_size for k in kernels))
        self.kernels, self.sizes = list(kernels), [k.projection_size for k in kernels]

    def begin(self, p: Tensor, h0: Tensor) -> None:
        for kernel, pk in zip(self.kernels, p.split(self.sizes, 2), strict=True):
            kernel.begin(pk, h0)
        B, T = p.size(0), p.size(1)
        self.mids = [h0.new_empty(B, T, h0.size(1)) for _ in self.kernels[1:]]     # s¹ … s^{K−1} at every step
        self.rows = next((k.rows for k in self.kernels if k.rows is not None), None)

    def forward(self, t: int, p: Tensor, h: Tensor, out: Tensor) -> None:
        last = len(self.kernels) - 1
        for k, (kernel, pk) in enumerate(zip(self.kernels, p.split(self.sizes, 1), strict=True)):
            s = out if k == last else self.mids[k][:, t]
            kernel.forward(t, pk, h, s)
            h = s

    def backward(self, t: int, p: Tensor, h: Tensor, g: Tensor, dp: Tensor) -> Tensor:
        ins = [h, *(mid[:, t] for mid in self.mids)]
        pt, dpt = p.split(self.sizes, 1), dp.split(self.sizes, 1)
        for k in range(len(self.kernels) - 1, -1, -1):
            g = self.kernels[k].backward(t, pt[k], ins[k], g, dpt[k])
        return g

    def grads(self, ins: Tensor, dp: Tensor) -> list[Tensor]:
        return [gr for kernel, ink, dpk in zip(self.kernels, [ins, *self.mids], dp.split(self.sizes, 2), strict=True)
                for gr in kernel.grads(ink, dpk)]


def chain(kernels: Sequence[StepKernel | None]) -> StepKernel | None:
    """The kernels in turn within a step as one kernel (a single one as itself); None where one is None."""
    if any(k is None for k in kernels):
        return None
    return kernels[0] if len(kernels) == 1 else ChainKernel(kernels)   # type: ignore[arg-type]


class StepSequence(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, kernel: StepKernel, p: Tensor, m: Tensor | None, h0: Tensor, *params: Tensor) -> Tensor:
        """p [B, T, P], m [B, T, 1] (1.0 at real tokens) or None, h0 [B, S] → hs [B, T + 1, S], hs[:, 0] = h0."""
        B, T = p.size(0), p.size(1)
        hs = p.new_empty(B, T + 1, h0.size(1))
        hs[:, 0] = h0
        new = None if m is None else torch.empty_like(h0)
        kernel.begin(p, h0)
        low = products_dtype(p)
        with narrow(low, params):
            for t in range(T):
                kernel.forward(t, p[:, t], hs[:, t], hs[:, t + 1] if new is None else new)
                if m is not None:
                    torch.lerp(hs[:, t], new, m[:, t], out=hs[:, t + 1])
        ctx.kernel, ctx.low, ctx.params = kernel, low, params
        ctx.triton = kernel.rows is not None                    # what `path_label` says of the path
        ctx.save_for_backward(p, m, hs)
        return hs

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        p, m, hs = ctx.saved_tensors
        kernel = ctx.kernel
        T = p.size(1)
        dp = torch.empty_like(p)
        g = torch.zeros_like(hs[:, 0])
        with narrow(ctx.low, ctx.params):
            for t in range(T - 1, -1, -1):
                g = g + grad[:, t + 1]
                gk = kernel.backward(t, p[:, t], hs[:, t], g if m is None else g * m[:, t], dp[:, t])
                g = gk if m is None else torch.addcmul(gk, g, 1 - m[:, t])
            grads = kernel.grads(hs[:, :-1], dp)
        return None, dp, None, g + grad[:, 0], *grads


def kernel_sequence(kernel: StepKernel, projected: Tensor, mask: Tensor | None, state: Tensor) -> Tensor:
    """All states [B, T, S] of the kernel's loop from projected [B, T, P], mask [B, T] (None: no padding) and
    the initial state [B, S] (a cell's `sequence`)."""
    m = None if mask is None else mask.unsqueeze(-1).to(projected.dtype)
    return StepSequence.apply(kernel, projected.contiguous(), m, state.contiguous(), *kernel.params)[:, 1:]


def kernel_step(kernel: StepKernel, p: Tensor, h: Tensor) -> Tensor:
    """One step of `kernel` without a backward: projection p [B, P] and state h [B, S] → the new state."""
    kernel.begin(p.unsqueeze(1), h)
    out = torch.empty_like(h)
    kernel.forward(0, p, h, out)
    return out


def weight_grads(delta: Tensor, hs: Tensor, h0: Tensor) -> tuple[Tensor, Tensor]:
    """Δ [T, B, G·H] and the states → (∂L/∂W_hh [G·H, H], ∂L/∂b_hh [G·H]) in one product each."""
    dw = mm(delta[0].t(), h0)                  # step 0 reads h0; steps 1.. read hs[:-1] (no copy of the states)
    if delta.size(0) > 1:
        dw = addmm(dw, delta[1:].flatten(0, 1).t(), hs[:-1].flatten(0, 1))
    return dw, delta.flatten(0, 1).sum(0)


def time_major(projected: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """[B, T, P] and mask [B, T] → contiguous [T, B, P] and a float mask [T, B, 1] (or None)."""
    p = projected.transpose(0, 1).contiguous()
    return p, None if mask is None else mask.t().unsqueeze(-1).to(p.dtype).contiguous()
