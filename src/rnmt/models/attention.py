"""Additive attention (Bahdanau et al. 2015; ATR paper appendix A.1).

    e_j = vᵀ tanh(W_q q + W_m m_j + b),  α = softmax(e) over real source positions,  c = Σ_j α_j m_j

W_m m_j is computed once per sentence (`keys`), not at every decoder step.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class AdditiveAttention(nn.Module):
    def __init__(self, query_size: int, memory_size: int, hidden_size: int) -> None:
        super().__init__()
        self.query_proj = nn.Linear(query_size, hidden_size, bias=False)
        self.memory_proj = nn.Linear(memory_size, hidden_size)
        self.v = nn.Linear(hidden_size, 1, bias=False)

    def keys(self, memory: Tensor) -> Tensor:
        return self.memory_proj(memory)

    def forward(self, query: Tensor, keys: Tensor, memory: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """query [N, Q], keys [N, S, A], memory [N, S, M], mask [N, S] → (context [N, M], weights [N, S])."""
        scores = self.v(torch.tanh(keys + self.query_proj(query).unsqueeze(1))).squeeze(-1)
        scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return torch.bmm(weights.unsqueeze(1), memory).squeeze(1), weights
