"""Fragments in flight, as arrays over the send window.

The state of the fragments in flight lives in three arrays indexed by ``seq mod capacity``
(a power of two at least the window, so the sequences in flight, all in ``[low, low +
window)``, never share a slot): when the fragment was first sent, how many times it was
resent (-1: not in flight) and its deadline. A burst of results, a span of first sends or a
set of resends is one array operation. Nothing here reads the clock or touches a socket:
callers pass ``now``.

The timing is `RetransmitTimer`'s: attempt ``a`` waits ``min(max_rto, rto * 2**a)`` from when
it was armed, with the RTO of that moment; only fragments sent once give round-trip samples
(Karn's rule), here one sample per burst.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from workers.retransmit import RetransmitTimer

__all__ = ["Inflight", "Timeouts"]

Seqs = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Timeouts:
    """What the deadlines passed by ``now`` call for, in deadline order.

    `resend` (with their attempt numbers so far, `resend_attempts`) go out again; `hold`
    waited while the path was stalled and are re-armed at the same attempt.
    """

    resend: Seqs
    resend_attempts: Seqs
    hold: Seqs
    hold_attempts: Seqs


class Inflight:
    """Send times, attempts and deadlines of the fragments in flight (see the module doc)."""

    def __init__(self, window: int, timer: RetransmitTimer) -> None:
        capacity = 1 << max(0, window - 1).bit_length()
        self._mask = capacity - 1
        self.timer = timer
        self.sent_at = np.zeros(capacity)
        self.attempts = np.full(capacity, -1, np.int64)
        self.deadline = np.full(capacity, np.inf)

    def _span(self, low: int, high: int) -> tuple[Seqs, Seqs]:
        """``(seqs, slots)`` of ``low .. high - 1``."""
        assert high - low <= self._mask + 1, "more sequences than the window holds"
        seqs = np.arange(low, max(low, high), dtype=np.int64)
        return seqs, seqs & self._mask

    def _backoff(self, attempts: Seqs) -> npt.NDArray[np.float64]:
        timer = self.timer
        return np.minimum(timer.max_rto_s, timer.rto * np.exp2(attempts.astype(np.float64)))

    def sent(self, low: int, high: int, now: float) -> None:
        """Fragments ``low .. high - 1`` left for the first time at `now`."""
        _, slots = self._span(low, high)
        self.sent_at[slots] = now
        self.attempts[slots] = 0
        self.deadline[slots] = now + self._backoff(np.zeros(1, np.int64))[0]

    def arm(self, seqs: Seqs, attempts: Seqs, now: float) -> None:
        """Fragments `seqs` are at `attempts` from `now` (resent, or held back)."""
        slots = seqs & self._mask
        self.attempts[slots] = attempts
        self.deadline[slots] = now + self._backoff(attempts)

    def answered(self, seqs: Seqs, now: float) -> None:
        """Results for `seqs` (each once, all in the window) came at `now`: they leave the
        window, and the oldest one sent only once gives the burst's round-trip sample."""
        slots = seqs & self._mask
        once = slots[self.attempts[slots] == 0]
        if once.size:
            self.timer.sample(now - float(self.sent_at[once].min()))
        self.attempts[slots] = -1
        self.deadline[slots] = np.inf

    def clear(self) -> None:
        self.attempts[:] = -1
        self.deadline[:] = np.inf

    def oldest(self, low: int, high: int) -> tuple[int, int] | None:
        """``(seq, attempts)`` of the lowest sequence in flight, or None."""
        seqs, slots = self._span(low, high)
        waiting = np.flatnonzero(self.attempts[slots] >= 0)
        if waiting.size == 0:
            return None
        first = int(waiting[0])
        return int(seqs[first]), int(self.attempts[slots[first]])

    def next_deadline(self) -> float:
        """The earliest deadline (inf when nothing is in flight)."""
        return float(self.deadline.min())

    def due(
        self, low: int, high: int, now: float, last_progress: float, last_timeout_resend: float
    ) -> Timeouts:
        """Which fragments past their deadline are resent and which are held back.

        In deadline order: a fragment is held when nothing
        came back since it was sent nor since the last timeout resend (the switch or a peer
        is stalled; only the oldest fragment in flight probes it), and every resend counts
        as the last timeout resend for the fragments after it.
        """
        seqs, slots = self._span(low, high)
        late = np.flatnonzero((self.attempts[slots] >= 0) & (self.deadline[slots] <= now))
        if late.size == 0:
            empty = np.zeros(0, np.int64)
            return Timeouts(empty, empty, empty, empty)
        oldest = self.oldest(low, high)
        seqs, slots = seqs[late], slots[late]
        order = np.lexsort((seqs, self.deadline[slots]))
        seqs, slots = seqs[order], slots[order]
        sent_at = self.sent_at[slots]
        is_oldest = seqs == (oldest[0] if oldest is not None else -1)
        resend = ~(last_progress < np.minimum(sent_at, last_timeout_resend)) | is_oldest
        first = np.flatnonzero(resend)
        if first.size:
            # From the first resend on, the last timeout resend is `now`.
            after = slice(int(first[0]) + 1, None)
            resend[after] = ~(last_progress < np.minimum(sent_at[after], now)) | is_oldest[after]
        attempts = self.attempts[slots]
        return Timeouts(seqs[resend], attempts[resend], seqs[~resend], attempts[~resend])

    def overtaken(self, low: int, high: int, limit: int, now: float, patience: float) -> Seqs:
        """Fragments below `limit` sent once and waiting for more than `patience`: the fast
        retransmit's candidates, oldest first."""
        seqs, slots = self._span(low, min(high, max(low, limit)))
        once = (self.attempts[slots] == 0) & (now - self.sent_at[slots] > patience)
        candidates: Seqs = seqs[once]
        return candidates

    def fast_wait(self, low: int, high: int, limit: int, now: float, patience: float) -> float:
        """Seconds until `overtaken` has a candidate (at most 0.5)."""
        _, slots = self._span(low, min(high, max(low, limit)))
        once = np.flatnonzero(self.attempts[slots] == 0)
        if once.size == 0:
            return 0.5
        return max(0.0, min(0.5, float(self.sent_at[slots[once[0]]]) + patience - now))
