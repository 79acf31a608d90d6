"""Data functions over the job store. Every one takes the session and keyword arguments only.

They never commit on their own unless the docstring says so, so a caller can group them in one
transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, cast

from sqlalchemy import Table, func, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, defer, selectinload

from api.schemas import JobCreate
from api.security import JOIN_PREFIX, TENANT_PREFIX, hash_token, new_token
from api.store.models import ApiToken, BenchRun, Job, ServiceState, Tenant, utcnow
from api.store.tokens import check_tenant_name, live_token
from scheduler.memory import JobState

__all__ = [
    "create_job",
    "create_tenant_token",
    "get_bench_run",
    "get_job",
    "get_state",
    "in_chunks",
    "insert_jobs",
    "job_by_client_key",
    "list_bench_runs",
    "list_jobs",
    "new_job",
    "put_state",
    "store_bench_run",
    "tenant_for_token",
]


IN_CHUNK = 500  # ids per IN (...): under every database's parameter limit


def in_chunks(ids: Iterable[int]) -> Iterator[list[int]]:
    """`ids` in order, in lists of at most `IN_CHUNK`: one ``IN (...)`` each."""
    ordered = sorted(ids)
    for i in range(0, len(ordered), IN_CHUNK):
        yield ordered[i : i + IN_CHUNK]


def create_tenant_token(session: Session, *, tenant: str, admin: bool = False) -> str:
    """A new API token for `tenant` (created if new; an admin token with `admin`); commits.
    Returns the token in clear, which is never stored and cannot be shown again. Raises
    `api.store.tokens.BadTenantName` for an empty, over-long or odd name."""
    check_tenant_name(tenant)
    row = session.scalar(select(Tenant).where(Tenant.name == tenant))
    if row is None:
        row = Tenant(name=tenant)
        session.add(row)
        session.flush()
    token = new_token(TENANT_PREFIX)
    session.add(ApiToken(tenant_id=row.id, token_hash=hash_token(token), admin=admin))
    session.commit()
    return token


def tenant_for_token(session: Session, *, token: str) -> Tenant | None:
    """The tenant whose live (not revoked) API token is `token`, or None."""
    row = live_token(session, token=token)
    return row.tenant if row else None


def create_job(
    session: Session,
    *,
    tenant_id: int,
    spec: JobCreate,
    gradient_bytes: int,
    window: int,
    client_key: str | None = None,
) -> tuple[Job, str | None]:
    """Insert a queued job; commits. Returns ``(job, join_token)``.

    With a `client_key` already used by this tenant, returns ``(that job, None)``: a retried
    submission does not create a second job, and its join token is not shown again.
    """
    if client_key is not None:
        existing = job_by_client_key(session, tenant_id=tenant_id, client_key=client_key)
        if existing is not None:
            return existing, None
    job, token = new_job(
        tenant_id=tenant_id,
        spec=spec,
        gradient_bytes=gradient_bytes,
        window=window,
        client_key=client_key,
    )
    session.add(job)
    try:
        session.commit()
    except IntegrityError:
        # Two concurrent retries with the same key: the other one won; answer with its job.
        session.rollback()
        existing = job_by_client_key(session, tenant_id=tenant_id, client_key=client_key or "")
        if existing is None:
            raise
        return existing, None
    return job, token


def new_job(
    *,
    tenant_id: int,
    spec: JobCreate,
    gradient_bytes: int,
    window: int,
    client_key: str | None = None,
) -> tuple[Job, str]:
    """``(queued job, its join token)``, not yet added to any session (`create_job` adds and
    commits one; a benchmark adds thousands in one transaction)."""
    token = new_token(JOIN_PREFIX)
    # Every column the store would fill in is set here, so the job reads the same before it
    # is stored as after, and `insert_jobs` can store it without the ORM.
    job = Job(
        tenant_id=tenant_id,
        client_key=client_key,
        name=spec.name,
        state=JobState.QUEUED,
        priority_class=spec.priority_class,
        priority_level=0,
        n_workers=spec.n_workers,
        iterations=spec.iterations,
        iterations_done=0,
        gradient_bytes=gradient_bytes,
        model=spec.model,
        window=window,
        submitted_at=utcnow(),
        bytes_switch=0,
        bytes_ps=0,
        bypassed=0,
        preemptions_caused=0,
        preemptions_suffered=0,
        overran_declaration=False,
        join_token_hash=hash_token(token),
    )
    return job, token


def insert_jobs(session: Session, jobs: Sequence[Job]) -> None:
    """Store `jobs` (new ones, from `new_job`) in one INSERT and give each its id; they stay
    out of `session`, and the ORM's listeners (`api.coordinator.rounds.ActiveJobs`) do not see them.

    The ORM's unit of work cost more than the database's own work (`api.coordinator.submissions`
    has the
    figures). A column no job sets is left to the store (NULL), so that no JSON column gets
    JSON null."""
    table = cast(Table, Job.__table__)
    columns = [
        c.key
        for c in table.columns
        if c.key != "id" and any(getattr(j, c.key) is not None for j in jobs)
    ]
    rows = [{key: getattr(job, key) for key in columns} for job in jobs]
    stmt = insert(table).returning(table.c.id, sort_by_parameter_order=True)
    for job, job_id in zip(jobs, session.scalars(stmt, rows), strict=True):
        job.id = job_id


def job_by_client_key(session: Session, *, tenant_id: int, client_key: str) -> Job | None:
    """Tenant `tenant_id`'s job submitted with ``Idempotency-Key`` `client_key`, or None."""
    return session.scalar(
        select(Job).where(Job.tenant_id == tenant_id, Job.client_key == client_key)
    )


