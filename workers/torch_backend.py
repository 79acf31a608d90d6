"""The ``torch.distributed`` backend "inasched": allreduce through the switch, the rest by gloo.

A training script adds ``import workers.torch_backend``, calls
``dist.init_process_group("inasched")`` and runs under ``torchrun`` with ``INASCHED_SERVICE``,
``INASCHED_JOB`` and ``INASCHED_JOIN_TOKEN`` set (``INASCHED_DATA_HOST``: the UDP socket's
address, default 127.0.0.1, on a fabric an address in its rack's networks, which picks its ToR;
``INASCHED_GSO=off``: one datagram per message). Every rank joins the job (``n_workers`` must be
the world size) and heartbeats in a thread.

`InaschedProcessGroup.allreduce` of one CPU float32, float16 or bfloat16 tensor with SUM or AVG
goes through the switch and returns at once with a `Work`, so several are in flight (DDP's
buckets). Every other collective, and an allreduce the switch cannot do, goes to a gloo group
(counted in `InaschedProcessGroup.fallbacks`). All ranks issue collectives in the same order.
Allreduces with no result for the group's `timeout` fail with ``AllreduceTimeout``; once the
job has ended, at once with ``JobEnded`` naming its state. ``docs/training.md`` has more.
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
from collections import Counter
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from p4ctl.gso_option import GSO_ENV, parse_switch
from torch._C import _distributed_c10d as c10d
from torch._C._distributed_c10d import PrefixStore, ProcessGroupGloo, Store

from workers.client import AllreduceClient, open_socket
from workers.errors import RendezvousError
from workers.options import ClientOptions
from workers.rendezvous import join
from workers.torch_hook import SWITCH_DTYPES, allreduce_future
from workers.worker import Reporter

__all__ = [
    "BACKEND",
    "DATA_HOST_ENV",
    "JOB_ENV",
    "SERVICE_ENV",
    "TOKEN_ENV",
    "InaschedProcessGroup",
]

log = logging.getLogger(__name__)

BACKEND = "inasched"
SERVICE_ENV = "INASCHED_SERVICE"
JOB_ENV = "INASCHED_JOB"
TOKEN_ENV = "INASCHED_JOIN_TOKEN"
DATA_HOST_ENV = "INASCHED_DATA_HOST"

# How long `shutdown` waits for the last progress report to reach the service.
_FINAL_REPORT_S = 10.0


class InaschedProcessGroup(dist.ProcessGroup):
    """A process group whose allreduces go through the switch (module docstring).

    `client` is the rank's started `AllreduceClient`, `reporter` its heartbeats (None: no
    service, as in tests with a join file), `gloo` the group everything else goes to.

    Counters, readable from any thread: `switch_allreduces` (allreduces started through the
    switch) and `fallbacks` (a `Counter` of allreduces sent to gloo, by reason).
    """

    def __init__(
        self,
        rank: int,
        world_size: int,
        *,
        client: AllreduceClient,
        gloo: ProcessGroupGloo,
        reporter: Reporter | None = None,
    ) -> None:
        # The stubs know only the (store, rank, size) form; a Python group uses this one.
        super().__init__(rank, world_size)  # type: ignore[call-arg]
        self.client = client
        self.switch_allreduces = 0
        self.fallbacks: Counter[str] = Counter()
        self._gloo: Any = gloo  # the stubs lack a backend's collectives
        self._reporter = reporter
        self._reported = False
        self._lock = threading.Lock()
        # DDP's C++ side looks the cpu device's backend up; every op not overridden here
        # dispatches to it.
        cpu = torch.device("cpu")
        self._register_backend(cpu, dist.ProcessGroup.BackendType.GLOO, gloo)
        self._set_default_backend(dist.ProcessGroup.BackendType.GLOO)

    def getBackendName(self) -> str:  # noqa: N802  # the name torch calls
        return BACKEND

    def allreduce(self, tensors: Any, opts: Any = None) -> Any:  # type: ignore[override]
        """`tensors` (a tensor or a list of one) summed in place; returns a `Work`."""
        opts = opts if opts is not None else dist.AllreduceOptions()
        tensor_list = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
        reason = _unsupported(tensor_list, opts.reduceOp)
        if reason is not None:
            with self._lock:
                self.fallbacks[reason] += 1
            log.debug("allreduce through gloo: %s", reason)
            return self._gloo.allreduce(tensor_list, opts)
        with self._lock:
            self.switch_allreduces += 1
        average = opts.reduceOp == dist.ReduceOp.AVG
        summed = allreduce_future(self.client, tensor_list[0], key=None, average=average)
        # gloo's futures hold the list of tensors; DDP reads either form.
        work = c10d._create_work_from_future  # type: ignore[attr-defined]  # not in the stubs
        return work(summed.then(lambda done: [done.value()]))

    def allreduce_coalesced(self, tensors: Any, opts: Any = None) -> Any:
        with self._lock:
            self.fallbacks["allreduce_coalesced"] += 1
        return self._gloo.allreduce_coalesced(
            tensors, opts if opts is not None else dist.AllreduceCoalescedOptions()
        )

    def report_progress(self, iterations_done: int) -> None:
        """Tell the service `iterations_done` of the job's iterations are done (a no-op with
        no service); the job finishes when every rank has done them all."""
        if self._reporter is not None:
            self._reporter.progress(iterations_done, self.client)
            self._reported = True

    def shutdown(self) -> None:
        """Stop heartbeats and close the client (``dist.destroy_process_group`` calls it)."""
        if self._reporter is not None:
            if self._reported:
                self._reporter.deliver(_FINAL_REPORT_S)
            self._reporter.close()
            self._reporter = None
        self.client.close()

    def __repr__(self) -> str:
        return f"InaschedProcessGroup(rank={self.rank()}, size={self.size()})"


def _unsupported(tensors: list[torch.Tensor], op: Any) -> str | None:
    """Why the switch cannot do this allreduce, or None when it can."""
    if len(tensors) != 1:
        return f"allreduce of {len(tensors)} tensors"
    tensor = tensors[0]
    if op != dist.ReduceOp.SUM and op != dist.ReduceOp.AVG:
        return f"allreduce op {op.op.name}"
    if tensor.dtype not in SWITCH_DTYPES:
        return f"allreduce dtype {tensor.dtype}"
    if tensor.device.type != "cpu" or tensor.layout != torch.strided:
        return f"allreduce on {tensor.device.type} {tensor.layout}"
    return None


def _environment(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise RendezvousError(
            f"the inasched backend needs {name} in the environment "
            f"({SERVICE_ENV}, {JOB_ENV} and {TOKEN_ENV}; inasched launch sets them)"
        )
    return value


def _gso() -> bool:
    """``INASCHED_GSO`` (on or off; default on), read as the job's other variables are."""
    try:
        return parse_switch(os.environ.get(GSO_ENV, "on"))
    except argparse.ArgumentTypeError as exc:
        raise RendezvousError(f"{GSO_ENV}={exc}") from None


