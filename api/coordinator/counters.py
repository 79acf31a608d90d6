"""Switch reads onto service terms: the `/switch` view with service job ids, per-job figures
relative to the switch job id's base, and the starvation time that feeds aging."""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from api.coordinator.events import Event
from api.schemas import SwitchCountersPublic, SwitchPublic
from api.store.models import Job
from scheduler.memory import Pool

__all__ = [
    "OTHER_TENANTS",
    "TenantSwitchViews",
    "job_tenants",
    "owned_jobs",
    "settle_counters",
    "switch_view",
    "tenant_switch_view",
    "track_starvation",
    "view_job_ids",
]

Counters = Mapping[int, Mapping[str, int]]
# The job id a tenant's view gives to aggregators held by other tenants' jobs (service job ids
# start at 1; -1 stays "a switch job id the service does not know").
OTHER_TENANTS = 0


def settle_counters(job: Job, raw: Mapping[str, int]) -> bool:
    """Copy the job's switch counters onto its row; True when a figure changed.

    Counters are per switch job id and ids are reused, so the values the id had when the job
    got it (`Job.counter_base`) are subtracted.
    """
    base = job.counter_base or {}

    def count(name: str) -> int:
        return max(0, raw.get(name, 0) - int(base.get(name, 0)))

    new = (count("job_preempted"), count("job_evicted"), count("job_bypassed"))
    if new == (job.preemptions_caused, job.preemptions_suffered, job.bypassed):
        return False
    job.preemptions_caused, job.preemptions_suffered, job.bypassed = new
    return True


def track_starvation(
    starved: dict[int, float],
    now: Counters,
    before: Counters,
    owners: Mapping[int, int],
    *,
    elapsed_s: float,
) -> None:
    """Update ``starved[job id]``: a job whose fragments were bypassed or evicted between the
    two reads starved for `elapsed_s` more; one that aggregated unhindered starts from zero."""
    for sid, values in now.items():
        job_id = owners.get(sid)
        if job_id is None:
            continue
        old = before.get(sid, {})
        grew = {name for name, v in values.items() if v > old.get(name, 0)}
        if grew & {"job_bypassed", "job_evicted"}:
            starved[job_id] = starved.get(job_id, 0.0) + elapsed_s
        elif "job_aggregated" in grew:
            starved.pop(job_id, None)


def switch_view(
    pool: Pool,
    runs: Sequence[tuple[int, int, int, int]],
    counters: Counters,
    drops: Mapping[str, int],
    owners: Mapping[int, int],
    unavailable: str = "",
    counters_unavailable: str = "",
) -> SwitchPublic:
    """The `/switch` view with the service's job ids: runs ``[start, length, job_id, state]``
    (-1 for aggregators of a switch job id the service does not know) and counters by job;
    `unavailable` says why occupancy could not be read (`p4ctl.backend.Occupancy`),
    `counters_unavailable` why counters could not (`p4ctl.backend.SwitchCounters`)."""
    return SwitchPublic(
        aggregators=pool.aggregators,
        lanes=pool.lanes,
        runs=[(a, n, owners.get(j, -1), st) for a, n, j, st in runs],
        counters=SwitchCountersPublic(
            jobs={str(owners[sid]): dict(c) for sid, c in counters.items() if sid in owners},
            drops=dict(drops),
        ),
        unavailable=unavailable,
        counters_unavailable=counters_unavailable,
    )


def view_job_ids(view: SwitchPublic) -> set[int]:
    """The service job ids `view` names, in its runs and its counters."""
    ids = {job_id for _, _, job_id, _ in view.runs if job_id > 0}
    for one in view.switches:
        ids |= {job_id for _, _, job_id, _ in one.runs if job_id > 0}
        ids |= {int(k) for k in one.counters.jobs}
    return ids | {int(k) for k in view.counters.jobs}


def owned_jobs(session: Session, *, tenant_id: int, job_ids: Collection[int]) -> set[int]:
    """Those of `job_ids` that are jobs of `tenant_id`."""
    if not job_ids:
        return set()
    stmt = select(Job.id).where(Job.tenant_id == tenant_id, Job.id.in_(sorted(job_ids)))
    return set(session.scalars(stmt))


def job_tenants(session: Session, *, job_ids: Collection[int]) -> dict[int, int]:
    """The tenant id of each of `job_ids` that is a stored job."""
    if not job_ids:
        return {}
    stmt = select(Job.id, Job.tenant_id).where(Job.id.in_(sorted(job_ids)))
    return {job_id: tenant_id for job_id, tenant_id in session.execute(stmt)}


def tenant_switch_view(view: SwitchPublic, mine: Collection[int]) -> SwitchPublic:
    """`view` as a tenant whose jobs are `mine` sees it: its own jobs' runs and counters as
    they are; other tenants' aggregators as anonymous occupancy (job id `OTHER_TENANTS`, runs
    of one state merged so that their boundaries do not count other tenants' jobs), and no
    counters of theirs. Drop counters are the switch's and stay."""
    return SwitchPublic(
        aggregators=view.aggregators,
        lanes=view.lanes,
        runs=_tenant_runs(view.runs, mine),
        counters=_tenant_counters(view.counters, mine),
        unavailable=view.unavailable,
        counters_unavailable=view.counters_unavailable,
        switches=[
            one.model_copy(
                update={
                    "runs": _tenant_runs(one.runs, mine),
                    "counters": _tenant_counters(one.counters, mine),
                }
            )
            for one in view.switches
        ],
    )


def _tenant_runs(
    view_runs: Sequence[tuple[int, int, int, int]], mine: Collection[int]
) -> list[tuple[int, int, int, int]]:
    runs: list[tuple[int, int, int, int]] = []
    for start, length, job_id, state in view_runs:
        if job_id > 0 and job_id not in mine:
            job_id = OTHER_TENANTS
            last = runs[-1] if runs else None
            if last and last[2] == OTHER_TENANTS and last[3] == state and sum(last[:2]) == start:
                runs[-1] = (last[0], last[1] + length, OTHER_TENANTS, state)
                continue
        runs.append((start, length, job_id, state))
    return runs


def _tenant_counters(counters: SwitchCountersPublic, mine: Collection[int]) -> SwitchCountersPublic:
    jobs = {k: dict(v) for k, v in counters.jobs.items() if int(k) in mine}
    return SwitchCountersPublic(jobs=jobs, drops=dict(counters.drops))


class TenantSwitchViews:
    """The bus's `TenantView`: a ``switch`` event as each tenant sees it, built once per event
    and tenant. Whose each job is is read from the store once per job, in the publisher's
    thread (never a stream's), and forgotten when the job leaves the switch."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions
        self._owners: dict[int, int] = {}
        self._lock = threading.Lock()

    def __call__(self, event: Event, tenants: Collection[int]) -> dict[int, Event]:
        view = SwitchPublic.model_validate(event.data)
        owners = self._owners_of(view_job_ids(view))
        return {
            tenant: Event(
                "switch",
                tenant_switch_view(
                    view, {job for job, owner in owners.items() if owner == tenant}
                ).model_dump(mode="json"),
            )
            for tenant in tenants
        }

    def _owners_of(self, job_ids: set[int]) -> dict[int, int]:
        with self._lock:
            unknown = job_ids - self._owners.keys()
            if unknown:
                with self.sessions() as session:
                    self._owners.update(job_tenants(session, job_ids=unknown))
            self._owners = {job: t for job, t in self._owners.items() if job in job_ids}
            return dict(self._owners)
