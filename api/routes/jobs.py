"""``/jobs``: submit, list, get and cancel a tenant's jobs."""

from __future__ import annotations

from functools import cache
from typing import Annotated

from fastapi import APIRouter, Header, Query

from api.deps import JobIdPath, ServiceDep, SessionDep, TenantDep
from api.errors import Invalid, NotFound
from api.rendezvous import cancel_job
from api.schemas import JobCreate, JobCreated, JobDetail, JobList, JobPublic, JobStateName
from api.store import create_job, get_job, list_jobs
from scheduler.workload import model_table

router = APIRouter(prefix="/jobs", tags=["jobs"])


@cache
def _models() -> dict[str, int]:
    return {name.lower(): grad for name, (grad, _) in model_table().items()}


def _gradient_bytes(spec: JobCreate) -> int:
    if spec.gradient_bytes is not None:
        return spec.gradient_bytes
    assert spec.model is not None
    grad = _models().get(spec.model.lower())
    if grad is None:
        known = ", ".join(sorted(model_table()))
        raise Invalid(("body", "model"), f"unknown model; known: {known}; or give gradient_bytes")
    return grad


@router.post("", status_code=201, summary="submit a job")
def submit(
    spec: JobCreate,
    tenant: TenantDep,
    session: SessionDep,
    service: ServiceDep,
    idempotency_key: Annotated[str | None, Header(max_length=128)] = None,
) -> JobCreated:
    """The queued or admitted job and its join token (shown only here; a retry with the same
    ``Idempotency-Key`` returns the same job with ``join_token`` null)."""
    job, token = create_job(
        session,
        tenant_id=tenant.id,
        spec=spec,
        gradient_bytes=_gradient_bytes(spec),
        window=spec.window or service.settings.window,
        client_key=idempotency_key,
    )
    if token is not None:
        service.coordinator.reschedule()
    session.refresh(job)
    service.coordinator.publish_jobs([job])
    return JobCreated.model_validate(
        {**JobPublic.model_validate(job).model_dump(), "join_token": token}
    )


@router.get("", summary="list the tenant's jobs")
def index(
    tenant: TenantDep,
    session: SessionDep,
    state: JobStateName | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
) -> JobList:
    """``{"items": [JobPublic], "total": n}``, newest first."""
    rows, total = list_jobs(session, tenant_id=tenant.id, state=state, limit=limit, offset=offset)
    return JobList(items=[JobPublic.model_validate(r) for r in rows], total=total)


@router.get("/{job_id}", summary="one job with its workers and priority history")
def show(job_id: JobIdPath, tenant: TenantDep, session: SessionDep) -> JobDetail:
    job = get_job(session, job_id=job_id, tenant_id=tenant.id, details=True)
    if job is None:
        raise NotFound(f"job {job_id} does not exist")
    return JobDetail.model_validate(job)


@router.delete("/{job_id}", summary="cancel a job")
def cancel(job_id: JobIdPath, tenant: TenantDep, service: ServiceDep) -> JobPublic:
    """The cancelled job; 409 if it already ended. Its workers are told on their next
    heartbeat and its switch memory is reclaimed now."""
    return JobPublic.model_validate(
        cancel_job(service.coordinator, job_id=job_id, tenant_id=tenant.id)
    )
