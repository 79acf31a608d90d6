"""PyTorch DDP integration: gradient buckets allreduced through inasched.

    ddp = DistributedDataParallel(model)          # a gloo process group does the bookkeeping
    register(ddp, client)                          # client: workers.client.AllreduceClient

DDP calls the hook once per gradient bucket, in the same order on every rank, which is what
the protocol needs (``workers.client``: the same tensors in the same order). The bucket index
is the allreduce key, so each bucket's block-floating-point exponents follow that bucket's
own previous sum. The hook returns an already completed future; DDP's own overlap of
communication with the backward pass is given up for simplicity, while the fragments of one
bucket are still pipelined through the switch.
"""

# No `from __future__ import annotations` here: DDP checks the hook's annotations at run time
# and wants the `dist.GradBucket` class, not a string.
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from workers.client import AllreduceClient

__all__ = ["allreduce_hook", "register"]


def allreduce_hook(
    client: AllreduceClient,
    bucket: dist.GradBucket,  # type: ignore[name-defined]  # stubs lack it; DDP checks it
) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: the bucket's gradients averaged over the job's workers.

    Returns a completed future holding the bucket's buffer, overwritten with the mean.
    """
    buffer = bucket.buffer()
    mean = client.allreduce(buffer, key=("ddp-bucket", bucket.index()), average=True)
    buffer.copy_(mean)
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    future.set_result(buffer)
    return future


def register(model: DistributedDataParallel, client: AllreduceClient) -> None:
    """Make `model` allreduce its gradients through `client` instead of its process group."""
    model.register_comm_hook(client, allreduce_hook)
