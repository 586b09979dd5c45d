"""Additive attention (Bahdanau et al. 2015; ATR paper appendix A.1).

    e_j = vᵀ tanh(W_q q + W_m m_j + b),  α = softmax(e) over real source positions,  c = Σ_j α_j m_j

W_m m_j is computed once per sentence (`keys`), not at every decoder step.

The energies come from `rnmt.energies` (the same weights and gradients by a faster route). Where nothing is
differentiated on CUDA (a search's steps) a step's energies, softmax and context are two Triton kernels
(models/triton/attention.py, `attention_kernels`), which read the keys once without writing the [N, S, A]
energies' terms that torch's operations write and read again.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from rnmt.cells import triton as cell_kernels
from rnmt.energies import energies
from rnmt.machine.matmul import Linear


def attention_kernels(x: Tensor, source: int, heads: int, attention: int, memory: int) -> Any:
    """models/triton/attention.py where the steps' attention on `x` runs as Triton kernels (CUDA, float32 or
    float64, triton importable, RNMT_TRITON not 0, a source that fits one block, heads whose widths its
    programs can split), else None."""
    triton_attention = cell_kernels.kernels_for(x, "rnmt.models.triton.attention")
    if triton_attention is None:
        return None
    fits = source <= triton_attention.MAX_SOURCE and triton_attention.width(heads, attention, memory) is not None
    return triton_attention if fits else None


def _step_kernels(attention: nn.Module, query: Tensor, keys: Tensor, memory: Tensor) -> Any:
    """The Triton attention kernels for a step that differentiates nothing and autocasts nothing (a search's),
    else None."""
    if torch.is_grad_enabled() or torch.is_autocast_enabled(query.device.type) or keys.dtype != query.dtype:
        return None
    return attention_kernels(query, keys.size(1), attention.heads, keys.size(2), memory.size(2))


class AdditiveAttention(nn.Module):
    heads = 1
    out: nn.Module | None = None            # no map of the context (MultiHeadAdditiveAttention's W_o)

    def __init__(self, query_size: int, memory_size: int, hidden_size: int) -> None:
        super().__init__()
        self.query_proj = Linear(query_size, hidden_size, bias=False)
        self.memory_proj = Linear(memory_size, hidden_size)
        self.v = Linear(hidden_size, 1, bias=False)

    def keys(self, memory: Tensor) -> Tensor:
        return self.memory_proj(memory)

    def forward(self, query: Tensor, keys: Tensor, memory: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """query [N, Q], keys [N, S, A], memory [N, S, M], mask [N, S] → (context [N, M], weights [N, S])."""
        kernels = _step_kernels(self, query, keys, memory)
        if kernels is not None:
            context, alpha = _by_kernels(kernels, self.query_proj(query), keys, self.v.weight, memory, mask, 1)
            return context, alpha[:, 0]
        scores = energies(self.query_proj(query).unsqueeze(1), keys, self.v.weight)
        scores = torch.where(mask, scores, float("-inf"))          # one kernel a step, not a negation and a fill
        weights = torch.softmax(scores, dim=-1)
        return torch.bmm(weights.unsqueeze(1), memory).squeeze(1), weights


class MultiHeadAdditiveAttention(nn.Module):
    """Multi-head additive attention (DTMT, Meng & Zhang 2019; shapes as in its reference code).

    The query q [N, Q] and the keys m_j [N, S, M] are projected to d and split into h heads;
    e_{k,j} = vᵀ tanh(q_k + K_{k,j}) with one head-sized v shared by all heads; each head attends over
    its slice of the raw memory (M/h values), the heads are concatenated (M) and mapped by W_o (M → M).
    """

    def __init__(self, query_size: int, memory_size: int, hidden_size: int, heads: int) -> None:
        super().__init__()
        if hidden_size % heads or memory_size % heads:
            raise ValueError(f"{heads} heads must divide the attention size {hidden_size} and memory {memory_size}")
        self.heads = heads
        self.query_proj = Linear(query_size, hidden_size, bias=False)
        self.memory_proj = Linear(memory_size, hidden_size, bias=False)
        self.v = Linear(hidden_size // heads, 1, bias=False)
        self.out = Linear(memory_size, memory_size)

    def keys(self, memory: Tensor) -> Tensor:
        return self.memory_proj(memory)

    def forward(self, query: Tensor, keys: Tensor, memory: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        N, S, _ = keys.shape
        h = self.heads
        kernels = _step_kernels(self, query, keys, memory)
        if kernels is not None:
            context, alpha = _by_kernels(kernels, self.query_proj(query), keys, self.v.weight, memory, mask, h)
            return self.out(context), alpha.mean(1)
        q = self.query_proj(query).view(N, 1, h, -1)
        scores = energies(q, keys.view(N, S, h, -1), self.v.weight)                   # [N, S, h]
        scores = torch.where(mask.unsqueeze(-1), scores, float("-inf"))
        weights = torch.softmax(scores, dim=1)
        values = memory.view(N, S, h, -1)
        context = torch.einsum("nsh,nshd->nhd", weights, values).reshape(N, -1)
        return self.out(context), weights.mean(-1)


def _by_kernels(kernels: Any, q: Tensor, keys: Tensor, v: Tensor, memory: Tensor, mask: Tensor,
                heads: int) -> tuple[Tensor, Tensor]:
    """A step's attention as the Triton kernels from the projected query q [N, A]: → (the heads' contexts
    [N, M], their weights [N, heads, S])."""
    N, S = keys.shape[:2]
    context, alpha = q.new_empty(N, memory.size(2)), q.new_empty(N, heads, S)
    kernels.forward(q.contiguous(), keys.contiguous(), v.reshape(-1) * 2, mask.contiguous(), memory.contiguous(),
                    None, alpha, context)
    return context, alpha
