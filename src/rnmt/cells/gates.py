"""Sigmoid gates with per-gate layer normalisation (DTMT, "Advanced Techniques") or biases, for the step
kernels of cells/kernel.py: the forward and backward of one step and the parameter gradients.

For k gates of width H over the pre-activations a = [a_1 … a_k] [B, k·H]:

    s_j = σ(γ_j ⊙ â_j + β_j),   â_j = (a_j − μ_j) ρ_j,   ρ_j = 1 / √(var_j + ε)     (LayerNorm(H) per gate)
    s_j = σ(a_j + b_j)                                                             (without gate norm)

Backward from ∂s: ∂y = ∂s ⊙ s ⊙ (1 − s) (y: the sigmoid's input), ∂â = ∂y ⊙ γ, and
∂a = ρ (∂â − mean(∂â) − â ⊙ mean(∂â ⊙ â)), layer norm's backward, which `native_layer_norm_backward`
(the kernel the step loop's autograd runs) computes from the kept â given μ = 0 and ρ = 1, before the
product with ρ. ∂γ_j = Σ ∂y_j ⊙ â_j and ∂β_j = Σ ∂y_j (∂b = Σ ∂y) are summed over the batch at each
step, while ∂y and â are in cache (as sums over all steps after the loop they cost more; benchmarks/README.md),
but on CUDA, where the row kernels of cells/triton/gated.py keep ∂y of every step for one sum after the loop.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from rnmt.cells.kernel import row_sum, sigmoid_grad


class SigmoidGates:
    def __init__(self, hidden: int, norms: Sequence[nn.LayerNorm] | None = None, bias: Tensor | None = None) -> None:
        """Gates σ(LN_j(a_j)) for the layer norms `norms`, else σ(a + bias) for bias [k·H]."""
        if (norms is None) == (bias is None):
            raise ValueError("SigmoidGates takes either layer norms or a bias")
        self.H = hidden
        self.norms = list(norms) if norms is not None else None
        self.bias = bias
        self.k = len(self.norms) if self.norms is not None else bias.numel() // hidden
        self.params: list[Tensor] = ([q for n in self.norms for q in (n.weight, n.bias)] if self.norms is not None
                                     else [bias])

    @staticmethod
    def supports(norms: Sequence[nn.LayerNorm]) -> bool:
        """Whether layer norms are of the form handled here: affine, one ε, over the last dimension only."""
        return all(n.weight is not None and n.bias is not None and len(n.normalized_shape) == 1
                   and n.eps == norms[0].eps for n in norms)

    def begin(self, T: int, B: int, like: Tensor) -> None:
        """Buffers for T steps, time-major (each step's dense, as layer norm's kernels want them)."""
        k, H = self.k, self.H
        if self.norms is not None:
            self.gamma = torch.stack([n.weight for n in self.norms]).to(like.dtype)
            self.beta = torch.stack([n.bias for n in self.norms]).to(like.dtype)
            self.eps = self.norms[0].eps
            self.xhat = like.new_empty(T, B, k, H)
            self.mean = like.new_empty(B, k, 1)                         # μ of the current step (not kept)
            self.rstd = like.new_empty(T, B, k, 1)
            self.dgamma: Tensor | None = None                           # made by the first step backwards

    def forward(self, t: int, a: Tensor, out: Tensor) -> Tensor:
        """The gate values of step t from a [B, k·H], written into out [B, k·H]."""
        if self.norms is None:
            return torch.sigmoid(torch.add(a, self.bias, out=out), out=out)
        B, k, H = a.size(0), self.k, self.H
        xhat = self.xhat[t]
        torch.ops.aten.native_layer_norm.out(a.view(B, k, H), [H], None, None, self.eps,
                                             out0=xhat, out1=self.mean, out2=self.rstd[t])
        y = torch.addcmul(self.beta, xhat, self.gamma)
        return torch.sigmoid(y.view(B, k * H), out=out)

    def backward(self, t: int, ds: Tensor, s: Tensor, out: Tensor) -> None:
        """∂L/∂a of step t into out [B, k·H], from ∂L/∂s and the gate values s."""
        if self.norms is None:
            torch.mul(ds, sigmoid_grad(s), out=out)
            return
        B, k, H = s.size(0), self.k, self.H
        dy = torch.mul(ds, sigmoid_grad(s)).view(B, k, H)
        xhat = self.xhat[t]
        if self.dgamma is None:         # the first step backwards (a pass that only steps forward needs none)
            self.dgamma, self.dbeta = xhat.new_zeros(k, H), xhat.new_zeros(k, H)
            self.zero, self.one = xhat.new_zeros(B, k, 1), xhat.new_ones(B, k, 1)
        self.dbeta.add_(dy.sum(0))
        self.dgamma.add_((dy * xhat).sum(0))
        d = torch.ops.aten.native_layer_norm_backward(dy.mul_(self.gamma), xhat, [H], self.zero, self.one, None, None,
                                                      [True, False, False])[0]
        torch.mul(d, self.rstd[t], out=out.view(B, k, H))

    def steps_summed(self, dy: Tensor) -> None:
        """∂γ and ∂β from ∂y of every step at once, dy [T, B, k, H] (kept by the row kernels of
        cells/triton/gated.py, which leave the sums to one reduction each after the loop on the GPU)."""
        self.dbeta = dy.sum((0, 1))
        self.dgamma = (dy * self.xhat).sum((0, 1))

    def grads(self, da: Tensor) -> list[Tensor]:
        """Gradients of `params` for all steps, from ∂L/∂a of all steps [B, T, k·H] (used without norms)."""
        if self.norms is None:
            return [row_sum(da)]
        dgamma, dbeta = self.dgamma.to(self.norms[0].weight.dtype), self.dbeta.to(self.norms[0].bias.dtype)
        return [g for j in range(self.k) for g in (dgamma[j], dbeta[j])]


def sigmoid_gates(hidden: int, norms: Sequence[nn.LayerNorm] | None, bias: Tensor | None) -> SigmoidGates | None:
    """The gates of a cell with layer norms `norms` (or, without, gate biases `bias`); None where the norms
    are of a form `SigmoidGates` does not handle."""
    if norms is not None:
        return SigmoidGates(hidden, norms=norms) if SigmoidGates.supports(norms) else None
    return SigmoidGates(hidden, bias=bias)


def dropout_noise(x: Tensor, rate: float, ones: Tensor | None = None) -> Tensor:
    """Dropout's noise for x (0, or 1/(1 − rate), per element), drawn as F.dropout draws it for a tensor of
    x's shape in x's dtype widened to at least float32. On CUDA, F.dropout of a bfloat16 tensor draws
    another mask than of a float32 one, so under autocast a step loop (bfloat16 candidates) and the step
    kernels (float32) would drop different units of one seeded run; drawing at float32 or wider gives both
    the same mask, and x times it is F.dropout(x)'s value (on the CPU the masks agree for every dtype).
    `ones`: such a tensor of ones to draw from, kept by a loop that draws every step (a fill less a step)."""
    wide = torch.promote_types(x.dtype, torch.float32)
    if ones is None:
        ones = torch.ones(x.shape, dtype=wide, device=x.device)
    return F.dropout(ones, rate, training=True).to(x.dtype)


def step_dropout(x: Tensor, rate: float, training: bool) -> Tensor:
    """F.dropout(x, rate, training) with its noise from `dropout_noise`: the candidate dropout of the cells'
    step loops, drawn as their step kernels draw it."""
    return x * dropout_noise(x, rate) if training and rate else x


def dropout_rate(rate: float, training: bool) -> float | None:
    """The candidate dropout a kernel applies (0 outside training); None for rates it cannot (≥ 1)."""
    if not training or not rate:
        return 0.0
    return rate if 0 < rate < 1 else None
