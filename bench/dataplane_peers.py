"""The peers and senders of ``bench.dataplane``: servers in processes of their own, and
sender processes that keep a window of fragments in flight with GSO/GRO bursts.

A sender stops at its first lost datagram (its closed loop cannot recover it) and reports what
it sent and got back; `Senders.run` answers with every sender's counts, so a run that lost
datagrams is a result with its loss, not an error."""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import multiprocessing as mp
import socket
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event

import numpy as np
import numpy.typing as npt
from p4ctl.client import SwitchClient
from p4ctl.dataplane import BURST_SLOTS
from p4ctl.engine import Burst, pack_address
from p4ctl.protocol import HEADER_DTYPE, HEADER_SIZE, Kind, Packet, Policy, encode
from p4ctl.rule import JobConfig, static_index
from p4ctl.softswitch import SoftSwitch

__all__ = [
    "AGGREGATORS",
    "JOB",
    "PEERS",
    "Delivery",
    "Peer",
    "Senders",
    "Served",
    "fragment_rows",
    "servers",
    "stamp",
]

log = logging.getLogger(__name__)

AGGREGATORS = 4096
JOB = 1
# Rows per receive burst of a sender: a window of results, whatever GRO merged.
SENDER_SLOTS = 2048
SOCKET_BUFFER = 8 << 20  # the kernel caps it at net.core.[rw]mem_max
RECV_TIMEOUT_S = 5.0
_SEQ = slice(HEADER_DTYPE.fields["seq"][1], HEADER_DTYPE.fields["seq"][1] + 4)


@dataclass(frozen=True)
class Peer:
    """One server the senders measure: the soft switch ("agg") or the GSO/GRO echo."""

    role: str  # "agg" or "echo"
    label: str


PEERS = (Peer("agg", "soft switch"), Peer("echo", "GSO/GRO echo"))


# ------------------------------------------------------------------ fragments


def fragment_rows(worker: int, senders: int, lanes: int, window: int) -> npt.NDArray[np.uint8]:
    """``(2 window, datagram)`` rows: worker `worker`'s fragment for every seq mod 2 window
    (slot and copy repeat with that period); `stamp` writes the real seq before a row is sent."""
    cfg = JobConfig(JOB, Policy.STATIC, senders, part_base=0, part_size=window)
    body = np.full(lanes, worker + 1, dtype=np.int32)
    rows = np.zeros((2 * window, HEADER_SIZE + 4 * lanes), np.uint8)
    for seq in range(2 * window):
        index, shadow = static_index(cfg, seq)
        packet = Packet(
            kind=Kind.GRADIENT,
            job=JOB,
            worker=worker,
            fan_in=senders,
            agg_index=index,
            shadow=shadow,
            seq=seq,
            bitmap=1 << worker,
            lanes=body,
        )
        rows[seq] = np.frombuffer(encode(packet), np.uint8)
    return rows


def stamp(rows: npt.NDArray[np.uint8], first: int, count: int) -> npt.NDArray[np.int64]:
    """Write seqs ``first..first+count`` into their rows; returns the rows' indices."""
    seqs = np.arange(first, first + count, dtype=np.int64)
    order = seqs % len(rows)
    rows[order, _SEQ] = seqs.astype(">u4").view(np.uint8).reshape(-1, 4)
    return order


# ------------------------------------------------------------------ sockets


