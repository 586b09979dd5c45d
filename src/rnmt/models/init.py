"""Parameter initialisation as the papers set it (`initialise`):
  - uniform: every parameter U(−a, a), a = 0.08 (ATR, DTMT);
  - xavier: Xavier-normal matrices and U(−0.1, 0.1) vectors (SR-NMT reference code);
  - diagonal: nonzero diagonals, zero biases (UD paper, after Le et al. 2015; `diagonal_init_`);
  - default: each module's own initialisation.
Layer-norm gains stay at 1 and biases at 0 under every scheme (`initialise`).

Diagonal initialisation (UD paper, section 2, after Le et al. 2015): "all matrices (here including
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
from rnmt.io import InputError

INITS = ("uniform", "xavier", "diagonal", "default")


def initialise(model: nn.Module, scheme: str, scale: float = 0.08) -> None:
    """Initialise `model`'s weights by `scheme`. Layer norms keep their identity start (gain 1, bias 0)
    under every scheme: drawn like a weight, a gain of about ±scale would shrink each normalised
    activation to a random-signed fraction of itself and stall learning."""
    if scheme == "default":
        return
    if scheme in ("uniform", "xavier"):
        for module in model.modules():
            if isinstance(module, nn.LayerNorm):
                module.reset_parameters()
                continue
            for p in module.parameters(recurse=False):
                if scheme == "uniform":
                    nn.init.uniform_(p, -scale, scale)
                elif p.dim() >= 2:
                    nn.init.xavier_normal_(p)
                else:
                    nn.init.uniform_(p, -0.1, 0.1)
    elif scheme == "diagonal":
        diagonal_init_(model)
    else:
        raise InputError(f"unknown init {scheme!r}; valid: {', '.join(INITS)}")


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
