"""api.coordinator.submissions: submissions waiting together are stored in one transaction, and
what one of
them does wrong is answered to it alone. A real SQLite store; the writer is held back by its
`on_stored` callback of the batch before, so that the next submissions queue behind it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.orm import Session, sessionmaker

from api.coordinator.submissions import (
    Submission,
    Submissions,
    SubmissionsClosed,
    Submitted,
    UnknownToken,
)
from api.errors import Invalid
from api.schemas import JobCreate
from api.store.crud import create_tenant_token
from api.store.db import open_database
from api.store.models import Job


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[sessionmaker[Session], str, str]]:
    """``(sessions, alice's token, bob's token)``."""
    engine, sessions = open_database(f"sqlite:///{tmp_path / 'sub.db'}", pool_size=2)
    with sessions() as s:
        tokens = [create_tenant_token(s, tenant=name) for name in ("alice", "bob")]
    yield sessions, *tokens
    engine.dispose()


def _submission(token: str, name: str, key: str | None = None, size: int = 1_000) -> Submission:
    spec = JobCreate(name=name, n_workers=2, iterations=3, gradient_bytes=size)
    return Submission(token, spec, key, max_gradient_bytes=10_000, default_window=16)


def test_waiting_submissions_share_one_commit_and_fail_alone(
    store: tuple[sessionmaker[Session], str, str],
) -> None:
    sessions, token, bob = store
    gate = threading.Event()
    stored: list[list[int]] = []

    def on_stored(jobs: Sequence[Job]) -> None:
        stored.append([j.id for j in jobs])
        gate.wait(10)  # the first batch holds the writer while the others queue

    commits = 0

    def count(_session: Session) -> None:
        nonlocal commits
        commits += 1

    event.listen(sessions, "after_commit", count)
    writer = Submissions(sessions, on_stored=on_stored)

    async def run() -> list[object]:
        first = asyncio.ensure_future(writer.submit(_submission(token, "first")))
        while not stored:
            await asyncio.sleep(0.01)
        rest = [
            writer.submit(_submission(token, "a", key="k")),
            writer.submit(_submission(token, "a", key="k")),  # the same key: the same job
            writer.submit(_submission("inasched_bogus", "b")),
            writer.submit(_submission(token, "c", size=20_000)),  # over the limit
            writer.submit(_submission(token, "d")),
            writer.submit(_submission(bob, "e", key="k")),  # another tenant's key "k"
        ]
        pending = asyncio.gather(*rest, return_exceptions=True)
        await asyncio.sleep(0.2)
        gate.set()
        return [await first, *(await pending)]

    try:
        first, a1, a2, bad_token, too_big, d, e = asyncio.run(run())
    finally:
        writer.close()
    assert isinstance(bad_token, UnknownToken) and isinstance(too_big, Invalid)
    assert a1.join_token and a2.join_token is None and a1.job.id == a2.job.id  # type: ignore[union-attr]
    assert first.join_token and d.join_token and e.join_token  # type: ignore[union-attr]
    # Two transactions: the first submission's, then every other one's together.
    assert commits == 2 and writer.batches == 2
    assert stored == [[first.job.id], [a1.job.id, d.job.id, e.job.id]]  # type: ignore[union-attr]
    with sessions() as s:
        owners = sorted((j.name, j.tenant_id) for j in s.scalars(select(Job)))
    assert [name for name, _ in owners] == ["a", "d", "e", "first"]
    assert owners[2][1] != owners[0][1] == owners[1][1] == owners[3][1]


def test_a_closed_writer_refuses_and_stores_nothing(
    store: tuple[sessionmaker[Session], str, str],
) -> None:
    sessions, token, _ = store
    writer = Submissions(sessions, on_stored=lambda jobs: None)
    writer.close()
    with pytest.raises(SubmissionsClosed):
        asyncio.run(writer.submit(_submission(token, "late")))
    with sessions() as s:
        assert s.scalars(select(Job)).all() == []


def test_a_stored_job_reads_as_the_writer_answered_it(
    store: tuple[sessionmaker[Session], str, str],
) -> None:
    """The writer stores jobs with one INSERT, not through the ORM: what it answers (and hands
    to `on_stored`) is what the store holds, column by column, and a column no job sets (the
    JSON counter base) is NULL, not JSON null."""
    sessions, token, _ = store
    handed: list[Job] = []
    writer = Submissions(sessions, on_stored=handed.extend)

    async def run() -> list[Submitted]:
        return await asyncio.gather(
            writer.submit(_submission(token, "plain")),
            writer.submit(_submission(token, "keyed", key="k-1", size=2_000)),
        )

    try:
        answered = [done.job for done in asyncio.run(run())]
    finally:
        writer.close()
    assert sorted(j.id for j in handed) == sorted(j.id for j in answered)
    columns = [c.key for c in Job.__table__.columns]
    with sessions() as s:
        for job in answered:
            stored = s.get(Job, job.id)
            assert stored is not None
            assert {k: getattr(stored, k) for k in columns} == {k: getattr(job, k) for k in columns}
        assert s.scalar(select(func.count()).where(Job.counter_base.is_(None))) == 2
