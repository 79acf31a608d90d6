"""What the client's I/O thread owns: the send window, the transfers, and burst UDP I/O.

`BurstIO` holds the transfers in flight and the send window: ``low`` (the lowest seq without
a result) ``<= send_seq <= assigned``, with ``send_seq < low + window``. The client drives one
turn at a time (`accept`, `send_new`, wait up to `wait_time`, `receive`, `on_timers`,
`expired`); the decisions are stated in the ``workers.client`` docstring.

Sending: a `Transfer`'s datagrams are contiguous, so what the window lets out of one transfer
leaves in one ``Burst.send`` (same-size datagrams merged into GSO messages, or one datagram
per message with `gso` off); resends are flagged RESEND with one array operation.
Receiving: one ``Burst.recv`` with GRO takes what is queued; the burst is checked with numpy
through ``protocol.HEADER_DTYPE`` and ``Transfer.take_many`` stores each fragment's first
result. Anything else (malformed, foreign, duplicate) counts as ignored. `Inflight` keeps
send times, attempts and deadlines in arrays over the window.
"""

from __future__ import annotations

import logging
import socket
import time

import numpy as np
import numpy.typing as npt
from p4ctl.engine import Burst, pack_address
from p4ctl.protocol import HEADER_DTYPE, HEADER_SIZE, VERSION, Flag, Kind

from workers.errors import AllreduceTimeout
from workers.inflight import Inflight
from workers.options import ClientOptions
from workers.rendezvous import WorkerJoin
from workers.retransmit import RetransmitTimer
from workers.transfer import Sender, Transfer

__all__ = ["REORDER", "STAT_NAMES", "BurstIO"]

log = logging.getLogger(__name__)

# A fragment overtaken by this many later ones is presumed lost (fast retransmit).
REORDER = 8
# The counters of `workers.client.ClientStats`, in its field order.
STAT_NAMES = (
    "sent",
    "resent",
    "fast_resent",
    "results_switch",
    "results_ps",
    "bytes_switch",
    "bytes_ps",
    "ignored",
)
# Messages one receive may take (the kernel's recvmmsg batch in the engine). A GRO message
# holds up to 64 KiB of segments, so the burst has rows for that many full messages.
_MESSAGES = 64
_GRO_BYTES = 65536
_RESEND = int(Flag.RESEND)
_RESULT = int(Kind.RESULT)
_PS_RESULT = int(Kind.PS_RESULT)


class BurstIO:
    """The send window, transfers and bursts of one client (see the module docstring).

    `counts` holds the `ClientStats` counters (single ints, read by other threads unlocked).
    `gso` as ``p4ctl.engine.Burst`` takes it.
    """

    def __init__(
        self, join: WorkerJoin, sock: socket.socket, options: ClientOptions, *, gso: bool = True
    ) -> None:
        self.join = join
        self.sock = sock
        self.options = options
        self.switch = (socket.gethostbyname(join.switch[0]), join.switch[1])
        self.window = join.window_limit()
        self.sender = Sender(join.switch_job_id, join.worker_id, join.placement)
        self.datagram_size = HEADER_SIZE + 4 * join.lanes
        self.transfers: list[Transfer] = []
        self.assigned = 0
        self.send_seq = 0
        self.low = 0
        self.answered = -1  # highest seq with a result
        self.timer = RetransmitTimer(options.initial_rto_s, options.min_rto_s, options.max_rto_s)
        self.last_progress = time.monotonic()
        self.last_timeout_resend = float("-inf")
        self.counts = dict.fromkeys(STAT_NAMES, 0)
        stride = self.datagram_size
        self._burst = Burst(slots=_MESSAGES * max(1, _GRO_BYTES // stride), stride=stride, gso=gso)
        if not self._burst.enable_gro(sock):
            log.debug("UDP GRO refused; results come one datagram per message")
        self._inflight = Inflight(self.window, self.timer)
        # Every datagram goes to the switch and has the job's size: one row of each per slot.
        self._sizes = np.full(self.window, stride, np.int64)
        self._addrs = np.full(self.window, pack_address(self.switch), np.int64)
        self._resends = np.empty((self.window, stride), np.uint8)

    # ------------------------------------------------------------------ the window

    def accept(self, transfer: Transfer) -> None:
        """Take a submitted transfer into the window (its seqs follow the last one's)."""
        if transfer.fragments == 0:
            return
        if self.oldest_inflight() is None and self.send_seq == self.assigned:
            self.last_progress = time.monotonic()  # idle until now: the clock starts here
        self.transfers.append(transfer)
        self.assigned = transfer.end_seq

    def transfer_of(self, seq: int) -> Transfer | None:
        """The transfer that owns `seq`, or None."""
        for t in self.transfers:  # a handful of buckets in flight: a scan beats an index
            if t.first_seq <= seq < t.end_seq:
                return t
        return None

    def advance_low(self) -> None:
        """Move `low` past every sequence with a result; drop transfers left behind."""
        while self.transfers:
            t = self.transfers[0]
            # Results come nearly in order, so the first gap is near `low`: look a window at a
            # time rather than over the rest of a tensor of perhaps 10^5 fragments.
            at = self.low - t.first_seq
            while at < t.fragments:
                ahead = t.done[at : at + 4 * self.window]
                gap = int(np.argmin(ahead))
                if not ahead[gap]:
                    self.low = t.first_seq + at + gap
                    return
                at += ahead.size
            self.low = t.end_seq
            self.transfers.pop(0)

    def patience(self) -> float:
        """How long a fragment overtaken by later results waits before a fast retransmit."""
        srtt = self.timer.srtt
        return 2 * srtt if srtt is not None else self.options.min_rto_s

    def expired(self, now: float) -> AllreduceTimeout | None:
        """The error to fail everything with when no result came for `timeout_s`, else None."""
        timeout_s = self.options.timeout_s
        if now - self.last_progress <= timeout_s:
            return None
        oldest = self.oldest_inflight()
        if oldest is None:
            return None
        seq, attempts = oldest
        switch = f"{self.switch[0]}:{self.switch[1]}"
        # Named by the service's job id, the one its user knows (not the switch's).
        return AllreduceTimeout(self.join.job_id, seq, timeout_s, attempts, switch)

    def fail(self, error: BaseException, pending: list[Transfer]) -> None:
        """End every transfer (in flight and `pending`) with `error`; the window empties."""
        for t in self.transfers + pending:
            t.finish(error)
        self.transfers.clear()
        self.clear_inflight()
        self.send_seq = self.low = self.assigned

    def oldest_inflight(self) -> tuple[int, int] | None:
        """``(seq, attempts)`` of the oldest fragment in flight, or None when none is."""
        return self._inflight.oldest(self.low, self.send_seq)

    def clear_inflight(self) -> None:
        """Forget every fragment in flight and its timer."""
        self._inflight.clear()

    # ---------------------------------------------------------------------- sending

    def send_new(self) -> None:
        """Send every fragment the window allows that was not sent yet."""
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
        """Take what the socket holds (a bounded amount, so timers still run under a flood)."""
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
        """Seconds the thread may sleep before `on_timers` has something to do (at most 0.5)."""
        wait = min(0.5, self._inflight.next_deadline() - now)
        limit = self.answered - REORDER
        if self.low < limit:  # else nothing in flight is overtaken (all of it is >= low)
            fast = self._inflight.fast_wait(self.low, self.send_seq, limit, now, self.patience())
            wait = min(wait, fast)
        return max(0.0, wait)

    def on_timers(self, now: float) -> None:
        """Timeout resends, then fast retransmits."""
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
