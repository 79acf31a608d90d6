"""``atp`` (ATP): every job shares the pool; placement by a per-job hash seed; the switch
serves fragments first come first served and sends losers to the job's PS.

Admission does not wait for room: the shared pool degrades (more bypass) instead of refusing.
It only waits while static partitions left from an earlier policy leave no shared pool at all
(`Policy.admit_shared`). No
priorities are set; the priority in each job's ``job_table`` entry stays 0.
"""

from __future__ import annotations

from typing import ClassVar

from scheduler.policy import Policy
from scheduler.snapshot import Decision, Snapshot

__all__ = ["AtpPolicy"]


class AtpPolicy(Policy):
    """ATP's memory rule; decisions are `Admit` with a hash seed, and `Reclaim`."""

    name: ClassVar[str] = "atp"
    shared: ClassVar[bool] = True

    def decide(self, snapshot: Snapshot) -> tuple[Decision, ...]:
        out = self.reclaims(snapshot)
        admitted, waiting = self.admit_shared(snapshot)
        return (*out, *admitted, *waiting)
