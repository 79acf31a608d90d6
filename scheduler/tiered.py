"""Fabric policies: at which switches of its tree each job aggregates, and at which level.

Each switch runs a switch policy (`scheduler.registry`) on its own pool. A `FabricPolicy` sits
above them, pure: a `FabricSnapshot` in, one `AggregateAt` per job out (the switches it
aggregates at, the partial sums per fragment its PS adds, optionally one level for every
switch of its tree). `PerSwitch` is today's policies in a fabric: every job on its whole tree.

``tiered`` runs esa per switch and adds two ideas, each dropped alone by an ablation:
spill (off in ``tiered-nospill``): the spine goes to the cross-rack jobs in rank order until
what the jobs above hold there on average (`FabricJobView.held`) fills its pool; a job below
that line, whose partial sums esa would keep evicting there, aggregates at its ToRs only, each
sending its rack's partial sum to the job's PS (fan-in: racks, not workers; ATP's per-rack
aggregation). One rank (off in ``tiered-local``): one level per job from the ranking of every
job in the fabric, used at every switch of its tree. ``docs/fabric.md`` states both.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from scheduler.fabric import Fabric
from scheduler.policy import PolicyParams
from scheduler.priority import get_priority, levels
from scheduler.snapshot import JobView

__all__ = [
    "AggregateAt",
    "FabricJobView",
    "FabricPolicy",
    "FabricSnapshot",
    "PerSwitch",
    "TieredLocalPolicy",
    "TieredNoSpillPolicy",
    "TieredPolicy",
]


@dataclass(frozen=True, slots=True)
class FabricJobView:
    """A job holding memory in the fabric: its fabric-wide `view` (workers = its servers, one
    INA worker each), its servers per ToR (`racks`, fabric order), its whole `tree`
    (`Fabric.tree_of`) and `held`, the aggregators it holds on average at the busiest switch
    where it aggregates, as the switches count them (before they have: its window for the
    share of its time it would communicate with exclusive INA)."""

    view: JobView
    racks: tuple[tuple[str, int], ...]
    tree: tuple[str, ...]
    held: float = 0.0

    @property
    def job_id(self) -> int:
        return self.view.job_id

    @property
    def cross_rack(self) -> bool:
        return len(self.racks) > 1


@dataclass(frozen=True, slots=True)
class FabricSnapshot:
    """The jobs holding memory in `fabric`, and the window each worker keeps in flight."""

    fabric: Fabric
    jobs: tuple[FabricJobView, ...]
    window: int


@dataclass(frozen=True, slots=True)
class AggregateAt:
    """Job `job_id` aggregates at `switches`; its PS adds `ps_partials` partial sums per
    fragment (0: the top of `switches` completes the sum); `level`, when set, is its priority
    level at every one of them (None: each switch's own policy sets it)."""

    job_id: int
    switches: tuple[str, ...]
    ps_partials: int = 0
    level: int | None = None


class FabricPolicy(ABC):
    """Base of the fabric policies: the switch policy each switch runs (`switch_policy`, a
    `scheduler.registry` name), and `aggregate`, pure (no clock, no I/O). `spec` gives the
    priority function, levels and aging (its ``policy`` is not read)."""

    name: ClassVar[str]
    switch_policy: str = "esa"

    def __init__(self, spec: PolicyParams) -> None:
        self.spec = spec
        self.priority_key = get_priority(spec.priority)

    @abstractmethod
    def aggregate(self, snapshot: FabricSnapshot) -> tuple[AggregateAt, ...]:
        """One `AggregateAt` per job of `snapshot`, in its order."""


class PerSwitch(FabricPolicy):
    """Switch policy `switch_policy` in a fabric: every job on its whole tree, each switch's
    own levels."""

    name: ClassVar[str] = "per-switch"

    def __init__(self, spec: PolicyParams, switch_policy: str) -> None:
        super().__init__(spec)
        self.switch_policy = switch_policy

    def aggregate(self, snapshot: FabricSnapshot) -> tuple[AggregateAt, ...]:
        return tuple(AggregateAt(j.job_id, j.tree) for j in snapshot.jobs)


class TieredPolicy(FabricPolicy):
    """esa per switch, plus spill below the spine's memory line and one fabric-wide rank."""

    name: ClassVar[str] = "tiered"
    spill: ClassVar[bool] = True
    one_rank: ClassVar[bool] = True

    def aggregate(self, snapshot: FabricSnapshot) -> tuple[AggregateAt, ...]:
        jobs = snapshot.jobs
        ranked = levels(
            [j.view for j in jobs], self.priority_key, self.spec.levels, self.spec.aging_s
        )
        spilled = self._spilled(snapshot, ranked) if self.spill else set()
        out = []
        for job in jobs:
            level = ranked[job.job_id] if self.one_rank else None
            if job.job_id in spilled:
                tors = tuple(tor for tor, _ in job.racks)
                out.append(AggregateAt(job.job_id, tors, len(tors), level))
            else:
                out.append(AggregateAt(job.job_id, job.tree, 0, level))
        return tuple(out)

    def _spilled(self, snapshot: FabricSnapshot, ranked: Mapping[int, int]) -> set[int]:
        """The cross-rack jobs below the memory line of some inner switch of their tree:
        walking its jobs best level first (then by rank key, arrival, id), each holding what
        it holds on average; a job finding the pool filled by those above it is below the
        line."""
        fabric = snapshot.fabric
        order = sorted(
            snapshot.jobs,
            key=lambda j: (-ranked[j.job_id], self.priority_key(j.view), j.view.arrival_s,
                           j.job_id),
        )  # fmt: skip
        used: dict[str, float] = {}
        out: set[int] = set()
        for job in order:
            inner = [s for s in job.tree if fabric.switch(s).rack is None]
            if not inner:
                continue
            if all(used.get(s, 0.0) < fabric.switch(s).aggregators for s in inner):
                for s in inner:
                    used[s] = used.get(s, 0.0) + job.held
            else:
                out.add(job.job_id)
        return out


class TieredNoSpillPolicy(TieredPolicy):
    """``tiered`` without spill: every job on its whole tree, one fabric-wide rank."""

    name: ClassVar[str] = "tiered-nospill"
    spill: ClassVar[bool] = False


class TieredLocalPolicy(TieredPolicy):
    """``tiered`` without the one rank: spill, and each switch ranks its own jobs (esa)."""

    name: ClassVar[str] = "tiered-local"
    one_rank: ClassVar[bool] = False
