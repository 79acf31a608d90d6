"""The compiled data path of the client (the default): fragments move in bursts.

Sending. The datagrams of a `Transfer` are built contiguously (``Transfer.datagrams``), so
every fragment the window lets out of one transfer leaves in one ``Burst.send``: sendmmsg,
with consecutive same-size datagrams to the switch merged into UDP GSO messages (up to 64
segments each). Resends are copied into one buffer, flagged RESEND with one array operation,
and sent the same way.

Receiving. UDP GRO is on for the socket, and one ``Burst.recv`` takes what is queued. The
burst is checked with numpy through ``protocol.HEADER_DTYPE`` (size, version, lanes, kind,
job, a sequence sent and not yet answered), and ``Transfer.take_many`` stores the first result
of each fragment; malformed or foreign datagrams and duplicates count as ignored.

`Inflight` keeps send times, attempts and deadlines in arrays over the window, and takes the
decisions of `workers.fragment_io` a burst at a time.
"""

from __future__ import annotations

import logging
import socket
import time
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
from p4ctl.engine import Burst, pack_address
from p4ctl.protocol import HEADER_DTYPE, HEADER_SIZE, VERSION, Flag, Kind

from workers.fragment_io import REORDER, FragmentIO
from workers.inflight import Inflight
from workers.rendezvous import WorkerJoin

if TYPE_CHECKING:
    from workers.client import ClientOptions

__all__ = ["BurstIO"]

log = logging.getLogger(__name__)

# Messages one receive may take (the kernel's recvmmsg batch in the engine). A GRO message
# holds up to 64 KiB of segments, so the burst has rows for that many full messages.
_MESSAGES = 64
_GRO_BYTES = 65536
_RESEND = int(Flag.RESEND)
_RESULT = int(Kind.RESULT)
_PS_RESULT = int(Kind.PS_RESULT)


