"""Diagonal initialisation (UD paper, section 2, after Le et al. 2015): "all matrices (here including
standard, non-recurrent weight matrices) are initialized with nonzero values along the diagonal only";
the biases start at zero (section 4: "the weight matrices have all retained the initial diagonal shape,
the biases are all set to zero").

A recurrent cell's matrix stacks one block of `hidden_size` rows per gate; each block [n, in] gets
`value` on its own diagonal, so every gate starts as the (truncated) identity from the input and from
the state. Any other matrix [out, in] gets `value` at (i, i). Embeddings keep their initialisation
(the paper's word vectors are pretrained, its label vectors random); 1-D parameters that are not biases
(layer-norm gains) are left alone.
"""

from __future__ import annotations

import torch
from torch import nn

from rnmt.cells.base import RecurrentCell


def diagonal_init_(model: nn.Module, value: float = 1.0) -> None:
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Embedding):
                continue
            for name, p in module.named_parameters(recurse=False):
                if p.dim() == 1 and "bias" in name:
                    p.zero_()
                elif p.dim() == 2:
                    rows = module.hidden_size if isinstance(module, RecurrentCell) else p.size(0)
                    rows = rows if p.size(0) % rows == 0 else p.size(0)
                    eye = torch.eye(rows, p.size(1), dtype=p.dtype, device=p.device) * value
                    p.copy_(eye.repeat(p.size(0) // rows, 1))
