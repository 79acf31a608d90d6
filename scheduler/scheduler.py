"""`Scheduler`: the small object the REST service (and the simulator) drives.

It binds the policy a `PolicySpec` names to the pool and builds snapshots. It holds no job
state of its own: the caller owns the jobs and applies the decisions.
"""

from __future__ import annotations

from collections.abc import Iterable

from scheduler.memory import Pool
from scheduler.policy import Policy
from scheduler.registry import make_policy
from scheduler.snapshot import Decision, JobView, Snapshot
from scheduler.spec import PolicySpec

__all__ = ["Scheduler"]


class Scheduler:
    """The policy of a `PolicySpec` on a pool, behind one call: ``decide(snapshot)``."""

    def __init__(
        self, spec: PolicySpec | None = None, pool: Pool | None = None, *, seed: int = 0
    ) -> None:
        self.spec = spec or PolicySpec()
        self.pool = pool or Pool()
        self.seed = seed
        self.policy: Policy = make_policy(self.spec)

    @property
    def policy_name(self) -> str:
        return self.policy.name

    def snapshot(self, now: float, jobs: Iterable[JobView]) -> Snapshot:
        """A snapshot of `jobs` at time `now` on this scheduler's pool and seed."""
        return Snapshot(now=now, pool=self.pool, jobs=tuple(jobs), seed=self.seed)

    def decide(self, snapshot: Snapshot) -> tuple[Decision, ...]:
        """The policy's decisions for `snapshot` (pure; apply them in order)."""
        return self.policy.decide(snapshot)
