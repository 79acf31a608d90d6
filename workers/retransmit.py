"""The adaptive retransmission timeout of one client.

The timeout follows RFC 6298 (TCP's): smoothed round trip plus four deviations, clamped to
``[min_rto_s, max_rto_s]``, sampled only from fragments sent once (Karn's rule: the result of a
retransmitted fragment cannot be matched to one send). Attempt ``a`` of a fragment waits
``rto * 2**a`` (exponential back-off), at most `max_rto_s` (``workers.inflight`` keeps the
deadlines).
"""

from __future__ import annotations

__all__ = ["RetransmitTimer"]


class RetransmitTimer:
    """The retransmission timeout (`rto`) and the smoothed round trip (`srtt`) of one client."""

    def __init__(self, initial_rto_s: float, min_rto_s: float, max_rto_s: float) -> None:
        self.min_rto_s, self.max_rto_s = min_rto_s, max_rto_s
        self.rto = initial_rto_s
        self.srtt: float | None = None
        self.rttvar = 0.0

    def sample(self, rtt: float) -> None:
        """Fold one round trip (of a fragment sent once) into the timeout."""
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt
        self.rto = min(self.max_rto_s, max(self.min_rto_s, self.srtt + 4 * self.rttvar))
