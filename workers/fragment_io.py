"""What the client's I/O thread owns, whichever data path moves the datagrams.

`FragmentIO` holds the transfers in flight and the send window over their sequence numbers:
``low`` (the lowest seq without a result) ``<= send_seq`` (the next to send first) ``<=
assigned`` (one past the last seq of an accepted transfer), with ``send_seq < low + window``.
Two subclasses move the datagrams, chosen by ``p4ctl.engine.datapath()``:
``workers.burst_io.BurstIO`` (``engine``: bursts with UDP GSO/GRO, numpy arrays over the
window) and ``workers.datagram_io.DatagramIO`` (``python``: one system call and one dict
entry per datagram). Both take the same decisions (retransmission timeout, back-off, fast
retransmit, the stalled rule, exactly-once results). The client drives one turn at a time:
`accept`, `send_new`, wait for the socket up to `wait_time`, `receive`, `on_timers`, `expired`.
"""

from __future__ import annotations

import socket
import time
from typing import TYPE_CHECKING

import numpy as np
from p4ctl.protocol import HEADER_SIZE

from workers.errors import AllreduceTimeout
from workers.rendezvous import WorkerJoin
from workers.retransmit import RetransmitTimer
from workers.transfer import Sender, Transfer

if TYPE_CHECKING:
    from workers.client import ClientOptions

__all__ = ["REORDER", "STAT_NAMES", "FragmentIO"]

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


class FragmentIO:
    """The send window and transfers of one client (see the module docstring).

    `counts` holds the `ClientStats` counters (single ints, read by other threads unlocked).
    """

    def __init__(self, join: WorkerJoin, sock: socket.socket, options: ClientOptions) -> None:
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

    # ------------------------------------------------------------- what a path provides

    def send_new(self) -> None:
        """Send every fragment the window allows that was not sent yet."""
        raise NotImplementedError

    def receive(self) -> None:
        """Take what the socket holds (a bounded amount, so timers still run under a flood)."""
        raise NotImplementedError

    def wait_time(self, now: float) -> float:
        """Seconds the thread may sleep before `on_timers` has something to do (at most 0.5)."""
        raise NotImplementedError

    def on_timers(self, now: float) -> None:
        """Timeout resends, then fast retransmits."""
        raise NotImplementedError

    def oldest_inflight(self) -> tuple[int, int] | None:
        """``(seq, attempts)`` of the oldest fragment in flight, or None when none is."""
        raise NotImplementedError

    def clear_inflight(self) -> None:
        """Forget every fragment in flight and its timer."""
        raise NotImplementedError

    # ------------------------------------------------------------------------ shared

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
