"""Data-parallel training with torch.distributed (torchrun sets RANK / WORLD_SIZE / LOCAL_RANK).

Every rank draws the same batch order and trains on its share of each batch (sentences rank, rank+W,
...). Losses are summed over tokens and divided by the batch's *global* token count, and gradients are
summed across ranks, so W processes compute exactly the gradient of one process on the joint batch.
Decisions (stop, patience) are taken on rank 0 and broadcast. With one process all of this is a no-op.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch import nn


def rank_and_world() -> tuple[int, int]:
    """Join the process group when launched by torchrun (gloo on CPU, NCCL on CUDA)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
    return (dist.get_rank(), dist.get_world_size()) if world > 1 else (0, 1)


def broadcast_parameters(model: nn.Module, world: int) -> None:
    if world > 1:
        for p in model.parameters():
            dist.broadcast(p.data, 0)


def global_sum(value: int, world: int, device: torch.device) -> int:
    if world == 1:
        return value
    t = torch.tensor([value], dtype=torch.long, device=device)
    dist.all_reduce(t)
    return int(t.item())


def sum_gradients(model: nn.Module, world: int) -> None:
    if world == 1:
        return
    for p in model.parameters():
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad)


def agree(reason: str | None, world: int, device: torch.device) -> str | None:
    """Rank 0's decision (a stop reason or None) on every rank."""
    if world == 1:
        return reason
    box = [reason]
    dist.broadcast_object_list(box, 0)
    return box[0]


def any_rank(flag: bool, world: int, device: torch.device) -> bool:
    """True on every rank when any rank's flag is set (a signal reaches workers at slightly different steps;
    all must stop at the same step, or the others would wait for the stopped one in the next all-reduce)."""
    if world == 1:
        return flag
    t = torch.tensor([int(flag)], dtype=torch.long, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())
