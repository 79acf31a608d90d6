"""PyTorch DDP integration: gradient buckets allreduced through inasched.

    ddp = DistributedDataParallel(model)          # a gloo process group does the bookkeeping
    register(ddp, client)                          # client: workers.client.AllreduceClient

Under the "inasched" backend (``workers.torch_backend``) DDP needs no hook;
``register(ddp, dist.group.WORLD.client)`` adds the order checks. The default hook
(`allreduce_hook_async`) returns a future the client's I/O thread completes, so a backward
pass's buckets overlap; ``overlap=False`` installs the blocking `allreduce_hook`.

The protocol needs the same tensors allreduced in the same order on every worker. `BucketOrder`
checks it, so a broken assumption stops training instead of mixing sums: within a backward
pass the hook must see buckets 0, 1, 2, ...; the layout of each of the first two passes (DDP
rebuilds its buckets once) is compared across ranks with one allgather, and any later change
is refused. The bucket index is the allreduce key, so each bucket's exponents follow its own.
"""

# No `from __future__ import annotations` here: DDP checks the hook's annotations at run time
# and wants the `dist.GradBucket` class, not a string.
import threading
import zlib

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from workers.client import AllreduceClient, PendingAllreduce

__all__ = [
    "BucketOrder",
    "BucketOrderError",
    "HookState",
    "allreduce_future",
    "allreduce_hook",
    "allreduce_hook_async",
    "register",
]

# Dtypes the client aggregates: float32 as it is, the half types through a float32 copy.
SWITCH_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


# DDP may rebuild its buckets once, after the first backward pass; the layouts of the first two
# passes are compared across ranks (every rank compares at the same passes), and a later
# change is an error on its own.
_COMPARED_PASSES = 2


class BucketOrderError(RuntimeError):
    """DDP handed the hook buckets in an order the other ranks may not share."""


class BucketOrder:
    """Checks that every rank allreduces the same buckets in the same order (module docstring).

    `group` is the process group the layouts are compared over (None: the default group).
    """

    def __init__(self, group: dist.ProcessGroup | None = None) -> None:
        self._group = group
        self._lock = threading.Lock()
        self._pass: list[tuple[int, str]] = []  # (numel, dtype) of each bucket so far
        self._passes = 0
        self._verified: list[tuple[int, str]] | None = None

    def check(self, index: int, buffer: torch.Tensor) -> None:
        """Record bucket `index` (its flat `buffer`); raises `BucketOrderError` when the order
        is broken. At the first bucket of a pass whose predecessor had a new layout, it waits
        for every rank to get there too."""
        with self._lock:
            if index == 0 and self._pass:
                finished, self._pass = self._pass, []
                self._passes += 1
                if self._passes <= _COMPARED_PASSES:
                    self._compare_across_ranks(finished)
                    self._verified = finished
                elif finished != self._verified:
                    raise BucketOrderError(
                        f"the DDP buckets changed after backward pass {_COMPARED_PASSES}: "
                        "every rank must keep the same buckets"
                    )
            if index != len(self._pass):
                raise BucketOrderError(
                    f"DDP bucket {index} came when bucket {len(self._pass)} was due: every rank "
                    "must allreduce its buckets in index order"
                )
            self._pass.append((buffer.numel(), str(buffer.dtype)))

    def _compare_across_ranks(self, layout: list[tuple[int, str]]) -> None:
        group = self._group if self._group is not None else dist.group.WORLD
        assert group is not None, "no process group: call init_process_group first"
        digest = torch.tensor([zlib.crc32(repr(layout).encode())], dtype=torch.int64)
        digests = [torch.zeros_like(digest) for _ in range(group.size())]
        group.allgather([digests], [digest]).wait()
        if any(int(d) != int(digest) for d in digests):
            raise BucketOrderError(
                f"the DDP buckets of the last backward pass differ across ranks ({len(layout)} "
                "buckets here): every rank must build the same model and bucket it the same way"
            )


class HookState:
    """What the hooks need: the client, and the `BucketOrder` of the model's process group."""

    def __init__(self, client: AllreduceClient, group: dist.ProcessGroup | None = None) -> None:
        self.client = client
        self.order = BucketOrder(group)


def allreduce_future(
    client: AllreduceClient, tensor: torch.Tensor, *, key: object, average: bool
) -> torch.futures.Future[torch.Tensor]:
    """Start the allreduce of `tensor` (CPU; float32, float16 or bfloat16) through `client`.

    Returns a future that the client's I/O thread completes with `tensor` itself, overwritten
    with the sum over the job's workers (the mean with `average`), or with the allreduce's
    error. A half-precision tensor travels as float32 and is rounded back when the sum is in.
    """
    if tensor.dtype not in SWITCH_DTYPES:
        raise TypeError(f"inasched allreduces {SWITCH_DTYPES}, not {tensor.dtype}")
    data = tensor if tensor.dtype == torch.float32 else tensor.to(torch.float32)
    pending = client.allreduce_async(data, key=key, average=average)
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future()

    def complete(done: PendingAllreduce) -> None:
        try:
            tensor.copy_(done.wait(0))
        except Exception as exc:  # the allreduce's own error, handed to whoever waits
            future.set_exception(exc)  # type: ignore[arg-type]  # the stubs say Tensor
            return
        future.set_result(tensor)

    pending.add_done_callback(complete)
    return future


def allreduce_hook_async(
    state: HookState,
    bucket: dist.GradBucket,  # type: ignore[name-defined]  # stubs lack it; DDP checks it
) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: the bucket's gradients averaged over the job's workers.

    Returns at once a future that the client's I/O thread completes with the bucket's buffer,
    overwritten with the mean.
    """
    state.order.check(bucket.index(), bucket.buffer())
    return allreduce_future(
        state.client, bucket.buffer(), key=("ddp-bucket", bucket.index()), average=True
    )


def allreduce_hook(
    state: HookState,
    bucket: dist.GradBucket,  # type: ignore[name-defined]  # stubs lack it; DDP checks it
) -> torch.futures.Future[torch.Tensor]:
    """The synchronous form of `allreduce_hook_async`: returns once the mean is in."""
    future = allreduce_hook_async(state, bucket)
    future.wait()
    return future


def register(
    model: DistributedDataParallel, client: AllreduceClient, *, overlap: bool = True
) -> HookState:
    """Make `model` allreduce its gradients through `client` instead of its process group;
    asynchronously (`allreduce_hook_async`) unless `overlap` is False. Returns the hook state."""
    state = HookState(client, model.process_group)
    model.register_comm_hook(state, allreduce_hook_async if overlap else allreduce_hook)
    return state
