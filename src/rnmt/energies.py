"""Additive attention energies, e_j = vᵀ tanh(q + k_j), the inner loop of every RNN attention here.

They are computed as e'_j = 2 vᵀ σ(2q + 2k_j): since tanh(a) = 2σ(2a) − 1, e'_j = e_j + Σv, a shift
that is the same for every source position j, so the softmax weights over j, the contexts and every
gradient are those of the tanh formula (tested in float64 against it, v's gradient included: the
shift's gradient sums the softmax's gradient over j, which is zero). torch's float32 sigmoid is several
times faster than its tanh on a CPU, and the energies ([N, S, A] per decoder step) are much of an RNN
decoder step's work; inference runs the sigmoid in place on the one-pass scaled sum. The measured gains
(decoding and training, per architecture) are in benchmarks/README.md.

Only use these where a softmax over the positions follows: the values are shifted by Σv.
"""

from __future__ import annotations

import torch
from torch import Tensor


def energies(query: Tensor, keys: Tensor, v: Tensor) -> Tensor:
    """vᵀ tanh(query + keys) + Σv; query and keys broadcast, v is the [1, A] or [A] score weight.

    Returns the broadcast shape of query and keys without its last dimension.
    """
    w = v.reshape(-1) * 2
    scaled = torch.add(query * 2, keys, alpha=2)
    if torch.is_grad_enabled() and (query.requires_grad or keys.requires_grad or v.requires_grad):
        return torch.matmul(torch.sigmoid(scaled), w)
    return torch.matmul(torch.sigmoid_(scaled), w)
