"""A sweep's points on a Dask distributed cluster: ``inasched bench jct --dask tcp://HOST:PORT``.

Each point is one task, a whole `bench.jct.cli.compute_bench` on a worker; the results come
back here, where the output folder is, and are written in the order of the points, so the
folder is the one a ``--jobs 1`` run writes (the simulator is deterministic). The cluster is
an existing one (``dask scheduler``, ``dask worker`` on each machine: docs/evaluation.md);
every worker must hold the same project sources as this machine, which `connect` checks
(`source_fingerprint`) before any point runs. dask is an optional dependency, the ``dask``
extra; every failure to reach a usable cluster is a `ClusterError` of one line.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["CONNECT_TIMEOUT_S", "INSTALL", "ClusterError", "connect", "run_in_order",
           "source_fingerprint"]  # fmt: skip

T = TypeVar("T")
R = TypeVar("R")

# How long to wait for the scheduler to answer, and then for its first worker (assumed:
# a scheduler on a LAN answers in milliseconds; dask's own default is 30 s).
CONNECT_TIMEOUT_S = 10.0
INSTALL = "pip install 'inasched[dask]' (or: pip install 'dask[distributed]')"
# The packages a point runs: a worker with other sources would compute other figures.
_SOURCES = ("bench", "scheduler", "p4ctl")


class ClusterError(Exception):
    """The cluster cannot run the sweep; the message is one line naming the address."""


def connect(address: str, timeout_s: float | None = None) -> Any:
    """A `distributed.Client` of the scheduler at `address` with at least one worker, every
    worker holding this machine's sources; else `ClusterError` (`timeout_s`: each wait's
    bound, `CONNECT_TIMEOUT_S` by default)."""
    timeout_s = CONNECT_TIMEOUT_S if timeout_s is None else timeout_s
    try:
        from distributed import Client
    except ImportError:
        raise ClusterError(
            f"--dask needs dask.distributed, which is not installed: {INSTALL}"
        ) from None
    try:
        # The handshake alone, bounded: Client's own timeout covers the TCP connection but
        # not the handshake, so an address where another server listens (the scheduler's
        # dashboard port, say) would hang it or feed it garbage.
        asyncio.run(asyncio.wait_for(_handshake(address, timeout_s), timeout_s))
        client = Client(address, timeout=timeout_s, set_as_default=False)
    except (TimeoutError, OSError) as exc:
        raise ClusterError(
            f"--dask {address}: no Dask scheduler answered within {timeout_s:g} s "
            f"({_one_line(exc) if str(exc) else 'timed out'})"
        ) from exc
    except Exception as exc:  # whatever the address holds, it is not a usable scheduler
        raise ClusterError(f"--dask {address}: not a Dask scheduler ({_one_line(exc)})") from exc
    try:
        _check_workers(client, address, timeout_s)
    except BaseException:
        client.close()
        raise
    return client


async def _handshake(address: str, timeout_s: float) -> None:
    from distributed.comm.core import connect as comm_connect

    comm = await comm_connect(address, timeout=timeout_s)
    await comm.close()


def _check_workers(client: Any, address: str, timeout_s: float) -> None:
    try:
        client.wait_for_workers(1, timeout=timeout_s)
    except TimeoutError:
        raise ClusterError(
            f"--dask {address}: the scheduler has no worker after {timeout_s:g} s; start one "
            f"on each machine with: dask worker {address}"
        ) from None

    def probe() -> tuple[str, str]:
        # Pickled by value (a local function): it runs even where bench is not importable.
        try:
            from bench.jct import cli, cluster  # noqa: F401  (cli: what each point imports)
        except Exception as exc:
            return "", f"{type(exc).__name__}: {exc}"
        return cluster.source_fingerprint(), ""

    mine = source_fingerprint()
    for worker, (theirs, error) in sorted(client.run(probe).items()):
        if error:
            raise ClusterError(
                f"--dask {address}: worker {worker} cannot import the project ({error}); "
                "install inasched on every worker machine"
            )
        if theirs != mine:
            raise ClusterError(
                f"--dask {address}: worker {worker} holds other sources of bench, scheduler "
                "or p4ctl than this machine; install the same checkout on every worker"
            )


def run_in_order(
    client: Any,
    function: Callable[[T], R],
    items: Sequence[T],
    done: Callable[[int, R], None] = lambda i, result: None,
) -> list[R]:
    """`function` of each item on the cluster, results in the order of `items`; `done(i,
    result)` as item i finishes. A task's exception is raised here, as a process pool's
    would be; a worker lost under a task (dask retries it elsewhere first) is a
    `ClusterError`."""
    from distributed import as_completed
    from distributed.scheduler import KilledWorker

    futures = [client.submit(function, item, pure=False) for item in items]
    index = {future.key: i for i, future in enumerate(futures)}
    results: list[Any] = [None] * len(items)
    for future in as_completed(futures, loop=client.loop):
        i = index[future.key]
        try:
            results[i] = future.result()
        except KilledWorker as exc:
            client.cancel(futures)
            raise ClusterError(f"--dask: the workers running point {i + 1} died ({exc})") from exc
        done(i, results[i])
    return results


def source_fingerprint() -> str:
    """SHA-256 of the Python sources and data files of the packages a point runs (their
    paths relative to each package, and their bytes)."""
    import importlib

    digest = hashlib.sha256()
    for name in _SOURCES:
        root = Path(importlib.import_module(name).__path__[0])
        files = [*root.rglob("*.py"), *root.glob("data/*")]
        for path in sorted(p for p in files if p.is_file() and "__pycache__" not in p.parts):
            digest.update(f"{name}/{path.relative_to(root).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
