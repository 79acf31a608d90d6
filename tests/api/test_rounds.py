"""api.coordinator.rounds: what a decision round reads and applies follows what changed. A real
SQLite
store; `ActiveJobs` follows its session factory's commits, and is told about jobs written
without the ORM (`api.store.crud.insert_jobs`, the submissions' writer)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

from api.coordinator.jobstore import SqlJobStore
from api.coordinator.jobviews import QueueReasons
from api.coordinator.quotas import TenantLimits, TenantQuota, hold_back
from api.coordinator.rounds import ROUND_COLUMNS, ActiveJobs
from api.schemas import JobCreate, QueueReason
from api.store.crud import create_tenant_token, insert_jobs, new_job, tenant_for_token
from api.store.db import open_database
from api.store.models import Job
from scheduler.applier import SwitchIds
from scheduler.memory import JobState
from scheduler.snapshot import Admit, Decision, Queue

SPEC = JobCreate(name="r", n_workers=2, iterations=3, gradient_bytes=1_000)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[sessionmaker[Session], int]]:
    """``(sessions, a tenant's id)``."""
    engine, sessions = open_database(f"sqlite:///{tmp_path / 'rounds.db'}", pool_size=2)
    with sessions() as s:
        tenant = tenant_for_token(s, token=create_tenant_token(s, tenant="alice"))
        assert tenant is not None
        tenant_id = tenant.id
    yield sessions, tenant_id
    engine.dispose()


@pytest.fixture
def active(store: tuple[sessionmaker[Session], int]) -> Iterator[ActiveJobs]:
    """An `ActiveJobs` following `store`'s sessions."""
    active = ActiveJobs(store[0])
    yield active
    active.close()


def _stored(store: tuple[sessionmaker[Session], int], active: ActiveJobs, n: int) -> list[Job]:
    """`n` new queued jobs, committed through the ORM and read by `active`."""
    sessions, tenant_id = store
    with sessions() as s:
        jobs = _jobs(tenant_id, n)
        s.add_all(jobs)
        s.commit()
        active.refresh(s)
    return jobs


# A tenant with room for one admitted job.
ONE_JOB = TenantLimits("alice", max_jobs=1, aggregator_share=1.0)


def _held_back(
    active: ActiveJobs, tenant_id: int, limits: TenantLimits = ONE_JOB
) -> dict[int, tuple[str, list[int]]]:
    """What `hold_back` holds back of `active`'s queued jobs under `limits`."""
    return hold_back(active.queued_of, active.holding, {tenant_id: limits})


def _jobs(tenant_id: int, n: int) -> list[Job]:
    return [
        new_job(tenant_id=tenant_id, spec=SPEC, gradient_bytes=1_000, window=16)[0]
        for _ in range(n)
    ]


def test_jobs_written_without_the_orm_are_read_once_named(
    store: tuple[sessionmaker[Session], int],
) -> None:
    sessions, tenant_id = store
    active = ActiveJobs(sessions)
    try:
        with sessions() as s:
            active.refresh(s)  # the first refresh reads everything: nothing yet
            flushed = _jobs(tenant_id, 1)
            s.add_all(flushed)
            s.commit()
            active.refresh(s)
            assert set(active.queued) == {flushed[0].id}  # seen from its flush
            inserted = _jobs(tenant_id, 2)
            insert_jobs(s, inserted)
            s.commit()
            active.refresh(s)
            assert set(active.queued) == {flushed[0].id}  # no flush: not seen
            active.written(job.id for job in inserted)
            active.refresh(s)
            assert set(active.queued) == {flushed[0].id, *(job.id for job in inserted)}
            assert {active.views[job.id].iterations for job in inserted} == {3}
    finally:
        active.close()


def test_a_decision_that_changes_nothing_is_neither_applied_nor_loaded(
    store: tuple[sessionmaker[Session], int],
) -> None:
    sessions, tenant_id = store
    active = ActiveJobs(sessions)
    reasons = QueueReasons()
    no_ids = reasons.no_switch_job_id_message(2)
    try:
        with sessions() as s:
            told, new, admitted, fresh, waiting = jobs = _jobs(tenant_id, 5)
            told.reason = "no room in the pool"  # it waited before, for this reason
            waiting.reason = no_ids  # it waited before for a switch job id
            insert_jobs(s, jobs)
            s.commit()
            active.written(job.id for job in jobs)
            active.refresh(s)
        told_again = Queue(told.id, "no room in the pool")
        admissions = [Admit(j.id, hash_seed=j.id) for j in (admitted, fresh, waiting)]
        decisions: list[Decision] = [told_again, Queue(new.id, "no room in the pool"), *admissions]
        # One free switch job id: the first admission gets it, and only its job is loaded. A
        # queued job with a new reason is not loaded (the store writes the reason alone), nor
        # are the two admissions after the first: they will wait for an id, and the applier
        # sees them (the first could be refused by the switch).
        ids = SwitchIds(size=2)
        ids.take(-1)
        kept, load = active.to_apply(decisions, ids, reasons)
        assert kept == decisions[1:]
        assert load == {admitted.id}
        # Every id taken: no admission can happen this round, and the job whose row says it
        # waits for an id is left out (its reason recorded).
        ids.take(-2)
        kept, load = active.to_apply(decisions, ids, reasons)
        assert kept == decisions[1:4]
        assert load == set()
        assert reasons.of(waiting) == QueueReason(kind="switch_job_ids", message=no_ids)
        # A reason changes: the wait is applied again.
        told_other = Queue(told.id, "waiting behind a higher priority")
        kept, _ = active.to_apply([told_other], ids, reasons)
        assert kept == [told_other]
    finally:
        active.close()


def test_each_tenants_queued_and_holding_jobs_follow_the_commits(
    store: tuple[sessionmaker[Session], int], active: ActiveJobs
) -> None:
    sessions, tenant_id = store
    jobs = _stored(store, active, 3)
    assert active.queued_of == {tenant_id: {job.id for job in jobs}}
    assert not active.holding
    assert active.take_unqueued() == set()
    with sessions() as s:
        jobs = [s.get_one(Job, job.id) for job in jobs]
        jobs[0].state = JobState.ADMITTED
        jobs[1].state = JobState.CANCELLED
        s.commit()
        active.refresh(s)
        assert active.queued_of == {tenant_id: {jobs[2].id}}
        assert active.holding == {tenant_id: 1}
        assert active.take_unqueued() == {jobs[0].id, jobs[1].id}
        assert active.take_unqueued() == set()  # taken once
        jobs[0].state = JobState.FAILED
        jobs[2].state = JobState.ADMITTED
        s.commit()
        active.reload()  # a full read agrees with what the commits built
        active.refresh(s)
        assert not active.queued_of
        assert active.holding == {tenant_id: 1}
        assert active.take_unqueued() == {jobs[2].id}


def test_jobs_held_back_by_a_job_limit_wait_once_for_each_reason(
    store: tuple[sessionmaker[Session], int], active: ActiveJobs
) -> None:
    sessions, tenant_id = store
    jobs = _stored(store, active, 4)
    # One job of room: the oldest goes to the policy, the three after it wait.
    held_back = _held_back(active, tenant_id)
    why = "tenant quota: tenant 'alice' has 0 of its 1 admitted jobs"
    assert held_back == {tenant_id: (why, [j.id for j in jobs[1:]])}
    assert active.quota_waits(held_back) == [TenantQuota(j.id, why) for j in jobs[1:]]
    # The same again, nothing changed: no wait changes anything.
    assert active.quota_waits(held_back) == []
    with sessions() as s:  # one of them changes (a reason written, say): looked at again
        s.get_one(Job, jobs[2].id).reason = why
        s.commit()
        active.refresh(s)
    assert active.quota_waits(held_back) == [TenantQuota(jobs[2].id, why)]
    assert active.quota_waits(held_back) == []
    # The tenant's reason changes (the oldest job admitted): every wait is applied again.
    with sessions() as s:
        s.get_one(Job, jobs[0].id).state = JobState.ADMITTED
        s.commit()
        active.refresh(s)
    held_back = _held_back(active, tenant_id)
    why = "tenant quota: tenant 'alice' has 1 of its 1 admitted jobs"
    assert active.quota_waits(held_back) == [TenantQuota(j.id, why) for j in jobs[1:]]
    # A tenant with room for all its queued jobs holds none back.
    roomy = TenantLimits("alice", max_jobs=4, aggregator_share=1.0)
    assert _held_back(active, tenant_id, roomy) == {}
    # A full read forgets what was applied: after a failed round, every wait is applied.
    active.quota_waits(_held_back(active, tenant_id))
    active.reload()
    with sessions() as s:
        active.refresh(s)
    again = active.quota_waits(_held_back(active, tenant_id))
    assert [w.job_id for w in again] == [j.id for j in jobs[1:]]


def test_a_new_reason_of_a_queued_job_is_written_without_loading_it(
    store: tuple[sessionmaker[Session], int], active: ActiveJobs
) -> None:
    sessions, _ = store
    told, loaded, cancelled = jobs = _stored(store, active, 3)
    with sessions() as s:  # cancelled while the round runs, after its rows were read
        s.get_one(Job, cancelled.id).state = JobState.CANCELLED
        s.commit()
    with sessions() as s, s.no_autoflush:
        jobs_store = SqlJobStore(s, counters={}, reasons=QueueReasons(), known=active.rows)
        for job in jobs:
            assert jobs_store.set_reason(job.id, Queue(job.id, f"why {job.id}"))
        assert jobs_store.rows == {}  # nothing loaded
        assert jobs_store.set_reason(told.id, Queue(told.id, f"why {told.id}"))
        assert jobs_store.row(loaded.id).reason == f"why {loaded.id}"  # loaded after all
        assert set(jobs_store.changed) == {loaded.id}
        written = jobs_store.write_reasons(ROUND_COLUMNS)
        assert [(r.id, r.reason) for r in written] == [(told.id, f"why {told.id}")]
        assert jobs_store.write_reasons(ROUND_COLUMNS) == []
        s.commit()
    with sessions() as s:
        stored = {job.id: s.get_one(Job, job.id).reason for job in jobs}
    # Written to the job still queued only; the loaded one went with its row.
    assert stored == {
        told.id: f"why {told.id}",
        loaded.id: f"why {loaded.id}",
        cancelled.id: None,
    }
    active.reasons_written(written)
    assert active.rows[told.id].reason == f"why {told.id}"
    assert active.rows[cancelled.id].state == JobState.QUEUED  # as read before its cancel
    with sessions() as s:
        active.refresh(s)
    # Held as written, not read again; the cancelled job is read again: its commit said so.
    assert active.rows[told.id] is written[0]
    assert cancelled.id not in active.queued


def test_jobs_that_wait_for_the_same_reason_share_one_statement(
    store: tuple[sessionmaker[Session], int], active: ActiveJobs
) -> None:
    sessions, _ = store
    jobs = _stored(store, active, 5)
    statements: list[tuple[str, bool]] = []

    def seen(_conn: object, _cursor: object, sql: str, _params: object, _ctx: object, many: bool):
        if sql.lstrip().upper().startswith("UPDATE"):
            statements.append((sql, many))

    with sessions() as s, s.no_autoflush:
        engine = s.get_bind()
        event.listen(engine, "before_cursor_execute", seen)
        try:
            jobs_store = SqlJobStore(s, counters={}, reasons=QueueReasons(), known=active.rows)
            for i, job in enumerate(jobs):
                jobs_store.set_reason(job.id, Queue(job.id, "memory" if i % 2 else "policy"))
            written = jobs_store.write_reasons(ROUND_COLUMNS)
            s.commit()
        finally:
            event.remove(engine, "before_cursor_execute", seen)
    assert sorted((r.id, r.reason) for r in written) == [
        (job.id, "memory" if i % 2 else "policy") for i, job in enumerate(jobs)
    ]
    assert len(statements) == 2  # one for each reason, not one for each job
    assert not any(many for _, many in statements)


def test_a_held_back_job_whose_wait_a_round_wrote_is_not_given_it_again(
    store: tuple[sessionmaker[Session], int], active: ActiveJobs
) -> None:
    sessions, tenant_id = store
    jobs = _stored(store, active, 3)
    held_back = _held_back(active, tenant_id)
    waits = active.quota_waits(held_back)
    assert [w.job_id for w in waits] == [j.id for j in jobs[1:]]
    with sessions() as s, s.no_autoflush:  # the round writes their reasons
        jobs_store = SqlJobStore(s, counters={}, reasons=QueueReasons(), known=active.rows)
        for wait in waits:
            assert jobs_store.set_reason(wait.job_id, wait)
        written = jobs_store.write_reasons(ROUND_COLUMNS)
        s.commit()
    active.reasons_written(written)
    with sessions() as s:
        active.refresh(s)
    assert active.quota_waits(held_back) == []
