"""The parameter server: finishes, over UDP, the sums the switch could not.

One process (one socket, one thread) serves many jobs. The switch sends it TO_PS packets:
bypassed fragments, evicted and flushed partial sums, and complete sums (atp, and esa's copy).
`JobLedger` counts each worker once per sequence; a completed sum goes back as PS_RESULT to
the switch's data address, which multicasts it to the workers and, in atp, frees the
aggregator. A spill job (``p4/PROTOCOL.md`` 7.8) sends its ToRs' sums as kind UP, and every
result goes to each of its ToRs. Results are kept to answer resends until every worker moved on.

The PS serves only jobs the service registered (`register_job`), and takes packets only from
that job's switches. Every packet is on a critical path except esa's completion copies, so it
serves what the socket holds first and stores the copies when it is empty (at most
`MAX_QUEUED_COPIES` wait). Everything else is dropped and counted by reason
(`PsCounters.drops`); memory stays bounded (`max_results`, `idle_timeout_s`). Datagrams move
in bursts through the compiled engine (``p4ctl.engine``; `gso` off: one datagram per message).
"""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from p4ctl.engine import Burst, pack_address, unpack_address
from p4ctl.protocol import (
    HEADER_SIZE,
    MAX_JOBS,
    MAX_WORKERS,
    SUPPORTED_LANES,
    Kind,
    MalformedPacket,
    Packet,
    Policy,
    decode,
    encode,
)

from workers.accumulator import JobLedger, is_esa_copy

__all__ = [
    "DEFAULT_WINDOW",
    "MAX_QUEUED_COPIES",
    "ParameterServer",
    "PsCounters",
]

log = logging.getLogger(__name__)

# Unknown window: keep results until every worker is this many sequences past them. Larger
# than any window the service hands out (W <= 1024 in-flight fragments), so never too early.
DEFAULT_WINDOW = 1024
_SWEEP_S = 0.2
# esa copies waiting for an empty socket, at most (each holds one fragment's lanes).
MAX_QUEUED_COPIES = 65536
# Copies stored per turn of the serving loop before the socket is looked at again.
_COPY_BATCH = 64
# Datagrams served per turn of the serving loop, at most, so the idle sweep runs under a flood.
_DRAIN_LIMIT = 1024
# Enum members as module constants: ``Kind.TO_PS`` is an attribute lookup through the enum's
# metaclass, a measurable share of the per-datagram cost.
_TO_PS = Kind.TO_PS
_UP = Kind.UP
_ESA = Policy.ESA
# A row of a burst: the longest datagram any switch sends. A longer one is
# cut to this, and dropped by its real length.
_ROW_BYTES = HEADER_SIZE + 4 * max(SUPPORTED_LANES)
# Rows of a burst: 64 GRO messages of at most 64 datagrams each (a sender that segments as the
# engine does, or a NIC's GRO, stops at 64), so a burst always has room for what one receive
# takes, whatever the datagrams' size; a sender segmenting more (the kernel allows 128) can
# overfill one, and what has no row is counted as burst_full. With rows for k=1,024 that is
# 16 MiB per PS. Replies leave in bursts of at most `_SEND_SLOTS`.
_BURST_SLOTS = 64 * 64
_SEND_SLOTS = 1024

# Datagrams to send and where to (several: a spill job's result goes to each of its ToRs).
_Reply = list[tuple[bytes, tuple[str, int]]]


@dataclass(frozen=True, slots=True)
class PsCounters:
    """Packets seen, results sent (`completed`) and re-sent (`answered`), drops by reason."""

    received: int
    outcomes: Mapping[str, int]  # added, completed, stored, answered, duplicate
    drops: Mapping[str, int]
    jobs: frozenset[int]  # jobs with live state
    copies_queued: int = 0  # esa completion copies waiting to be stored


@dataclass(slots=True)
class _Job:
    fan_in: int
    switch: tuple[str, int]
    window: int
    policy: Policy | None
    children: frozenset[tuple[str, int]] = frozenset()
    spill: bool = False
    lanes: int | None = None
    ledger: JobLedger | None = None
    last_active: float = field(default_factory=time.monotonic)


