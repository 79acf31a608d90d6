"""Per-tenant quotas: how many jobs a tenant may hold admitted at once and what share of the
switch's aggregators its jobs may use, so that no tenant can lock the others out.

A filter the coordinator applies around the pure policy, never a second place that changes
jobs: `hold_back` leaves out of the policy's snapshot the queued jobs of a tenant beyond its
job limit, `within_share` turns an ``Admit`` past the tenant's aggregator share into a wait, and
both answer with `TenantQuota` decisions that the scheduler's `DecisionApplier` applies like
any other ``Queue``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace

from p4ctl.protocol import MAX_JOBS
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.store.models import Tenant
from scheduler.memory import COPIES_PER_SLOT, Pool
from scheduler.snapshot import Admit, Decision, JobView, Queue

__all__ = [
    "UNLIMITED",
    "QuotaDefaults",
    "TenantLimits",
    "TenantQuota",
    "hold_back",
    "load_limits",
    "within_share",
]


@dataclass(frozen=True, slots=True)
class QuotaDefaults:
    """The quota of a tenant that has none of its own (settings ``tenant_max_jobs``,
    ``tenant_aggregator_share``)."""

    max_jobs: int
    aggregator_share: float


#: No quota beyond the switch itself: every switch job id, the whole pool.
UNLIMITED = QuotaDefaults(MAX_JOBS, 1.0)


@dataclass(frozen=True, slots=True)
class TenantLimits:
    """A tenant's quota: `max_jobs` admitted or running at once, and its jobs' aggregators at
    most `aggregator_share` of the pool."""

    name: str
    max_jobs: int
    aggregator_share: float

    def aggregators(self, pool: Pool) -> int:
        """The aggregators the share allows on `pool` (at least one)."""
        return max(1, int(self.aggregator_share * pool.aggregators))

    @classmethod
    def of(cls, tenant: Tenant, defaults: QuotaDefaults) -> TenantLimits:
        """`tenant`'s quota: its own where an admin set one, else `defaults`."""
        return cls(
            tenant.name,
            defaults.max_jobs if tenant.max_jobs is None else tenant.max_jobs,
            defaults.aggregator_share
            if tenant.aggregator_share is None
            else tenant.aggregator_share,
        )


def load_limits(
    s: Session, tenant_ids: set[int], defaults: QuotaDefaults
) -> dict[int, TenantLimits]:
    """``{tenant id: its quota}`` for `tenant_ids`."""
    if not tenant_ids:
        return {}
    rows = s.scalars(select(Tenant).where(Tenant.id.in_(sorted(tenant_ids))))
    return {t.id: TenantLimits.of(t, defaults) for t in rows}


@dataclass(frozen=True, slots=True)
class TenantQuota(Queue):
    """A queued job waits because its tenant is at its quota (not for want of memory)."""


def hold_back(
    queued_of: Mapping[int, AbstractSet[int]],
    holding: Mapping[int, int],
    limits: Mapping[int, TenantLimits],
) -> dict[int, tuple[str, list[int]]]:
    """``{tenant: (why, its queued jobs that wait)}``: each tenant's oldest queued jobs (the
    lowest ids) go to the policy, up to what its job limit leaves free beside its `holding`
    (admitted or running) jobs; the rest wait with a `TenantQuota` for the reason `why`.
    Tenants with nothing held back are left out. `queued_of`: each tenant's queued jobs."""
    out: dict[int, tuple[str, list[int]]] = {}
    for tenant, queued in queued_of.items():
        limit = limits[tenant]
        held = holding.get(tenant, 0)
        room = max(0, limit.max_jobs - held)
        if len(queued) > room:
            why = (
                f"tenant quota: tenant '{limit.name}' has {held:,} of its {limit.max_jobs:,} "
                f"admitted jobs"
            )
            out[tenant] = (why, sorted(queued)[room:])
    return out


def within_share(
    decisions: Iterable[Decision],
    views: Sequence[JobView],
    tenant_of: Mapping[int, int],
    limits: Mapping[int, TenantLimits],
    pool: Pool,
) -> list[Decision]:
    """`decisions` with every ``Admit`` kept within its tenant's aggregator share: a private
    partition that would take the tenant's partitions past it waits (`TenantQuota`); a hashed
    job hashes into at most the share (aggregators ``0 .. share - 1``), so all of a tenant's
    hashed jobs together stay inside it. Admitting fewer or smaller than the policy chose
    leaves memory free, never overcommitted."""
    used: Counter[int] = Counter()
    for v in views:
        if v.state.holds_memory and v.partition is not None:
            used[tenant_of[v.job_id]] += COPIES_PER_SLOT * v.partition.slots
    out: list[Decision] = []
    for d in decisions:
        if not isinstance(d, Admit):
            out.append(d)
            continue
        tenant = tenant_of[d.job_id]
        limit = limits[tenant]
        allowed = limit.aggregators(pool)
        if d.partition is not None:
            wanted = COPIES_PER_SLOT * d.partition.slots
            if used[tenant] + wanted > allowed:
                message = (
                    f"tenant quota: tenant '{limit.name}' holds {used[tenant]:,} aggregators "
                    f"and its share ({limit.aggregator_share:g}) is {allowed:,}; this job "
                    f"needs {wanted:,}"
                )
                out.append(TenantQuota(d.job_id, message))
                continue
            used[tenant] += wanted
        elif d.hash_seed is not None and (d.shared_pool or pool.aggregators) > allowed:
            d = replace(d, shared_pool=allowed)
        out.append(d)
    return out
