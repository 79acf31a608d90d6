"""`Scheduler`: the small object the REST service (and the simulator) drives.

It binds a policy, a priority function and the pool, builds snapshots, and answers which
aggregator parameters a job's workers need. It holds no job state of its own: the caller owns
the jobs and applies the decisions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from scheduler.memory import Pool
from scheduler.policy import Policy
from scheduler.priority import DEFAULT_AGING_S, DEFAULT_LEVELS
from scheduler.registry import make_policy
from scheduler.snapshot import Decision, JobView, Snapshot

__all__ = ["AggregatorParams", "Scheduler"]


@dataclass(frozen=True, slots=True)
class AggregatorParams:
    """What a job's workers need to address switch memory.

    ``static``: `partition_base` and `partition_slots` (aggregators ``base .. base + 2*slots
    - 1``), `hash_seed` None. ``atp``/``esa``: `hash_seed` with the whole pool
    (`aggregators`), partition fields None. `lanes` is the switch's k for every policy.
    """

    policy: str
    aggregators: int
    lanes: int
    partition_base: int | None
    partition_slots: int | None
    hash_seed: int | None


class Scheduler:
    """Policy + priority function + pool, behind one call: ``decide(snapshot)``."""

    def __init__(
        self,
        policy: str = "esa",
        priority: str = "srtf",
        pool: Pool | None = None,
        *,
        levels: int = DEFAULT_LEVELS,
        aging_s: float = DEFAULT_AGING_S,
        seed: int = 0,
    ) -> None:
        self.pool = pool or Pool()
        self.seed = seed
        self.policy: Policy = make_policy(policy, priority=priority, levels=levels, aging_s=aging_s)

    @property
    def policy_name(self) -> str:
        return self.policy.name

    def snapshot(self, now: float, jobs: Iterable[JobView]) -> Snapshot:
        """A snapshot of `jobs` at time `now` on this scheduler's pool and seed."""
        return Snapshot(now=now, pool=self.pool, jobs=tuple(jobs), seed=self.seed)

    def decide(self, snapshot: Snapshot) -> tuple[Decision, ...]:
        """The policy's decisions for `snapshot` (pure; apply them in order)."""
        return self.policy.decide(snapshot)

    # The service calls these on the matching events; each is the same pure decision.
    on_submit = decide
    on_progress = decide
    on_finish = decide
    on_cancel = decide

    def aggregator_params(self, job: JobView) -> AggregatorParams:
        """Parameters for `job`'s workers, from what its `Admit` gave it."""
        part = job.partition
        return AggregatorParams(
            policy=self.policy.name,
            aggregators=self.pool.aggregators,
            lanes=self.pool.lanes,
            partition_base=part.base if part else None,
            partition_slots=part.slots if part else None,
            hash_seed=job.hash_seed,
        )
