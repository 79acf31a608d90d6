"""``atp`` (ATP): every job shares the pool; placement by a per-job hash seed; the switch
serves fragments first come first served and sends losers to the job's PS.

Admission never waits: the shared pool degrades (more bypass) instead of refusing. No
priorities are set; the switch's ``job_priority`` stays 0 for every job.
"""

from __future__ import annotations

from typing import ClassVar

from scheduler.policy import Policy, register_policy
from scheduler.snapshot import Admit, Decision, Snapshot, hash_seed

__all__ = ["AtpPolicy"]


class AtpPolicy(Policy):
    """ATP's memory rule; decisions are `Admit` with a hash seed, and `Reclaim`."""

    name: ClassVar[str] = "atp"
    shared: ClassVar[bool] = True

    def decide(self, snapshot: Snapshot) -> tuple[Decision, ...]:
        out = self.reclaims(snapshot)
        out += [
            Admit(j.job_id, hash_seed=hash_seed(snapshot.seed, j.job_id))
            for j in self.queued(snapshot)
        ]
        return tuple(out)


register_policy(AtpPolicy.name, AtpPolicy)
