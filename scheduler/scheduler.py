"""`Scheduler`: the small object the REST service (and the simulator) drives.

It binds the policy a `PolicySpec` names to the pool and builds snapshots. It holds no job
state of its own: the caller owns the jobs and applies the decisions. A job with more workers
than one switch aggregates (`too_wide`) is refused before any policy sees it, the same way
under every policy, as the service's ``POST /jobs`` refuses it with a 422.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from p4ctl.protocol import MAX_WORKERS

from scheduler.memory import JobState, Pool
from scheduler.policy import Policy
from scheduler.registry import make_policy
from scheduler.snapshot import Decision, JobView, Reject, Snapshot
from scheduler.spec import PolicySpec

__all__ = ["Scheduler", "too_wide"]


def too_wide(workers: int) -> str | None:
    """Why one switch cannot aggregate a job of `workers` workers (None when it can): a
    switch counts a fragment's contributions in a bitmap of `MAX_WORKERS` bits, one per
    worker. Such a job is refused rather than sent whole to its PS: the service's workers
    and PS have no switchless path, and a simulator stands for the service."""
    if workers <= MAX_WORKERS:
        return None
    return (
        f"{workers} workers, more than the {MAX_WORKERS} one switch aggregates (its "
        f"contributor bitmap is {MAX_WORKERS} bits wide): run the job with at most "
        f"{MAX_WORKERS} workers, e.g. one per server"
    )


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
        """The policy's decisions for `snapshot` (pure; apply them in order): first a `Reject`
        for each queued job `too_wide` for the switch, which the policy does not see."""
        refused = [
            Reject(j.job_id, why)
            for j in snapshot.jobs
            if j.state == JobState.QUEUED and (why := too_wide(j.workers)) is not None
        ]
        if not refused:
            return self.policy.decide(snapshot)
        gone = {r.job_id for r in refused}
        rest = replace(snapshot, jobs=tuple(j for j in snapshot.jobs if j.job_id not in gone))
        return (*refused, *self.policy.decide(rest))
