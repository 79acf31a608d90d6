"""Clocks: the caller owns time, never a policy. The simulators step a `VirtualClock`; the
service reads epoch seconds (``time.time``, which its store keeps across restarts);
`WallClock` is monotonic time for a caller with nothing to keep. Each hands its time to
``Scheduler.snapshot``."""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "VirtualClock", "WallClock"]


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the clock's epoch."""
        ...


class WallClock:
    """Monotonic wall time in seconds since this clock was made."""

    def __init__(self) -> None:
        self._start = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self._start


class VirtualClock:
    """Virtual time that only moves when the simulator advances it (never backwards)."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance_to(self, t: float) -> None:
        if t < self._now:
            raise ValueError(f"virtual time cannot go back from {self._now} to {t}")
        self._now = t
