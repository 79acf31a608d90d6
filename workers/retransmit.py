"""Retransmission timing of one client: the adaptive timeout and the per-fragment deadlines.

The timeout follows RFC 6298 (TCP's): smoothed round trip plus four deviations, clamped to
``[min_rto_s, max_rto_s]``, sampled only from fragments sent once (Karn's rule: the result of a
retransmitted fragment cannot be matched to one send). Attempt ``a`` of a fragment waits
``rto * 2**a`` (exponential back-off), at most `max_rto_s`.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

__all__ = ["RetransmitTimer"]


class RetransmitTimer:
    """Deadlines of fragments in flight, by ``(seq, attempt)``; stale entries are skipped by
    the caller (a fragment answered, or re-armed by a later attempt)."""

    def __init__(self, initial_rto_s: float, min_rto_s: float, max_rto_s: float) -> None:
        self.min_rto_s, self.max_rto_s = min_rto_s, max_rto_s
        self.rto = initial_rto_s
        self.srtt: float | None = None
        self.rttvar = 0.0
        self._heap: list[tuple[float, int, int]] = []  # (deadline, seq, attempt)

    def sample(self, rtt: float) -> None:
        """Fold one round trip (of a fragment sent once) into the timeout."""
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt
        self.rto = min(self.max_rto_s, max(self.min_rto_s, self.srtt + 4 * self.rttvar))

    def arm(self, seq: int, attempt: int, now: float) -> None:
        """Set the deadline of attempt `attempt` (0: the first send) of fragment `seq`."""
        wait = min(self.max_rto_s, self.rto * 2**attempt)
        heapq.heappush(self._heap, (now + wait, seq, attempt))

    def due(self, now: float) -> Iterator[tuple[int, int]]:
        """``(seq, attempt)`` of every deadline passed by `now`, earliest first (consumed)."""
        while self._heap and self._heap[0][0] <= now:
            _, seq, attempt = heapq.heappop(self._heap)
            yield seq, attempt

    def wait_time(self, now: float, idle: float) -> float:
        """Seconds until the next deadline, at most `idle`."""
        if not self._heap:
            return idle
        return max(0.0, min(self._heap[0][0] - now, idle))

    def clear(self) -> None:
        self._heap.clear()
