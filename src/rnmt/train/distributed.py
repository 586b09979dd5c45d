"""Data-parallel training with torch.distributed (torchrun sets RANK / WORLD_SIZE / LOCAL_RANK).

Every rank draws the same batch order and trains on its share of each batch (sentences rank, rank+W,
...), so `batch_size` is the update's batch whatever the number of processes, as the papers state it.
Losses are summed over tokens and divided by the batch's *global* token count, and torch's
`DistributedDataParallel` sums the gradients across ranks (its buckets all-reduced while the backward
pass still runs), so W processes compute the gradient of one process on the joint batch. Decisions
(stop, patience) are taken on rank 0 and broadcast. With one process all of this is a no-op.
"""

import contextlib
import os
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def rank_and_world() -> tuple[int, int]:
    """Join the process group when launched by torchrun (gloo on CPU, NCCL on CUDA)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
    return (dist.get_rank(), dist.get_world_size()) if world > 1 else (0, 1)


def _sum_hook(_state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """A bucket's gradients summed over the ranks. torch's default hook averages them; a rank's loss here
    is already divided by the update's global token count, so the sum is the joint batch's gradient. (DDP
    checks the hook's annotations as objects, which is why this module evaluates its annotations.)"""
    return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda f: f.value()[0])


def replicate(model: nn.Module, world: int, device: torch.device) -> nn.Module:
    """What the training step calls: with several processes, the model inside `DistributedDataParallel`
    (which copies rank 0's weights to every rank when it is built), else the model itself. No model here
    keeps running statistics in buffers, so the buffers are not re-broadcast before every forward."""
    if world == 1:
        return model
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                  broadcast_buffers=False)
    ddp.register_comm_hook(None, _sum_hook)
    return ddp


@contextlib.contextmanager
def local_gradients(replica: nn.Module, last: bool) -> Iterator[None]:
    """A backward pass that keeps its gradients on this rank (the first batches of an accumulated update):
    they are summed across ranks once, with the update's last batch."""
    if last or not isinstance(replica, DistributedDataParallel):
        yield
    else:
        with replica.no_sync():
            yield


def describe(world: int) -> str | None:
    """How the processes of this run shared its updates, for train.json."""
    return f"DistributedDataParallel over {world} processes ({dist.get_backend()})" if world > 1 else None


def global_sum(value: int, world: int, device: torch.device) -> int:
    if world == 1:
        return value
    t = torch.tensor([value], dtype=torch.long, device=device)
    dist.all_reduce(t)
    return int(t.item())


def global_loss(loss: torch.Tensor, world: int) -> torch.Tensor:
    """The update's loss over all ranks (each rank holds its share of the global mean), so every rank
    sees the same value and takes the same decision on a non-finite loss."""
    if world > 1:
        dist.all_reduce(loss)
    return loss


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
