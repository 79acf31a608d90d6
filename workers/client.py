"""The worker side of the aggregation protocol: `AllreduceClient.allreduce`.

    >>> client = AllreduceClient(join)            # join: a `workers.rendezvous.WorkerJoin`
    >>> total = client.allreduce(np.ones(1000, np.float32))   # every worker's sum, float32
    >>> client.close()

How a tensor travels. It is cut into fragments of k lanes (the switch's k); fragment i of the
allreduce whose first sequence number is ``s`` is ``seq = s + i``, and sequence numbers run on
across allreduces (per job, monotonic), so several allreduces can be in flight at once (DDP
buckets) without mixing: every worker of a job allreduces the same tensors in the same order,
so the same seq means the same fragment everywhere. Fragments are block-floating-point
quantized (``workers.quant``; the error bound is stated there), at most W are in flight, and a
worker sends ``seq`` only once it has the result of every sequence up to ``seq - W`` (a
sliding window; for static W is at most the partition's slots, see
``WorkerJoin.window_limit``). The aggregator index comes from the job's placement
(``p4ctl.rule.static_index`` / ``hashed_index``). Sums come back as RESULT from the switch or
PS_RESULT from the PS, and are dequantized into the output.

Loss. A fragment without a result after the retransmission timeout is sent again with RESEND
(the switch then flushes the partial sum to the PS, or answers from its stored result), with
exponential back-off. The timeout follows the measured round trip like TCP's (Karn's rule:
retransmitted fragments are not sampled); a fragment overtaken by several later results is
resent at once (fast retransmit), since a spurious resend costs a PS detour but a missed loss
stalls the window. When no result at all arrives for `timeout_s` the
pending allreduces fail with `AllreduceTimeout` and the client is broken: nothing hangs.

Concurrency. One I/O thread per client owns the socket and every `Transfer`; callers only
submit and wait.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from p4ctl.protocol import HEADER, HEADER_SIZE, VERSION, Flag, Kind

from workers.errors import AllreduceTimeout, ClientClosed
from workers.rendezvous import WorkerJoin
from workers.retransmit import RetransmitTimer
from workers.transfer import Sender, Transfer

__all__ = ["AllreduceClient", "ClientOptions", "ClientStats", "PendingAllreduce", "open_socket"]

log = logging.getLogger(__name__)

# Results of a whole window can arrive in one burst (a multicast per fragment); a small
# receive buffer would drop them and cost a retransmission timeout each.
_RCVBUF = 8 * 1024 * 1024
_MAX_DATAGRAM = 65536
# A fragment overtaken by this many later ones is presumed lost (`_fast_retransmit`).
_REORDER = 8
_RESEND = int(Flag.RESEND)
_RESULT_KINDS = (int(Kind.RESULT), int(Kind.PS_RESULT))


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """Timing of one client: give-up timeout, and bounds of the retransmission timeout."""

    timeout_s: float = 10.0
    initial_rto_s: float = 0.5
    min_rto_s: float = 0.2
    max_rto_s: float = 2.0


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
    `close` closes it. `options` sets the give-up and retransmission timeouts.
    """

    def __init__(
        self,
        join: WorkerJoin,
        *,
        sock: socket.socket | None = None,
        options: ClientOptions | None = None,
    ) -> None:
        self.join = join
        self.options = options or ClientOptions()
        self._sock = sock or open_socket(join.data_host or "127.0.0.1", join.data_port or 0)
        self._sock.setblocking(False)
        self._switch = (socket.gethostbyname(join.switch[0]), join.switch[1])
        self._window = join.window_limit()
        self._sender = Sender(join.switch_job_id, join.worker_id, join.placement)
        self._datagram_size = HEADER_SIZE + 4 * join.lanes
        self._rx = bytearray(_MAX_DATAGRAM)
        self._rx_view = memoryview(self._rx)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._lock = threading.Lock()
        self._submitted: deque[Transfer] = deque()
        self._next_seq = 0
        self._last_by_key: dict[Hashable, Transfer] = {}
        self._closing = False
        self._broken: BaseException | None = None
        # Owned by the I/O thread from here on.
        self._transfers: list[Transfer] = []
        self._assigned = 0  # one past the last seq of an accepted transfer
        self._send_seq = 0
        self._low = 0  # lowest seq without a result
        self._inflight: dict[int, list[float]] = {}  # seq -> [sent_at, attempts]
        self._answered = -1  # highest seq with a result
        opts = self.options
        self._timer = RetransmitTimer(opts.initial_rto_s, opts.min_rto_s, opts.max_rto_s)
        self._last_progress = time.monotonic()
        self._last_timeout_resend = float("-inf")
        self._counts = dict.fromkeys(ClientStats.__slots__, 0)
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
        return ClientStats(**self._counts)

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
        try:
            while True:
                with self._lock:
                    closing = self._closing
                    while self._submitted:
                        self._accept(self._submitted.popleft())
                if closing:
                    self._fail_all(ClientClosed("allreduce client closed"))
                    return
                self._send_new()
                now = time.monotonic()
                wait = min(self._timer.wait_time(now, 0.5), self._fast_wait(now))
                readable, _, _ = select.select([self._sock, self._wake_r], [], [], wait)
                if self._wake_r in readable:
                    self._drain_wake()
                if self._sock in readable:
                    self._receive()
                now = time.monotonic()
                self._retransmit(now)
                self._fast_retransmit(now)
                self._check_progress(now)
        except Exception as exc:  # a bug must fail the callers, not strand them
            log.exception("allreduce I/O thread failed")
            self._fail_all(exc)

    def _accept(self, transfer: Transfer) -> None:
        if transfer.fragments == 0:
            return
        if not self._inflight and self._send_seq == self._assigned:
            self._last_progress = time.monotonic()  # idle until now: the clock starts here
        self._transfers.append(transfer)
        self._assigned = transfer.end_seq

    def _transfer_of(self, seq: int) -> Transfer | None:
        for t in self._transfers:  # a handful of buckets in flight: a scan beats an index
            if t.first_seq <= seq < t.end_seq:
                return t
        return None

    def _send_new(self) -> None:
        while self._send_seq < self._assigned and self._send_seq < self._low + self._window:
            seq = self._send_seq
            t = self._transfer_of(seq)
            if t is None:
                self._send_seq += 1  # a failed transfer's sequence: nothing to send
                continue
            if not t.active:
                if not t.ready():
                    return  # its exponents wait for the previous allreduce of this tensor
                t.activate()
            self._send(t, seq, resend=False)
            # Stamped after the send: building a chunk of datagrams must not count as delay.
            now = time.monotonic()
            self._inflight[seq] = [now, 0.0]
            self._timer.arm(seq, 0, now)
            self._send_seq += 1

    def _send(self, t: Transfer, seq: int, resend: bool) -> None:
        datagram: memoryview | bytearray = t.datagram(seq - t.first_seq, self._sender)
        if resend:
            datagram = bytearray(datagram)
            flags = (datagram[2] << 8 | datagram[3]) | _RESEND  # big-endian u16 at offset 2
            datagram[2:4] = flags.to_bytes(2, "big")
        try:
            self._sock.sendto(datagram, self._switch)
        except OSError as exc:  # a full buffer or an ICMP error: the timer resends it
            log.debug("send of seq %d failed: %s", seq, exc)
        self._counts["resent" if resend else "sent"] += 1

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass

    def _receive(self) -> None:
        recv_into = self._sock.recv_into
        for _ in range(4 * self._window + 64):  # bounded, so timers still run under a flood
            try:
                size = recv_into(self._rx)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. ICMP port unreachable from a dead switch
                log.debug("receive failed: %s", exc)
                return
            self._on_datagram(size)

    def _on_datagram(self, size: int) -> None:
        """Take the datagram of `size` bytes in the receive buffer, if it is a sum we wait for.

        Anything else (malformed, another kind or job, a late duplicate) is counted ignored;
        the header is checked here rather than by ``protocol.decode``, which would build a
        `Packet` and byte-swap lanes that `Transfer.take` only needs to copy.
        """
        (version, kind, _, job, _, _, _, seq, _, _, lanes, _) = HEADER.unpack_from(self._rx)
        t = None
        if (
            size == self._datagram_size
            and version == VERSION
            and lanes == self.join.lanes
            and kind in _RESULT_KINDS
            and job == self.join.switch_job_id
        ):
            t = self._transfer_of(seq)
        if t is None or not t.take(seq - t.first_seq, self._rx_view[:size]):
            self._counts["ignored"] += 1
            return
        now = time.monotonic()
        self._last_progress = now
        via_switch = kind == _RESULT_KINDS[0]
        self._counts["results_switch" if via_switch else "results_ps"] += 1
        self._counts["bytes_switch" if via_switch else "bytes_ps"] += 4 * self.join.lanes
        timing = self._inflight.pop(seq, None)
        if timing is not None and timing[1] == 0:
            self._timer.sample(now - timing[0])
        if seq > self._answered:
            self._answered = seq
        if t.remaining == 0:
            t.finish()
        self._advance_low()

    def _patience(self) -> float:
        srtt = self._timer.srtt
        return 2 * srtt if srtt is not None else self.options.min_rto_s

    def _fast_retransmit(self, now: float) -> None:
        """Resend, once, fragments overtaken by more than `_REORDER` sequences and older than
        twice the smoothed round trip.

        Every worker sends in sequence order, so sums complete nearly in order; a fragment
        left behind lost a contribution or its result. Waiting out the timeout instead would
        stall the whole window (a PS detour reorders a little, hence the slack). This runs on
        every turn of the I/O loop, not only when a result arrives: when the window is stuck
        behind the lost fragment, no further result would come to trigger it.
        """
        patience = self._patience()
        limit = self._answered - _REORDER
        for seq, timing in self._inflight.items():  # insertion order: first-send order
            if seq >= limit:
                return
            if timing[1] == 0 and now - timing[0] > patience:
                timing[1] = 1.0
                t = self._transfer_of(seq)
                if t is not None:
                    self._send(t, seq, resend=True)
                    self._counts["fast_resent"] += 1
                    self._timer.arm(seq, 1, now)

    def _fast_wait(self, now: float) -> float:
        """Seconds until `_fast_retransmit` has something to do (at most 0.5)."""
        limit = self._answered - _REORDER
        for seq, timing in self._inflight.items():
            if seq >= limit:
                break
            if timing[1] == 0:  # the oldest overtaken fragment not resent yet
                return max(0.0, min(0.5, timing[0] + self._patience() - now))
        return 0.5

    def _advance_low(self) -> None:
        while self._transfers:
            t = self._transfers[0]
            while self._low < t.end_seq and t.done[self._low - t.first_seq]:
                self._low += 1
            if self._low < t.end_seq:
                return
            self._transfers.pop(0)

    def _retransmit(self, now: float) -> None:
        inflight = self._inflight  # insertion order: the oldest fragment first
        for seq, attempt in self._timer.due(now):
            timing = inflight.get(seq)
            if timing is None or timing[1] != attempt:
                continue  # answered, or superseded by a later timer
            t = self._transfer_of(seq)
            if t is None:
                continue
            stalled = self._last_progress < min(timing[0], self._last_timeout_resend)
            if stalled and seq != next(iter(inflight)):
                # Nothing at all came back since this fragment was sent, nor since the last
                # timeout resend: the switch or a peer is stalled, not this fragment alone (a
                # peer that has not sent yet looks exactly like loss). As TCP does, only the
                # oldest fragment is resent (with back-off) until results flow again; resending
                # the whole window would flush every partial sum to the PS. Fragments that saw
                # results come back after them are lost, and are resent at once.
                self._timer.arm(seq, attempt, now)
                continue
            timing[1] = attempt + 1
            self._send(t, seq, resend=True)
            self._last_timeout_resend = now
            self._timer.arm(seq, attempt + 1, now)

    def _check_progress(self, now: float) -> None:
        if not self._inflight or now - self._last_progress <= self.options.timeout_s:
            return
        seq = min(self._inflight)
        error = AllreduceTimeout(
            self.join.switch_job_id,
            seq,
            self.options.timeout_s,
            int(self._inflight[seq][1]),
            f"{self._switch[0]}:{self._switch[1]}",
        )
        log.info("%s", error)
        self._fail_all(error)

    def _fail_all(self, error: BaseException) -> None:
        with self._lock:
            if self._broken is None and not isinstance(error, ClientClosed):
                self._broken = error
            pending = list(self._submitted)
            self._submitted.clear()
        for t in self._transfers + pending:
            t.finish(error)
        self._transfers.clear()
        self._inflight.clear()
        self._timer.clear()
        self._send_seq = self._low = self._assigned
