"""The worker side of the aggregation protocol: `AllreduceClient.allreduce`.

    >>> client = AllreduceClient(join)            # join: a `workers.rendezvous.WorkerJoin`
    >>> total = client.allreduce(np.ones(1000, np.float32))   # every worker's sum, float32

A tensor is cut into fragments of k lanes; sequence numbers run on across allreduces, and every
worker allreduces the same tensors in the same order, so a seq names one fragment everywhere.
Fragments are block-floating-point quantized (`workers.quant` states the error bound); at most
W are in flight. A fragment without a result after the retransmission timeout (Karn's rule,
exponential back-off) is resent with RESEND, one overtaken by several later results at once.
With no result at all for `timeout_s`, pending allreduces fail with `AllreduceTimeout`; once
the job has ended (`end`, from a heartbeat's answer) they and every later one fail with
`JobEnded`: nothing hangs. One I/O thread owns the socket and every `Transfer`
(`workers.burst_io`, the compiled engine; `gso` off sends each datagram alone).
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from workers.burst_io import BurstIO
from workers.errors import ClientClosed, JobEnded
from workers.options import ClientOptions
from workers.rendezvous import WorkerJoin
from workers.transfer import Transfer

__all__ = ["AllreduceClient", "ClientOptions", "ClientStats", "PendingAllreduce", "open_socket"]

log = logging.getLogger(__name__)

# Results of a whole window can arrive in one burst (a multicast per fragment); a small
# receive buffer would drop them and cost a retransmission timeout each.
_RCVBUF = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ClientStats:
    """Counters of one client since it opened (bytes are gradient payload bytes)."""

    sent: int
    resent: int
    fast_resent: int  # the part of `resent` that fast retransmit sent (not a timeout)
    results_switch: int
    results_ps: int
    bytes_switch: int
    bytes_ps: int
    ignored: int  # late duplicates, foreign or malformed datagrams


def open_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A UDP socket bound to ``(host, port)``: the address to give the service when joining."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RCVBUF)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


class PendingAllreduce:
    """An allreduce in flight; `wait` returns the sum shaped like the input."""

    def __init__(self, transfer: Transfer, shape: tuple[int, ...], scale: float, like: Any):
        self._transfer = transfer
        self._shape = shape
        self._scale = scale
        self._like = like

    def done(self) -> bool:
        """Whether the result (or the error) is there."""
        return self._transfer.finished.is_set()

    def add_done_callback(self, callback: Callable[[PendingAllreduce], None]) -> None:
        """Call ``callback(self)`` once the result (or the error) is there, at once if it is.

        It runs on the client's I/O thread, between datagrams: it should only hand the result
        on (``wait(0)``, a copy, completing a future). An exception it raises is logged.
        """

        def run() -> None:
            try:
                callback(self)
            except Exception:  # the I/O thread must go on serving the other allreduces
                log.exception("allreduce done-callback failed")

        self._transfer.add_done_callback(run)

    def wait(self, timeout: float | None = None) -> Any:
        """The sum (numpy float32 array, or torch tensor for a tensor input).

        Raises `AllreduceTimeout` or `ClientClosed` when the allreduce failed, and
        `TimeoutError` when `timeout` passes first (the allreduce keeps running).
        """
        if not self._transfer.finished.wait(timeout):
            raise TimeoutError(f"allreduce not finished after {timeout} s")
        out = self._transfer.result().reshape(self._shape)
        if self._scale != 1.0:
            out = out * np.float32(self._scale)
        if self._like is None:
            return out
        import torch  # optional extra: only a torch input gets here

        return torch.from_numpy(np.ascontiguousarray(out)).to(self._like.device)


def _as_array(x: Any) -> tuple[npt.NDArray[np.float32], Any]:
    """``(float32 numpy view, torch tensor or None)`` of a numpy array or CPU torch tensor."""
    if isinstance(x, np.ndarray):
        if x.dtype != np.float32:
            raise TypeError(f"allreduce takes float32 arrays, got {x.dtype}")
        return x, None
    if type(x).__module__.split(".")[0] == "torch":
        import torch

        if x.dtype != torch.float32 or x.device.type != "cpu":
            raise TypeError(f"allreduce takes CPU float32 tensors, got {x.dtype} on {x.device}")
        return x.detach().contiguous().numpy(), x
    raise TypeError(f"allreduce takes a numpy array or a torch tensor, got {type(x).__name__}")


class AllreduceClient:
    """One worker's connection to its job's switch (see the module docstring).

    `sock` is the bound UDP socket the worker joined with (default: a new one on
    ``join.data_host:join.data_port``, or an ephemeral loopback port); the client owns it and
    `close` closes it. `options` sets the give-up and retransmission timeouts; `gso` (default
    on) whether runs of datagrams leave as UDP GSO messages (``p4ctl.engine.Burst``).
    """

    def __init__(
        self,
        join: WorkerJoin,
        *,
        sock: socket.socket | None = None,
        options: ClientOptions | None = None,
        gso: bool = True,
    ) -> None:
        self.join = join
        self.options = options or ClientOptions()
        self._sock = sock or open_socket(join.data_host or "127.0.0.1", join.data_port or 0)
        self._sock.setblocking(False)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._lock = threading.Lock()
        self._submitted: deque[Transfer] = deque()
        self._next_seq = 0
        self._last_by_key: dict[Hashable, Transfer] = {}
        self._closing = False
        self._ended: JobEnded | None = None
        self._broken: BaseException | None = None
        try:  # owned by the I/O thread from here on
            self._io = BurstIO(join, self._sock, self.options, gso=gso)
        except BaseException:
            for owned in (self._sock, self._wake_r, self._wake_w):
                owned.close()
            raise
        self._thread = threading.Thread(
            target=self._run, name=f"inasched-worker-{join.worker_id}", daemon=True
        )
        self._thread.start()

    @property
    def endpoint(self) -> tuple[str, int]:
        """``(host, port)`` of this worker's socket, as the switch must know it."""
        host, port = self._sock.getsockname()[:2]
        return str(host), int(port)

    def stats(self) -> ClientStats:
        """Counters so far (read without locking: each is a single int)."""
        return ClientStats(**self._io.counts)

    def allreduce(
        self, x: Any, *, key: Hashable = None, average: bool = False, timeout: float | None = None
    ) -> Any:
        """The elementwise sum (mean with `average`) of `x` over the job's workers.

        `x` is a float32 numpy array or CPU torch tensor; the result has its type and shape.
        `key` names the tensor across iterations (its exponents come from the last allreduce
        with the same key and size); the default key is the size alone.
        """
        return self.allreduce_async(x, key=key, average=average).wait(timeout)

    def allreduce_async(
        self, x: Any, *, key: Hashable = None, average: bool = False
    ) -> PendingAllreduce:
        """Start an allreduce and return at once; see `allreduce` and `PendingAllreduce`."""
        data, like = _as_array(x)
        scale = 1.0 / self.join.fan_in if average else 1.0
        with self._lock:
            if self._ended is not None:
                raise self._ended.again()
            if self._closing or self._broken is not None:
                raise ClientClosed("allreduce client is closed") from self._broken
            full_key = (key, data.size)
            transfer = Transfer(
                data,
                full_key,
                self.join.lanes,
                self._next_seq,
                self.join.fan_in,
                self._last_by_key.get(full_key),
            )
            self._last_by_key[full_key] = transfer
            self._next_seq += transfer.fragments
            self._submitted.append(transfer)
        self._wake()
        if transfer.fragments == 0:
            transfer.finish()
        return PendingAllreduce(transfer, data.shape, scale, like)

    def close(self) -> None:
        """Stop the I/O thread (pending allreduces fail with `ClientClosed`); idempotent."""
        with self._lock:
            self._closing = True
        self._wake()
        self._thread.join()
        for s in (self._sock, self._wake_r, self._wake_w):
            s.close()

    def end(self, error: JobEnded) -> None:
        """The job has ended: pending allreduces and every later one fail with `error` at once
        (the switch keeps nothing of an ended job, so they could only time out). The I/O
        thread stops; `close` still closes the socket. Idempotent: the first error stays."""
        with self._lock:
            if self._ended is None:
                self._ended = error
            self._closing = True
        self._wake()

    def __enter__(self) -> AllreduceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ I/O thread

    def _wake(self) -> None:
        # Closed, or the wake-up pipe is full: either way the thread wakes anyway.
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    def _run(self) -> None:
        io = self._io
        try:
            while True:
                with self._lock:
                    closing = self._closing
                    while self._submitted:
                        io.accept(self._submitted.popleft())
                if closing:
                    self._fail_all(self._ended or ClientClosed("allreduce client closed"))
                    return
                io.send_new()
                wait = io.wait_time(time.monotonic())
                readable, _, _ = select.select([self._sock, self._wake_r], [], [], wait)
                if self._wake_r in readable:
                    self._drain_wake()
                if self._sock in readable:
                    io.receive()
                now = time.monotonic()
                io.on_timers(now)
                error = io.expired(now)
                if error is not None:
                    log.info("%s", error)
                    self._fail_all(error)
        except Exception as exc:  # a bug must fail the callers, not strand them
            log.exception("allreduce I/O thread failed")
            self._fail_all(exc)

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass

    def _fail_all(self, error: BaseException) -> None:
        with self._lock:
            if self._broken is None and not isinstance(error, ClientClosed):
                self._broken = error
            pending = list(self._submitted)
            self._submitted.clear()
        self._io.fail(error, pending)
