"""api.rounds: what a decision round reads and applies follows what changed. A real SQLite
store; `ActiveJobs` follows its session factory's commits, and is told about jobs written
without the ORM (`api.store.insert_jobs`, the submissions' writer)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from api.db import open_database
from api.jobviews import QueueReasons
from api.models import Job
from api.rounds import ActiveJobs
from api.schemas import JobCreate
from api.store import create_tenant_token, insert_jobs, new_job, tenant_for_token
from scheduler.applier import SwitchIds
from scheduler.snapshot import Admit, Queue

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


def test_a_wait_that_changes_nothing_is_neither_applied_nor_loaded(
    store: tuple[sessionmaker[Session], int],
) -> None:
    sessions, tenant_id = store
    active = ActiveJobs(sessions)
    reasons = QueueReasons()
    try:
        with sessions() as s:
            told, new, admitted, refused = jobs = _jobs(tenant_id, 4)
            told.reason = "no room in the pool"  # it waited before, for this reason
            insert_jobs(s, jobs)
            s.commit()
            active.written(job.id for job in jobs)
            active.refresh(s)
        told_again = Queue(told.id, "no room in the pool")
        # One free switch job id: the first admission gets it and is loaded; the second stays
        # queued for want of one, and is applied (to say so) but not loaded.
        ids = SwitchIds(size=2)
        ids.take(-1)
        decisions = [
            told_again,
            Queue(new.id, "no room in the pool"),
            Admit(admitted.id, hash_seed=1),
            Admit(refused.id, hash_seed=2),
        ]
        kept, load = active.to_apply(decisions, ids, reasons)
        assert kept == decisions[1:]
        assert load == {new.id, admitted.id}
        # A reason changes: the wait is applied again.
        told_other = Queue(told.id, "waiting behind a higher priority")
        kept, _ = active.to_apply([told_other], ids, reasons)
        assert kept == [told_other]
    finally:
        active.close()
