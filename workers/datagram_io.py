"""The Python data path of the client (``INASCHED_DATAPATH=python``): a datagram at a time.

One ``sendto`` per fragment, one ``recv_into`` per result, and per fragment in flight one
``[sent_at, attempts]`` dict entry (in first-send order) and one deadline in the
`RetransmitTimer` heap. This is the reference the compiled path (``workers.burst_io``) is
held to; the decisions are stated in the ``workers.client`` module docstring.
"""

from __future__ import annotations

import logging
import socket
import time
from typing import TYPE_CHECKING

from p4ctl.protocol import HEADER, VERSION, Flag, Kind

from workers.fragment_io import REORDER, FragmentIO
from workers.rendezvous import WorkerJoin
from workers.transfer import Transfer

if TYPE_CHECKING:
    from workers.client import ClientOptions

__all__ = ["DatagramIO"]

log = logging.getLogger(__name__)

_MAX_DATAGRAM = 65536
_RESEND = int(Flag.RESEND)
_RESULT_KINDS = (int(Kind.RESULT), int(Kind.PS_RESULT))


class DatagramIO(FragmentIO):
    """A datagram per system call (see the module docstring)."""

    def __init__(self, join: WorkerJoin, sock: socket.socket, options: ClientOptions) -> None:
        super().__init__(join, sock, options)
        self._rx = bytearray(_MAX_DATAGRAM)
        self._rx_view = memoryview(self._rx)
        self._inflight: dict[int, list[float]] = {}  # seq -> [sent_at, attempts]

    def oldest_inflight(self) -> tuple[int, int] | None:
        if not self._inflight:
            return None
        seq = min(self._inflight)
        return seq, int(self._inflight[seq][1])

    def clear_inflight(self) -> None:
        self._inflight.clear()
        self.timer.clear()

    def send_new(self) -> None:
        while self.send_seq < self.assigned and self.send_seq < self.low + self.window:
            seq = self.send_seq
            t = self.transfer_of(seq)
            if t is None:
                self.send_seq += 1  # a failed transfer's sequence: nothing to send
                continue
            if not t.active:
                if not t.ready():
                    return  # its exponents wait for the previous allreduce of this tensor
                t.activate()
            self._send(t, seq, resend=False)
            # Stamped after the send: building a chunk of datagrams must not count as delay.
            now = time.monotonic()
            self._inflight[seq] = [now, 0.0]
            self.timer.arm(seq, 0, now)
            self.send_seq += 1

    def _send(self, t: Transfer, seq: int, resend: bool) -> None:
        datagram: memoryview | bytearray = t.datagram(seq - t.first_seq, self.sender)
        if resend:
            datagram = bytearray(datagram)
            flags = (datagram[2] << 8 | datagram[3]) | _RESEND  # big-endian u16 at offset 2
            datagram[2:4] = flags.to_bytes(2, "big")
        try:
            self.sock.sendto(datagram, self.switch)
        except OSError as exc:  # a full buffer or an ICMP error: the timer resends it
            log.debug("send of seq %d failed: %s", seq, exc)
        self.counts["resent" if resend else "sent"] += 1

    def receive(self) -> None:
        recv_into = self.sock.recv_into
        for _ in range(4 * self.window + 64):  # bounded, so timers still run under a flood
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
            size == self.datagram_size
            and version == VERSION
            and lanes == self.join.lanes
            and kind in _RESULT_KINDS
            and job == self.join.switch_job_id
        ):
            t = self.transfer_of(seq)
        if t is None or not t.take(seq - t.first_seq, self._rx_view[:size]):
            self.counts["ignored"] += 1
            return
        now = time.monotonic()
        self.last_progress = now
        via_switch = kind == _RESULT_KINDS[0]
        self.counts["results_switch" if via_switch else "results_ps"] += 1
        self.counts["bytes_switch" if via_switch else "bytes_ps"] += 4 * self.join.lanes
        timing = self._inflight.pop(seq, None)
        if timing is not None and timing[1] == 0:
            self.timer.sample(now - timing[0])
        if seq > self.answered:
            self.answered = seq
        if t.remaining == 0:
            t.finish()
        self.advance_low()

    def wait_time(self, now: float) -> float:
        return min(self.timer.wait_time(now, 0.5), self._fast_wait(now))

    def on_timers(self, now: float) -> None:
        self._retransmit(now)
        self._fast_retransmit(now)

    def _fast_retransmit(self, now: float) -> None:
        """Resend, once, fragments overtaken by more than `REORDER` sequences and older than
        twice the smoothed round trip.

        Every worker sends in sequence order, so sums complete nearly in order; a fragment
        left behind lost a contribution or its result. Waiting out the timeout instead would
        stall the whole window (a PS detour reorders a little, hence the slack). This runs on
        every turn of the I/O loop, not only when a result arrives: when the window is stuck
        behind the lost fragment, no further result would come to trigger it.
        """
        patience = self.patience()
        limit = self.answered - REORDER
        for seq, timing in self._inflight.items():  # insertion order: first-send order
            if seq >= limit:
                return
            if timing[1] == 0 and now - timing[0] > patience:
                timing[1] = 1.0
                t = self.transfer_of(seq)
                if t is not None:
                    self._send(t, seq, resend=True)
                    self.counts["fast_resent"] += 1
                    self.timer.arm(seq, 1, now)

    def _fast_wait(self, now: float) -> float:
        """Seconds until `_fast_retransmit` has something to do (at most 0.5)."""
        limit = self.answered - REORDER
        for seq, timing in self._inflight.items():
            if seq >= limit:
                break
            if timing[1] == 0:  # the oldest overtaken fragment not resent yet
                return max(0.0, min(0.5, timing[0] + self.patience() - now))
        return 0.5

    def _retransmit(self, now: float) -> None:
        inflight = self._inflight  # insertion order: the oldest fragment first
        for seq, attempt in self.timer.due(now):
            timing = inflight.get(seq)
            if timing is None or timing[1] != attempt:
                continue  # answered, or superseded by a later timer
            t = self.transfer_of(seq)
            if t is None:
                continue
            stalled = self.last_progress < min(timing[0], self.last_timeout_resend)
            if stalled and seq != next(iter(inflight)):
                # Nothing at all came back since this fragment was sent, nor since the last
                # timeout resend: the switch or a peer is stalled, not this fragment alone (a
                # peer that has not sent yet looks exactly like loss). As TCP does, only the
                # oldest fragment is resent (with back-off) until results flow again; resending
                # the whole window would flush every partial sum to the PS. Fragments that saw
                # results come back after them are lost, and are resent at once.
                self.timer.arm(seq, attempt, now)
                continue
            timing[1] = attempt + 1
            self._send(t, seq, resend=True)
            self.last_timeout_resend = now
            self.timer.arm(seq, attempt + 1, now)