def _udp_socket(timeout_s: float | None = None) -> socket.socket:
    """A blocking loopback UDP socket with large buffers; `timeout_s` bounds a blocking
    receive in the kernel (SO_RCVTIMEO), so a burst receive fails with EAGAIN after it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for option in (socket.SO_RCVBUF, socket.SO_SNDBUF):
        sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER)
    if timeout_s is not None:
        seconds = int(timeout_s)
        timeval = struct.pack("ll", seconds, int((timeout_s - seconds) * 1e6))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
    sock.bind(("127.0.0.1", 0))
    return sock


def _idle(exc: OSError) -> bool:
    """A receive that timed out, or the ICMP error of an earlier send: not a failure."""
    return exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.ECONNREFUSED)


# ------------------------------------------------------------------ servers


def _switch_server(conn: Connection, stop: Event, lanes: int) -> None:
    logging.basicConfig(level=logging.WARNING)
    with SoftSwitch(aggregators=AGGREGATORS, lanes=lanes) as switch:
        conn.send((switch.data_address, switch.p4runtime_address))
        stop.wait()


def _burst_echo_server(conn: Connection, stop: Event, lanes: int) -> None:
    """Every datagram back to its source, a burst at a time: the engine switch's I/O (same
    burst size, GRO in, GSO out) without its packet pass. GRO keeps a source's datagrams
    together, so they leave in runs of one destination with no reordering."""
    with _udp_socket(timeout_s=0.5) as sock:
        burst = Burst(BURST_SLOTS, HEADER_SIZE + 4 * lanes)
        burst.enable_gro(sock)
        conn.send((sock.getsockname(), None))
        while not stop.is_set():
            try:
                count, _ = burst.recv(sock, wait=True)
            except OSError as exc:
                if _idle(exc):
                    continue
                raise
            burst.send(sock, burst.rows, burst.sizes, burst.addrs, count)


def _server_for(peer: Peer) -> Callable[[Connection, Event, int], None]:
    return _switch_server if peer.role == "agg" else _burst_echo_server


@dataclass(frozen=True)
class Served:
    """Where a running peer listens, and the P4Runtime client of a switch (None for an echo)."""

    data: tuple[str, int]
    control: SwitchClient | None
    pid: int


@contextlib.contextmanager
def servers(lanes: int) -> Iterator[dict[Peer, Served]]:
    """Every peer serving `lanes` lanes in a process of its own (a switch with its control
    client connected once: setting the pipeline takes seconds)."""
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    procs, served = [], {}
    try:
        for peer in PEERS:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_server_for(peer), args=(child, stop, lanes), daemon=True)
            proc.start()
            child.close()  # so that a server that dies is an EOFError here, not a hang
            procs.append(proc)
            data, p4runtime = parent.recv()
            control = None
            if p4runtime is not None:
                control = SwitchClient(p4runtime, aggregators=AGGREGATORS, lanes=lanes)
            served[peer] = Served(data, control, proc.pid or 0)
        yield served
    finally:
        for entry in served.values():
            if entry.control is not None:
                entry.control.close()
        stop.set()
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.terminate()


# ------------------------------------------------------------------ senders


@dataclass(frozen=True)
class SenderRun:
    """One sender's run: when it began and ended, datagrams sent and received back, and what
    stopped it early (empty when it finished)."""

    began: float
    ended: float
    sent: int
    received: int
    error: str = ""


@dataclass(frozen=True)
class Delivery:
    """One run of the senders against a peer: fragments per second (NaN when a sender stopped
    on a loss), datagrams sent and received back over all senders, and what each sender that
    stopped early saw. `lost`: sent and not back when the run ended."""

    fps: float
    sent: int
    received: int
    errors: tuple[str, ...] = ()

    @property
    def lost(self) -> int:
        return self.sent - self.received


def _closed_loop(
    sock: socket.socket,
    burst: Burst,
    rows: npt.NDArray[np.uint8],
    target: tuple[str, int],
    count: int,
) -> SenderRun:
    """Send seqs 0..count-1 keeping a window of ``len(rows) / 2`` outstanding; one datagram
    back frees one."""
    sizes = np.full(len(rows), rows.shape[1], np.int64)
    addrs = np.full(len(rows), pack_address(target), np.int64)
    began = time.perf_counter()
    sent = min(len(rows) // 2, count)
    refused = burst.send(
        sock, rows, sizes, addrs, sent, stride=rows.shape[1], order=stamp(rows, 0, sent)
    )
    received = 0
    while received < count:
        try:
            got, lost = burst.recv(sock, wait=True)
        except OSError as exc:
            if not _idle(exc):
                raise
            got, lost = 0, 0
        if not got:  # SO_RCVTIMEO passed with nothing received: the window is lost
            return SenderRun(began, time.perf_counter(), sent, received, "timeout")
        if lost or refused:
            return SenderRun(
                began, time.perf_counter(), sent, received, f"{lost + refused} dropped"
            )
        received += got
        more = min(got, count - sent)
        if more > 0:
            order = stamp(rows, sent, more)
            refused = burst.send(sock, rows, sizes, addrs, more, stride=rows.shape[1], order=order)
            sent += more
    return SenderRun(began, time.perf_counter(), sent, received)


def _sender(conn: Connection, timeout_s: float) -> None:
    """A sending process: ``(worker, senders, lanes, window, count, target)`` -> "ready", then
    "go" -> `SenderRun`; None ends it. Its socket (address) lives as long as it does; a
    receive that waits `timeout_s` for nothing ends its run."""
    with _udp_socket(timeout_s=timeout_s) as sock:
        conn.send(sock.getsockname())
        while (command := conn.recv()) is not None:
            worker, senders, lanes, window, count, target = command
            rows = fragment_rows(worker, senders, lanes, window)
            burst = Burst(SENDER_SLOTS, rows.shape[1])
            burst.enable_gro(sock)
            with contextlib.suppress(OSError):
                while burst.recv(sock, wait=False)[0]:
                    pass  # what a failed run left behind
            conn.send("ready")
            conn.recv()
            try:
                run = _closed_loop(sock, burst, rows, target, count)
            except OSError as exc:
                run = SenderRun(0.0, 0.0, 0, 0, f"{exc!r}")
            conn.send(run)


class Senders:
    """`most` sender processes, reused by every run (spawned once: their addresses stay); a
    sender waits `timeout_s` for a datagram before it counts its window lost."""

    def __init__(self, most: int, timeout_s: float = RECV_TIMEOUT_S) -> None:
        ctx = mp.get_context("spawn")
        self._conns: list[Connection] = []
        self._procs = []
        for _ in range(most):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_sender, args=(child, timeout_s), daemon=True)
            proc.start()
            child.close()  # so that a sender that dies is an EOFError here, not a hang
            self._conns.append(parent)
            self._procs.append(proc)
        self.addresses: list[tuple[str, int]] = [c.recv() for c in self._conns]

    def run(
        self, senders: int, lanes: int, window: int, count: int, target: tuple[str, int]
    ) -> Delivery:
        """What the first `senders` processes, each sending `count`, got through `target`."""
        conns = self._conns[:senders]
        for worker, conn in enumerate(conns):
            conn.send((worker, senders, lanes, window, count, target))
        for conn in conns:
            conn.recv()
        for conn in conns:
            conn.send("go")
        runs: list[SenderRun] = [conn.recv() for conn in conns]
        errors = tuple(
            f"worker {w}: {r.error} after {r.received} of {r.sent} back"
            for w, r in enumerate(runs)
            if r.error
        )
        elapsed = max(r.ended for r in runs) - min(r.began for r in runs)
        fps = math.nan if errors else senders * count / elapsed
        sent, received = sum(r.sent for r in runs), sum(r.received for r in runs)
        return Delivery(fps, sent, received, errors)

    def close(self) -> None:
        for conn in self._conns:
            with contextlib.suppress(OSError):  # a sender that died has nothing to end
                conn.send(None)
        for proc in self._procs:
            proc.join(timeout=30)
