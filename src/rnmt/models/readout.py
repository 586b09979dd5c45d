"""The deep-output readout of RNNSearch-style decoders (ATR paper eq. 12; Bahdanau et al. 2015):

    p(y_j) = softmax(E_out · dropout(tanh(W [tanh(s_j); c_j; E y_{j-1}] + b)) + b_out)

E_out is the target embedding matrix when the output is tied (the reference code's choice), else
its own matrix.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from rnmt.machine.matmul import Linear, linear


class Readout(nn.Module):
    def __init__(self, state_size: int, context_size: int, emb: int, vocab_size: int, dropout: float,
                 tie_output: bool) -> None:
        super().__init__()
        self.linear = Linear(state_size + context_size + emb, emb)
        self.dropout = nn.Dropout(dropout)
        self.out_bias = nn.Parameter(torch.zeros(vocab_size))
        self.out_proj = None if tie_output else Linear(emb, vocab_size, bias=False)

    def forward(self, state: Tensor, context: Tensor, prev_emb: Tensor, tgt_emb: nn.Embedding) -> Tensor:
        r = self.dropout(torch.tanh(self.linear(torch.cat([torch.tanh(state), context, prev_emb], -1))))
        weight = tgt_emb.weight if self.out_proj is None else self.out_proj.weight
        return linear(r, weight, self.out_bias)