class _BurstIO:
    """The buffers of one socket: received rows ``[next, held)`` not yet served, and rows for
    a burst of replies."""

    def __init__(self, sock: socket.socket, *, gso: bool) -> None:
        self.sock = sock
        self.burst = Burst(_BURST_SLOTS, _ROW_BYTES, gso=gso)
        self.burst.enable_gro(sock)
        self.rows = self.burst.rows.data.cast("B")
        self.next = self.held = 0
        self.out = np.zeros((_SEND_SLOTS, _ROW_BYTES), np.uint8)
        self.out_rows = self.out.data.cast("B")
        self.out_sizes = np.zeros(_SEND_SLOTS, np.int64)
        self.out_addrs = np.zeros(_SEND_SLOTS, np.int64)

    def receive(self) -> int:
        """Refill the rows from the socket; returns the datagrams that had no row (the rows
        held are ``[0, held)``, none when the socket is empty or failed)."""
        self.next = self.held = 0
        try:
            self.held, lost = self.burst.recv(self.sock, wait=False)
        except OSError as exc:
            log.debug("receive failed: %s", exc)
            return 0
        return int(lost)

    def send(self, replies: list[tuple[bytes, tuple[str, int]]]) -> None:
        """Send `replies` as bursts (each fits a row: it has the lanes of a datagram that did)."""
        packed_to: tuple[str, int] | None = None
        packed = 0
        for first in range(0, len(replies), _SEND_SLOTS):
            count = 0
            for data, addr in replies[first : first + _SEND_SLOTS]:
                if addr != packed_to:
                    packed_to, packed = addr, pack_address(addr)
                at = count * _ROW_BYTES
                self.out_rows[at : at + len(data)] = data
                self.out_sizes[count] = len(data)
                self.out_addrs[count] = packed
                count += 1
            failed = self.burst.send(self.sock, self.out, self.out_sizes, self.out_addrs, count)
            if failed:  # the workers' resends will ask again
                log.debug("%d of %d replies not sent", failed, count)


