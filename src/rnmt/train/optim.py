"""Optimisers as the papers set them: Adam with the paper's β and ε (ATR: 0.9/0.999; DTMT: ε = 1e-6),
AdaDelta (UD paper). The initialisation schemes are the models' (rnmt.models.init)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from rnmt.io import InputError

OPTIMIZERS = ("adam", "adadelta")


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