def _create(store: Store, rank: int, world_size: int, timeout: timedelta) -> InaschedProcessGroup:
    """`init_process_group("inasched")`: join the job named by the environment."""
    service, token = _environment(SERVICE_ENV), _environment(TOKEN_ENV)
    job_id = int(_environment(JOB_ENV))
    gloo = ProcessGroupGloo(PrefixStore("inasched-gloo/", store), rank, world_size, timeout)
    host = os.environ.get(DATA_HOST_ENV, "127.0.0.1")
    sock = open_socket(host)
    try:
        joined = join(service, job_id, token, sock.getsockname()[:2])
    except RendezvousError as exc:
        sock.close()
        # On a fabric the service places a rank by this address; the rank's only knob is the
        # variable, which the service's answer cannot name.
        raise RendezvousError(f"rank {rank} ({DATA_HOST_ENV}={host}): {exc}") from None
    except BaseException:
        sock.close()
        raise
    if joined.fan_in != world_size:
        sock.close()
        raise RendezvousError(
            f"job {job_id} has {joined.fan_in} workers but torch runs {world_size} ranks: "
            "submit the job with n_workers equal to the world size"
        )
    options = ClientOptions(timeout_s=timeout.total_seconds())
    client = AllreduceClient(joined, sock=sock, options=options, gso=_gso())
    reporter = Reporter(service, joined, token, client.end)
    log.info("rank %d joined job %d as worker %d", rank, job_id, joined.worker_id)
    return InaschedProcessGroup(rank, world_size, client=client, gloo=gloo, reporter=reporter)


dist.Backend.register_backend(BACKEND, _create, devices=["cpu"])
