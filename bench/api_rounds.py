"""The decision round's cost against the number of active jobs, for ``python -m bench.api``.

A `Coordinator` on the in-memory switch runs over a store filled with N queued jobs of a
backlog tenant; its first round admits what fits (under atp: one job per switch job id, 1,024)
and leaves the rest queued. Then, `rounds` times: one more job is submitted through the
service's own store code and one round is timed (what a submission costs the service); then
one round with nothing new to admit is timed after a full read of the rows (what every round
read before rounds read only what changed).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from p4ctl.backend import Endpoint, InMemorySwitch
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from api.coordinator.events import EventBus
from api.coordinator.scheduling import Coordinator
from api.coordinator.topology import Topology
from api.schemas import JobCreate
from api.settings import Settings
from api.store.crud import create_job, create_tenant_token, new_job, tenant_for_token
from api.store.db import open_database
from api.store.models import Job
from scheduler.memory import JobState
from scheduler.spec import PolicySpec

__all__ = ["RoundTime", "fill_store", "round_times"]

DISCARD = Endpoint("127.0.0.1", 9)
SPEC = JobCreate(name="backlog", n_workers=4, iterations=100, gradient_bytes=4_000_000)
BATCH = 1000  # jobs per transaction when filling a store


@dataclass(frozen=True, slots=True)
class RoundTime:
    database: str
    policy: str
    active: int
    queued: int
    rounds: int
    median_ms: float
    max_ms: float
    full_read_ms: float


def fill_store(sessions: sessionmaker[Session], *, tenant: str, jobs: int) -> int:
    """Add `jobs` queued jobs of `tenant` (created if new) in a few transactions, through the
    store's own `new_job`; returns the tenant's id."""
    with sessions() as s:
        found = tenant_for_token(s, token=create_tenant_token(s, tenant=tenant))
        assert found is not None
        tenant_id = found.id
        for start in range(0, jobs, BATCH):
            for _ in range(start, min(jobs, start + BATCH)):
                job, _token = new_job(
                    tenant_id=tenant_id,
                    spec=SPEC,
                    gradient_bytes=SPEC.gradient_bytes or 0,
                    window=Settings().window,
                )
                s.add(job)
            s.commit()
    return tenant_id


@contextmanager
def _coordinator(sessions: sessionmaker[Session], policy: str) -> Iterator[Coordinator]:
    settings = Settings(policy=PolicySpec(policy))
    # No data plane: the tables stay plain dicts, as in the benchmark's service.
    backend = InMemorySwitch(settings.switch.aggregators, settings.switch.lanes)
    coord = Coordinator(
        sessions=sessions,
        backend=backend,
        topology=Topology(switch_data=DISCARD, ps=DISCARD),
        events=EventBus(),
        policy=settings.policy,
        seed=settings.seed,
        tick_s=settings.tick_s,
        heartbeat_interval_s=settings.heartbeat_interval_s,
        heartbeat_timeout_s=settings.heartbeat_timeout_s,
        verify_progress=False,
    )
    try:
        yield coord
    finally:
        coord.active.close()
        coord.releaser.stop()


def _timed_round(coord: Coordinator) -> float:
    t0 = time.perf_counter()
    with coord.lock:
        coord.decision_round()
    return time.perf_counter() - t0


def round_times(
    database: str, database_url: str, *, policy: str, sizes: tuple[int, ...], rounds: int
) -> list[RoundTime]:
    """One `RoundTime` per size in `sizes` (ascending), all on one fresh store at
    `database_url`: the store grows from one size to the next."""
    engine, sessions = open_database(database_url, pool_size=4)
    out: list[RoundTime] = []
    try:
        with _coordinator(sessions, policy) as coord:
            coord.releaser.start()
            tenant_id = fill_store(sessions, tenant="bench", jobs=0)
            have = 0
            for size in sizes:
                fill_store(sessions, tenant="backlog", jobs=size - have)
                have = size
                _timed_round(coord)  # reads the new rows, admits what fits
                times = []
                for _ in range(rounds):
                    with sessions() as s:
                        create_job(
                            s,
                            tenant_id=tenant_id,
                            spec=SPEC,
                            gradient_bytes=SPEC.gradient_bytes or 0,
                            window=Settings().window,
                        )
                    times.append(_timed_round(coord))
                    have += 1
                coord.active.reload()
                full = _timed_round(coord)
                with sessions() as s:
                    queued = s.scalar(
                        select(func.count()).select_from(Job).where(Job.state == JobState.QUEUED)
                    )
                out.append(
                    RoundTime(
                        database=database,
                        policy=policy,
                        active=len(coord.active.rows),
                        queued=queued or 0,
                        rounds=rounds,
                        median_ms=statistics.median(times) * 1e3,
                        max_ms=max(times) * 1e3,
                        full_read_ms=full * 1e3,
                    )
                )
    finally:
        engine.dispose()
    return out
