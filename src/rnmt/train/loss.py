"""The training loss: label-smoothed cross-entropy summed over the real (non-padding) target tokens.

With smoothing ε over a vocabulary of V, the target distribution of a token y is
q = (1 − ε)·onehot(y) + ε/V (Szegedy et al. 2016, the form of torch's `label_smoothing`), and

    loss = Σ_i −Σ_v q_v log p_v = Σ_i (1 − ε)·(−log p_{y_i}) + (ε/V)·(−Σ_v log p_v),
    ∂loss/∂logits_i = softmax(logits_i) − q_i       (0 on padding rows).

`F.cross_entropy` with `label_smoothing` computes the same numbers, but its backward goes through the
log-softmax, the NLL and the smoothing term separately: a zero-filled [tokens, V] gradient, a second
[tokens, V] gradient added to it, then the log-softmax's backward, each a pass over the largest tensors
of an RNN training step. `token_loss` writes the gradient in one expression over the saved
log-probabilities instead; tested equal to `F.cross_entropy` in values and gradients. What it saves per
step is in benchmarks/README.md ("Training on the CPU").
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from rnmt.data.vocab import PAD_ID


class _SmoothedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: Tensor, target: Tensor, smoothing: float) -> Tensor:
        logp = torch.log_softmax(logits, -1)
        real = target != PAD_ID
        safe = target.masked_fill(~real, 0)
        nll = logp.gather(1, safe.unsqueeze(1)).squeeze(1).neg_()
        per_token = nll.mul_(1.0 - smoothing).add_(logp.sum(1), alpha=-smoothing / logp.size(1)) if smoothing else nll
        ctx.save_for_backward(logp, safe, real)
        ctx.smoothing = smoothing
        return (per_token * real).sum()

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, None, None]:
        logp, safe, real = ctx.saved_tensors
        eps = ctx.smoothing
        # softmax − q, scaled by the incoming gradient and zero on padding rows; logp is this function's
        # own tensor, used once, so it becomes the gradient in place
        d = logp.exp_()
        if eps:
            d.sub_(eps / d.size(1))
        d.scatter_add_(1, safe.unsqueeze(1), torch.full_like(safe, -(1.0 - eps), dtype=d.dtype).unsqueeze(1))
        d.mul_((grad * real).to(d.dtype).unsqueeze(1))
        return d, None, None


def token_loss(logits: Tensor, target: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """Summed label-smoothed cross-entropy of logits [..., V] (half precision computed in float32) against
    target [...], padding positions (PAD_ID) left out."""
    flat, tgt = logits.flatten(0, -2), target.flatten()
    if flat.dtype in (torch.float16, torch.bfloat16):
        flat = flat.float()
    if not torch.is_grad_enabled() or not flat.requires_grad:
        return F.cross_entropy(flat, tgt, ignore_index=PAD_ID, label_smoothing=label_smoothing, reduction="sum")
    return _SmoothedCrossEntropy.apply(flat, tgt, float(label_smoothing))
