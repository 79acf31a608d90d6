"""`Outage`: a dependency's failures as episodes, each told once when it starts and once when
it ends.

An episode starts at the first failure and ends at the first success after it, however many
calls failed in between. `fail` and `end` say when an episode starts and how it ended, so that
the caller logs one line at each end in its own words; `away_s` and `since` say how long it has
lasted, for ``/metrics`` and ``GET /leader``. The job store (`api.store.health.StoreHealth`)
and the PS (`api.coordinator.pslink.PsLink`) keep theirs in one. Not thread-safe: the caller
holds its own lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Outage"]


@dataclass
class Outage:
    """The open episode, if any: `failures` in it, `since` its start by the wall clock."""

    clock: Callable[[], float] = time.monotonic
    open: bool = False
    failures: int = 0
    since: float | None = None  # time.time() of the open episode's start
    _began: float = 0.0  # `clock` at the open episode's start

    def fail(self, *, new: bool = False) -> bool:
        """Count a failure; True when it starts an episode (none was open, or `new`: the
        failure is of another kind than the open episode's)."""
        began = not self.open or new
        if began:
            self.open, self.failures = True, 0
            self._began, self.since = self.clock(), time.time()
        self.failures += 1
        return began

    def end(self) -> tuple[float, int] | None:
        """A success: ends the open episode and returns how long it lasted (seconds) and its
        failures; None when none was open."""
        if not self.open:
            return None
        self.open, self.since = False, None
        return self.clock() - self._began, self.failures

    def away_s(self) -> float:
        """Seconds since the open episode began; 0 when none is open."""
        return max(0.0, self.clock() - self._began) if self.open else 0.0