class ParameterServer:
    """An embeddable PS: `start`, `register_job`, `counters`, `stop` (see module docstring).

    `gso` (default on) sends runs of replies as UDP GSO messages (``p4ctl.engine.Burst``).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        idle_timeout_s: float = 60.0,
        max_results: int = 8192,
        gso: bool = True,
    ) -> None:
        self.idle_timeout_s = idle_timeout_s
        self.max_results = max_results
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 * 1024 * 1024)
            self._sock.bind((host, port))
        except OSError:
            self._sock.close()
            raise
        self._sock.setblocking(False)
        try:
            self._io = _BurstIO(self._sock, gso=gso)
            self.gso = gso
        except BaseException:
            self._sock.close()
            raise
        self._wake_r, self._wake_w = socket.socketpair()
        self._lock = threading.Lock()
        self._jobs: dict[int, _Job] = {}
        self._received = 0
        self._outcomes: dict[str, int] = {}
        self._drops: Counter[str] = Counter()
        self._copies: deque[tuple[_Job, Packet]] = deque()
        self._stopping = False
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)`` the PS receives on (register it as worker 255 of each job)."""
        host, port = self._sock.getsockname()[:2]
        return str(host), int(port)

    def start(self) -> ParameterServer:
        """Serve in a background thread; returns self."""
        self._thread = threading.Thread(target=self._serve, name="inasched-ps", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket; idempotent."""
        self._stopping = True
        if self._thread is not None:
            self._wake_w.send(b"\0")
            self._thread.join()
            self._thread = None
        for s in (self._sock, self._wake_r, self._wake_w):
            s.close()

    def __enter__(self) -> ParameterServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def register_job(
        self,
        job_id: int,
        fan_in: int,
        *,
        switch: tuple[str, int],
        window: int | None = None,
        policy: Policy | str | None = None,
        fresh: bool = False,
        children: tuple[tuple[str, int], ...] = (),
        spill: bool = False,
    ) -> None:
        """Serve job `job_id` (switch job id) with `fan_in` workers; idempotent.

        `switch` is the data address of the job's switch, or of the root (spine) of its tree:
        its packets are accepted and results go there, down through every level. `children`
        are the data addresses of the other switches of a two-level job's tree (its ToRs),
        whose packets are accepted too (``p4/PROTOCOL.md`` 7.2). `spill`: the job has no root,
        `switch` and `children` are its ToRs, whose parent is this PS (7.8): their UP packets
        are taken, and every result goes to each of them. `window` the workers' W;
        `policy` the job's policy. `fresh`: a new job takes the id, so whatever is kept under
        it goes, even when its removal never reached this PS.
        """
        if not 0 <= job_id < MAX_JOBS or not 1 <= fan_in <= MAX_WORKERS:
            raise ValueError(f"job {job_id} with fan_in {fan_in} is out of range")
        if not 0 < switch[1] < 65536:
            raise ValueError(f"switch port {switch[1]} is out of range")
        for child in children:
            if not 0 < child[1] < 65536:
                raise ValueError(f"switch port {child[1]} is out of range")
        pol = Policy.parse(policy) if isinstance(policy, str) else policy
        addr = (socket.gethostbyname(switch[0]), switch[1])
        below = frozenset((socket.gethostbyname(host), port) for host, port in children)
        with self._lock:
            kept = self._jobs.get(job_id)
            same = kept is not None and (
                kept.fan_in,
                kept.switch,
                kept.window,
                kept.policy,
                kept.children,
                kept.spill,
            ) == (fan_in, addr, window or DEFAULT_WINDOW, pol, below, spill)
            if same and not fresh:
                return  # registered again by a new term: what it holds for the job stays
            self._jobs[job_id] = _Job(fan_in, addr, window or DEFAULT_WINDOW, pol, below, spill)

    def remove_job(self, job_id: int) -> None:
        """Forget job `job_id` and everything kept for it; idempotent."""
        with self._lock:
            self._jobs.pop(job_id, None)

    def counters(self) -> PsCounters:
        """A snapshot of the counters."""
        with self._lock:
            live = frozenset(j for j, s in self._jobs.items() if s.ledger is not None)
            return PsCounters(
                self._received, dict(self._outcomes), dict(self._drops), live, len(self._copies)
            )

    # ------------------------------------------------------------------ serving

    def _serve(self) -> None:
        next_sweep = time.monotonic() + _SWEEP_S
        while not self._stopping:
            # Rows of a burst not yet served are datagrams still to read, as in the socket.
            held = self._io.next < self._io.held
            wait = 0.0 if self._copies or held else _SWEEP_S
            readable, _, _ = select.select([self._sock, self._wake_r], [], [], wait)
            if held or self._sock in readable:
                self._drain()
            elif self._copies:
                self._store_copies(_COPY_BATCH)
            now = time.monotonic()
            if now >= next_sweep:
                self._sweep(now)
                next_sweep = now + _SWEEP_S

    def _drain(self) -> None:
        """Serve what the socket holds, a burst at a time and at most 1024 datagrams a turn
        (so the idle sweep still runs under a flood); rows past the turn's limit wait in the
        burst for the next turn, and esa's copies among them wait in `_copies`."""
        io = self._io
        budget = _DRAIN_LIMIT
        while budget > 0:
            if io.next == io.held:
                lost = io.receive()
                if lost:
                    with self._lock:
                        self._received += lost
                        self._drops["burst_full"] += lost
                if io.held == 0:
                    return
            end = min(io.held, io.next + budget)
            self._serve_rows(io, io.next, end)
            budget -= end - io.next
            io.next = end

    def _serve_rows(self, io: _BurstIO, start: int, end: int) -> None:
        """`_handle` received rows ``[start, end)``, then send their replies as one burst."""
        replies: list[tuple[bytes, tuple[str, int]]] = []
        sizes = io.burst.sizes[start:end].tolist()
        sources = io.burst.addrs[start:end].tolist()
        unpacked_from, source = -1, ("", 0)
        with self._lock:  # once per burst: this runs on the PS's only thread
            for row, (size, packed) in enumerate(zip(sizes, sources, strict=True), start):
                if packed != unpacked_from:  # a burst mostly comes from one switch
                    unpacked_from, source = packed, unpack_address(packed)
                at = row * _ROW_BYTES
                if size > _ROW_BYTES:
                    reply = self._handle_cut(io.rows[at : at + _ROW_BYTES], size)
                else:
                    reply = self._handle(io.rows[at : at + size], source)
                replies += reply
        if replies:
            io.send(replies)

    def _store_copies(self, batch: int) -> None:
        """Store up to `batch` queued esa copies (the socket was empty)."""
        replies: _Reply = []
        with self._lock:  # once per batch: this runs on the PS's only thread, between reads
            for _ in range(min(batch, len(self._copies))):
                job, pkt = self._copies.popleft()
                if self._jobs.get(pkt.job) is job:  # else removed meanwhile, state and all
                    replies += self._accept(job, pkt)
        self._io.send(replies)

    def _drop(self, reason: str) -> _Reply:
        """Count a dropped datagram; returns no reply, so `_handle` can ``return self._drop()``."""
        self._drops[reason] += 1
        return []

    def _handle_cut(self, head: memoryview, size: int) -> _Reply:
        """Account a datagram of `size` bytes cut to its first bytes `head`: it
        is dropped for the reason `decode` gives its length and header, or as bad_lanes when
        those are well formed (more lanes than any supported k)."""
        self._received += 1
        try:
            decode(bytes(head) + bytes(size - len(head)))
        except MalformedPacket as exc:
            return self._drop(exc.reason.name.lower())
        return self._drop("bad_lanes")

    def _handle(self, data: bytes | memoryview, addr: tuple[str, int]) -> _Reply:
        """Account one datagram; returns the reply to send, if any (caller holds the lock)."""
        self._received += 1
        try:
            pkt = decode(data)
        except MalformedPacket as exc:
            return self._drop(exc.reason.name.lower())
        job = self._jobs.get(pkt.job)
        # A spill job's ToRs send what goes to their parent as UP: to the PS it is a TO_PS.
        if pkt.kind != _TO_PS and not (pkt.kind == _UP and job is not None and job.spill):
            return self._drop("not_to_ps")
        if job is None:
            return self._drop("unknown_job")
        if addr != job.switch and addr not in job.children:
            return self._drop("foreign_source")
        if pkt.fan_in != job.fan_in:
            return self._drop("bad_fan_in")
        if pkt.bitmap == 0 or pkt.bitmap >> job.fan_in:
            return self._drop("bad_bitmap")
        lanes = len(pkt.lanes)
        if job.lanes is None:
            job.lanes = lanes
        if lanes != job.lanes:
            return self._drop("bad_lanes")
        job.last_active = time.monotonic()
        if (
            job.policy == _ESA  # is_esa_copy's first condition, without its call
            and is_esa_copy(job.policy, job.fan_in, pkt)
            and len(self._copies) < MAX_QUEUED_COPIES
        ):
            self._copies.append((job, pkt))
            return []
        return self._accept(job, pkt)

    def _accept(self, job: _Job, pkt: Packet) -> _Reply:
        """The job's ledger takes a validated packet; returns the reply (caller holds the lock)."""
        if job.ledger is None:
            job.ledger = JobLedger(pkt.job, job.fan_in, job.window, job.policy, self.max_results)
        accepted = job.ledger.accept(pkt)
        outcome = accepted.outcome
        if outcome == "stale" or outcome == "overflow":
            return self._drop(outcome)
        self._outcomes[outcome] = self._outcomes.get(outcome, 0) + 1  # a Counter's += is slower
        if accepted.reply is None:
            return []
        data = encode(accepted.reply)
        if job.spill:  # no root: each ToR multicasts to its workers and frees its aggregator
            return [(data, job.switch)] + [(data, c) for c in sorted(job.children - {job.switch})]
        return [(data, job.switch)]

    def _sweep(self, now: float) -> None:
        with self._lock:
            for job_id, job in list(self._jobs.items()):
                if job.ledger is None or now - job.last_active <= self.idle_timeout_s:
                    continue
                log.info("job %d idle for %.0f s: state freed", job_id, now - job.last_active)
                job.ledger = None
