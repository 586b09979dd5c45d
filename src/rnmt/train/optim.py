"""Optimisers and parameter initialisation as the papers set them.

Optimisers: Adam with the paper's β and ε (ATR: 0.9/0.999; DTMT: ε = 1e-6), AdaDelta (UD paper).
Initialisation:
  - uniform: every parameter U(−a, a), a = 0.08 (ATR, DTMT);
  - xavier: Xavier-normal matrices and U(−0.1, 0.1) vectors (SR-NMT reference code);
  - diagonal: nonzero diagonals, zero biases (UD paper, after Le et al. 2015);
  - default: each module's own initialisation.
Layer-norm gains stay at 1 and biases at 0 under every scheme but `uniform`, which the papers apply to all.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from rnmt.io import InputError

OPTIMIZERS = ("adam", "adadelta")
INITS = ("uniform", "xavier", "diagonal", "default")


def make_optimizer(name: str, params: Iterable[nn.Parameter], lr: float, betas: tuple[float, float],
                   eps: float, rho: float = 0.95) -> torch.optim.Optimizer:
    """`rho`: AdaDelta's decay (Zeiler 2012 uses 0.95 with eps 1e-6; torch's default would be 0.9)."""
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, betas=betas, eps=eps)
    if name == "adadelta":
        return torch.optim.Adadelta(params, lr=lr, rho=rho, eps=eps)
    raise InputError(f"unknown optimizer {name!r}; valid optimizers: {', '.join(OPTIMIZERS)}")


def set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    """Every parameter group's learning rate; a device tensor (CUDA graphs' Adam reads it there) is filled."""
    for g in opt.param_groups:
        if isinstance(g["lr"], torch.Tensor):
            g["lr"].fill_(lr)
        else:
            g["lr"] = lr


def load_optimizer_state(opt: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """A saved optimizer state into `opt`, keeping `opt`'s own kind of Adam (fused, capturable, a tensor
    learning rate for CUDA graphs, or not) whichever kind saved it; the saved learning rate is kept."""
    kind = [{k: g[k] for k in ("fused", "capturable", "foreach", "lr") if k in g} for g in opt.param_groups]
    opt.load_state_dict(state)
    for g, own in zip(opt.param_groups, kind, strict=True):
        lr = float(g["lr"])
        g.update(own)
        if isinstance(g["lr"], torch.Tensor):
            g["lr"].fill_(lr)
        else:
            g["lr"] = lr


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
        from rnmt.models.init import diagonal_init_

        diagonal_init_(model)
    else:
        raise InputError(f"unknown init {scheme!r}; valid: {', '.join(INITS)}")
