"""`ClientOptions`: the timing of one allreduce client, apart from the client that uses it."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ClientOptions"]


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """Timing of one client: give-up timeout, and bounds of the retransmission timeout."""

    timeout_s: float = 10.0
    initial_rto_s: float = 0.5
    min_rto_s: float = 0.2
    max_rto_s: float = 2.0
