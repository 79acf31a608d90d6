"""The job store: SQLAlchemy 2.0 models of tenants, jobs, workers and benchmark runs.

The Alembic revision in ``api/store/migrations/versions`` creates exactly these tables; a test holds
the two together.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    TypeDecorator,
    UniqueConstraint,
    false,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from scheduler.memory import JobState

__all__ = [
    "ApiToken",
    "Base",
    "BenchRun",
    "Job",
    "JobStateType",
    "PriorityChange",
    "ServiceState",
    "Tenant",
    "UTCDateTime",
    "WorkerRow",
    "utcnow",
]


def utcnow() -> datetime:
    """Now, timezone-aware UTC."""
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp that always comes back timezone-aware UTC (SQLite drops the zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value


class JobStateType(TypeDecorator[JobState]):
    """A `JobState`, stored as its value in a VARCHAR(16) (no database enum type: a state added
    later needs no migration); rows come back as members, never as bare strings."""

    impl = String(16)
    cache_ok = True

    def process_bind_param(self, value: JobState | str | None, dialect: Dialect) -> str | None:
        return None if value is None else JobState(value).value

    def process_result_value(self, value: str | None, dialect: Dialect) -> JobState | None:
        return None if value is None else JobState(value)


class Base(DeclarativeBase):
    type_annotation_map: dict[Any, Any] = {datetime: UTCDateTime, dict[str, Any]: JSON}


class Tenant(Base):
    __tablename__ = "tenants"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # The tenant's own quota, set by an admin; None: the service's default (settings).
    max_jobs: Mapped[int | None]
    aggregator_share: Mapped[float | None] = mapped_column(Float)
    max_priority_class: Mapped[int | None]
    submit_rate: Mapped[float | None] = mapped_column(Float)
    submit_burst: Mapped[int | None]


class ApiToken(Base):
    """A tenant's API token; only its SHA-256 is stored (tokens are 256-bit random)."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # An admin token changes the policy, sees every tenant's jobs and manages tokens.
    admin: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # Set once revoked: the token opens nothing from then on, and the row stays for the record.
    revoked_at: Mapped[datetime | None]
    tenant: Mapped[Tenant] = relationship(lazy="joined")


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (UniqueConstraint("tenant_id", "client_key", name="uq_jobs_client_key"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"), index=True)
    # The Idempotency-Key of the submission: a retried POST returns the same job.
    client_key: Mapped[str | None] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(128))
    # Written only through the scheduler's applier, which checks every transition.
    state: Mapped[JobState] = mapped_column(JobStateType(), index=True)
    reason: Mapped[str | None] = mapped_column(String(512))
    policy: Mapped[str | None] = mapped_column(String(16))
    priority_class: Mapped[int] = mapped_column(default=0)
    priority_level: Mapped[int] = mapped_column(default=0)
    n_workers: Mapped[int]
    iterations: Mapped[int]
    iterations_done: Mapped[int] = mapped_column(default=0)
    gradient_bytes: Mapped[int] = mapped_column(BigInteger)
    model: Mapped[str | None] = mapped_column(String(64))
    window: Mapped[int]
    submitted_at: Mapped[datetime] = mapped_column(default=utcnow)
    admitted_at: Mapped[datetime | None]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    jct_s: Mapped[float | None] = mapped_column(Float)
    bytes_switch: Mapped[int] = mapped_column(BigInteger, default=0)
    bytes_ps: Mapped[int] = mapped_column(BigInteger, default=0)
    bypassed: Mapped[int] = mapped_column(BigInteger, default=0)
    preemptions_caused: Mapped[int] = mapped_column(BigInteger, default=0)
    preemptions_suffered: Mapped[int] = mapped_column(BigInteger, default=0)
    # Set while the job holds switch state (admitted, or ended but not yet reclaimed).
    switch_job_id: Mapped[int | None] = mapped_column(Integer, index=True)
    part_base: Mapped[int | None]
    part_slots: Mapped[int | None]
    hash_seed: Mapped[int | None] = mapped_column(BigInteger)
    # The shared pool a hashed job hashes into (aggregators 0 .. shared_pool - 1): below the
    # partitions of static jobs admitted under an earlier policy. None: the whole pool.
    shared_pool: Mapped[int | None]
    # Switch counters are per switch job id and ids are reused: the values the id's counters
    # had when this job got it, subtracted from later reads.
    counter_base: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # Set once the switch counted more of the job's packets than its declared iterations
    # account for: srtf ranks it by attained service, behind every job whose declaration holds.
    overran_declaration: Mapped[bool] = mapped_column(
        Boolean, default=False, server_default=false()
    )
    join_token_hash: Mapped[str] = mapped_column(String(64))

    workers: Mapped[list[WorkerRow]] = relationship(
        back_populates="job", order_by="WorkerRow.worker_id", cascade="all, delete-orphan"
    )
    priority_history: Mapped[list[PriorityChange]] = relationship(
        order_by="PriorityChange.id", cascade="all, delete-orphan"
    )


class WorkerRow(Base):
    __tablename__ = "workers"
    __table_args__ = (UniqueConstraint("job_id", "worker_id", name="uq_workers_job_worker"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    worker_id: Mapped[int]
    host: Mapped[str] = mapped_column(String(255))
    port: Mapped[int]
    joined_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_heartbeat: Mapped[datetime] = mapped_column(default=utcnow)
    iterations_done: Mapped[int] = mapped_column(default=0)
    bytes_switch: Mapped[int] = mapped_column(BigInteger, default=0)
    bytes_ps: Mapped[int] = mapped_column(BigInteger, default=0)
    job: Mapped[Job] = relationship(back_populates="workers")


class PriorityChange(Base):
    __tablename__ = "priority_changes"

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    t: Mapped[float] = mapped_column(Float)
    level: Mapped[int]


class BenchRun(Base):
    __tablename__ = "bench_runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    # The tenant that stored the run; only it (and admins) see it. None: stored before runs
    # had owners, seen by admins only.
    tenant_id: Mapped[int | None] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), index=True
    )
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    workload: Mapped[str] = mapped_column(String(256))
    backend: Mapped[str] = mapped_column(String(32))
    summary: Mapped[dict[str, Any]]
    jobs: Mapped[list[dict[str, Any]]] = mapped_column(JSON)


class ServiceState(Base):
    """Small service-wide values that survive a restart (the current policy)."""

    __tablename__ = "service_state"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[dict[str, Any]]