class BurstIO(FragmentIO):
    """Bursts through ``p4ctl.engine.Burst`` (see the module docstring)."""

    def __init__(self, join: WorkerJoin, sock: socket.socket, options: ClientOptions) -> None:
        super().__init__(join, sock, options)
        stride = self.datagram_size
        self._burst = Burst(slots=_MESSAGES * max(1, _GRO_BYTES // stride), stride=stride)
        if not self._burst.enable_gro(sock):
            log.debug("UDP GRO refused; results come one datagram per message")
        self._inflight = Inflight(self.window, self.timer)
        # Every datagram goes to the switch and has the job's size: one row of each per slot.
        self._sizes = np.full(self.window, stride, np.int64)
        self._addrs = np.full(self.window, pack_address(self.switch), np.int64)
        self._resends = np.empty((self.window, stride), np.uint8)

    def oldest_inflight(self) -> tuple[int, int] | None:
        return self._inflight.oldest(self.low, self.send_seq)

    def clear_inflight(self) -> None:
        self._inflight.clear()

    # ---------------------------------------------------------------------- sending

    def send_new(self) -> None:
        while self.send_seq < self.assigned and self.send_seq < self.low + self.window:
            seq = self.send_seq
            t = self.transfer_of(seq)
            if t is None:  # a failed transfer's sequences: nothing to send
                later = [u.first_seq for u in self.transfers if u.first_seq > seq]
                self.send_seq = min(later, default=self.assigned)
                continue
            if not t.active:
                if not t.ready():
                    return  # its exponents wait for the previous allreduce of this tensor
                t.activate()
            high = min(t.end_seq, self.low + self.window)
            rows = t.datagrams(seq - t.first_seq, high - t.first_seq, self.sender)
            self._send(rows, "first sends")
            # Stamped after the send: building a chunk of datagrams must not count as delay.
            self._inflight.sent(seq, high, time.monotonic())
            self.counts["sent"] += high - seq
            self.send_seq = high

    def _send(self, rows: npt.NDArray[np.uint8], what: str) -> None:
        count = len(rows)
        failed = self._burst.send(self.sock, rows, self._sizes, self._addrs, count)
        if failed:  # a full buffer or an ICMP error: the timer resends them
            log.debug("%d of %d %s were refused by the kernel", failed, count, what)

    def _resend(self, seqs: npt.NDArray[np.int64], what: str) -> None:
        """Send fragments `seqs` (all in flight) again, flagged RESEND, in one burst."""
        rows = self._resends[: seqs.size]
        for t in self.transfers:
            mine = (seqs >= t.first_seq) & (seqs < t.end_seq)
            if mine.any():
                built = t.datagrams(0, min(t.end_seq, self.send_seq) - t.first_seq, self.sender)
                rows[mine] = built[seqs[mine] - t.first_seq]
        head = rows[:, :HEADER_SIZE].view(HEADER_DTYPE)[:, 0]
        head["flags"] |= _RESEND
        self._send(rows, what)
        self.counts["resent"] += seqs.size

    # -------------------------------------------------------------------- receiving

    def receive(self) -> None:
        try:
            count, lost = self._burst.recv(self.sock, wait=False)
        except OSError as exc:  # e.g. ICMP port unreachable from a dead switch
            log.debug("receive failed: %s", exc)
            return
        if lost:
            log.debug("%d datagrams did not fit the receive burst", lost)
        if count:
            self._take(count)

    def _take(self, count: int) -> None:
        """Store the results among the first `count` rows of the burst; count the rest."""
        rows = self._burst.rows[:count]
        head = rows[:, :HEADER_SIZE].view(HEADER_DTYPE)[:, 0]
        seq = head["seq"].astype(np.int64)
        kind = head["kind"]
        # Only a fragment this worker sent can have a sum (every one needs its contribution).
        wanted = np.flatnonzero(
            (self._burst.sizes[:count] == self.datagram_size)
            & (head["version"] == VERSION)
            & (head["lanes"] == self.join.lanes)
            & ((kind == _RESULT) | (kind == _PS_RESULT))
            & (head["job"] == self.join.switch_job_id)
            & (seq >= self.low)
            & (seq < self.send_seq)
        )
        taken = np.zeros(count, np.bool_)
        for t in self.transfers if wanted.size else ():
            mine = wanted[(seq[wanted] >= t.first_seq) & (seq[wanted] < t.end_seq)]
            if mine.size:
                taken[mine[t.take_many(rows, mine, seq[mine] - t.first_seq)]] = True
                if t.remaining == 0:
                    t.finish()
        results = int(np.count_nonzero(taken))
        self.counts["ignored"] += count - results
        if results == 0:
            return
        now = time.monotonic()
        self.last_progress = now
        via_switch = int(np.count_nonzero(kind[taken] == _RESULT))
        lane_bytes = 4 * self.join.lanes
        self.counts["results_switch"] += via_switch
        self.counts["results_ps"] += results - via_switch
        self.counts["bytes_switch"] += lane_bytes * via_switch
        self.counts["bytes_ps"] += lane_bytes * (results - via_switch)
        answered = seq[taken]
        self._inflight.answered(answered, now)
        self.answered = max(self.answered, int(answered.max()))
        self.advance_low()

    # ----------------------------------------------------------------------- timers

    def wait_time(self, now: float) -> float:
        wait = min(0.5, self._inflight.next_deadline() - now)
        limit = self.answered - REORDER
        if self.low < limit:  # else nothing in flight is overtaken (all of it is >= low)
            fast = self._inflight.fast_wait(self.low, self.send_seq, limit, now, self.patience())
            wait = min(wait, fast)
        return max(0.0, wait)

    def on_timers(self, now: float) -> None:
        inflight = self._inflight
        if inflight.next_deadline() <= now:
            due = inflight.due(
                self.low, self.send_seq, now, self.last_progress, self.last_timeout_resend
            )
            if due.hold.size:
                inflight.arm(due.hold, due.hold_attempts, now)
            if due.resend.size:
                self._resend(due.resend, "timeout resends")
                inflight.arm(due.resend, due.resend_attempts + 1, now)
                self.last_timeout_resend = now
        limit = self.answered - REORDER
        if self.low >= limit:
            return
        fast = inflight.overtaken(self.low, self.send_seq, limit, now, self.patience())
        if fast.size:
            self._resend(fast, "fast resends")
            self.counts["fast_resent"] += fast.size
            inflight.arm(fast, np.ones(fast.size, np.int64), now)