def get_job(
    session: Session, *, job_id: int, tenant_id: int | None = None, details: bool = False
) -> Job | None:
    """Job `job_id`, or None when absent or owned by another tenant than `tenant_id`."""
    stmt = select(Job).where(Job.id == job_id)
    if tenant_id is not None:
        stmt = stmt.where(Job.tenant_id == tenant_id)
    if details:
        stmt = stmt.options(selectinload(Job.workers), selectinload(Job.priority_history))
    return session.scalar(stmt)


def list_jobs(
    session: Session,
    *,
    tenant_id: int | None,
    state: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> tuple[Sequence[Job], int]:
    """``(jobs, total)``: a page of the tenant's jobs (every tenant's with `tenant_id` None),
    newest first, and how many match."""
    where = [] if tenant_id is None else [Job.tenant_id == tenant_id]
    if state is not None:
        where.append(Job.state == state)
    total = session.scalar(select(func.count()).select_from(Job).where(*where)) or 0
    rows = session.scalars(
        select(Job).where(*where).order_by(Job.id.desc()).limit(limit).offset(offset)
    ).all()
    return rows, total


def queued_job_ids(session: Session, *, tenant_id: int | None) -> Sequence[int]:
    """Ids of the tenant's queued jobs (every tenant's with `tenant_id` None)."""
    where = [Job.state == "queued"]
    if tenant_id is not None:
        where.append(Job.tenant_id == tenant_id)
    return session.scalars(select(Job.id).where(*where)).all()


def get_state(session: Session, *, key: str) -> dict[str, Any] | None:
    """The service-wide value stored under `key`, or None."""
    row = session.get(ServiceState, key)
    return dict(row.value) if row else None


def put_state(session: Session, *, key: str, value: dict[str, Any]) -> None:
    """Store `value` under `key` (no commit)."""
    row = session.get(ServiceState, key)
    if row is None:
        session.add(ServiceState(key=key, value=value))
    else:
        row.value = value


def store_bench_run(
    session: Session,
    *,
    tenant_id: int,
    workload: str,
    backend: str,
    summary: dict[str, Any],
    jobs: list[dict[str, Any]],
) -> BenchRun:
    """Store one JCT benchmark run (its summary.json and jobs.csv rows) of `tenant_id`;
    commits."""
    run = BenchRun(
        tenant_id=tenant_id, workload=workload, backend=backend, summary=summary, jobs=jobs
    )
    session.add(run)
    session.commit()
    return run


def list_bench_runs(
    session: Session, *, tenant_id: int | None, limit: int = 100, offset: int = 0
) -> Sequence[BenchRun]:
    """The tenant's stored benchmark runs (every run with `tenant_id` None), newest first (the
    `jobs` rows are not loaded into the answer)."""
    stmt = select(BenchRun).options(defer(BenchRun.jobs))
    if tenant_id is not None:
        stmt = stmt.where(BenchRun.tenant_id == tenant_id)
    return session.scalars(stmt.order_by(BenchRun.id.desc()).limit(limit).offset(offset)).all()


def get_bench_run(session: Session, *, run_id: int, tenant_id: int | None) -> BenchRun | None:
    """Benchmark run `run_id` with its jobs rows, or None when absent or another tenant's than
    `tenant_id` (None: any tenant's)."""
    run = session.get(BenchRun, run_id)
    if run is None or (tenant_id is not None and run.tenant_id != tenant_id):
        return None
    return run
