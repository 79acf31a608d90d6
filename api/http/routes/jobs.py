"""``/jobs``: submit, list, get and cancel a tenant's jobs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query

from api.coordinator.inputs import check_resubmission
from api.coordinator.jobviews import job_public
from api.coordinator.rendezvous import cancel_job
from api.coordinator.submissions import Submission, SubmissionsClosed, UnknownToken
from api.errors import NotFound
from api.http.deps import (
    CallerDep,
    JobIdPath,
    ServiceDep,
    SessionDep,
    TenantDep,
    bearer_token,
    not_serving,
    submissions_of,
    unknown_token,
)
from api.http.routes import not_found
from api.schemas import (
    JobCreate,
    JobCreated,
    JobDetail,
    JobList,
    JobPublic,
    JobStateName,
)
from api.store.crud import get_job, list_jobs

router = APIRouter(prefix="/jobs", tags=["jobs"])


@router.post(
    "",
    status_code=201,
    responses={
        403: {"description": "priority_class above the tenant's ceiling (max_priority_class)"},
        409: {"description": "the Idempotency-Key names a job of another body"},
        429: {"description": "the tenant submits faster than its rate; see Retry-After"},
    },
    summary="submit a job",
)
async def submit(
    spec: JobCreate,
    api_token: Annotated[str, Depends(bearer_token)],
    service: ServiceDep,
    idempotency_key: Annotated[str | None, Header(max_length=128)] = None,
) -> JobCreated:
    """The job, stored and queued, and its join token (shown only here; a retry with the same
    ``Idempotency-Key`` returns the same job, as it is now, with ``join_token`` null; 409 when
    its body differs). The answer does not wait for a decision round: a new job is
    ``queued`` with ``queue_reason`` ``scheduling`` until the next round (within
    milliseconds) admits it or says why it waits; ``GET /jobs/{id}``, the event stream and the
    workers' join show the outcome."""
    # Stored with the other submissions waiting, in one transaction (api.coordinator.submissions).
    submission = Submission(
        api_token=api_token,
        spec=spec,
        client_key=idempotency_key,
        max_gradient_bytes=service.settings.max_gradient_bytes,
        default_window=service.settings.window,
    )
    try:
        done = await submissions_of(service).submit(submission)
    except UnknownToken:
        raise unknown_token() from None
    except SubmissionsClosed as exc:
        raise not_serving(str(exc)) from None
    if done.join_token is None:
        check_resubmission(done.job, spec, gradient_bytes=done.gradient_bytes)
    public = job_public(done.job, service.coordinator.queue_reasons, JobPublic)
    return JobCreated.model_validate({**public.model_dump(), "join_token": done.join_token})


@router.get("", summary="list the tenant's jobs (an admin token: every tenant's)")
def index(
    caller: CallerDep,
    session: SessionDep,
    service: ServiceDep,
    state: JobStateName | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
) -> JobList:
    """``{"items": [JobPublic], "total": n}``, newest first."""
    owner = None if caller.admin else caller.tenant.id
    rows, total = list_jobs(session, tenant_id=owner, state=state, limit=limit, offset=offset)
    reasons = service.coordinator.queue_reasons
    return JobList(items=[job_public(r, reasons, JobPublic) for r in rows], total=total)


@router.get(
    "/{job_id}",
    responses=not_found("job"),
    summary="one job with its workers and priority history",
)
def show(
    job_id: JobIdPath, caller: CallerDep, session: SessionDep, service: ServiceDep
) -> JobDetail:
    """404 for another tenant's job (an admin token sees every job)."""
    owner = None if caller.admin else caller.tenant.id
    job = get_job(session, job_id=job_id, tenant_id=owner, details=True)
    if job is None:
        raise NotFound(f"job {job_id} does not exist")
    return job_public(job, service.coordinator.queue_reasons, JobDetail)


@router.post(
    "/{job_id}/cancel",
    responses={
        **not_found("job"),
        409: {"description": "the job already ended (finished, failed or cancelled)"},
    },
    summary="cancel a job",
)
def cancel(job_id: JobIdPath, tenant: TenantDep, service: ServiceDep) -> JobPublic:
    """The cancelled job; 409 if it already ended. Its workers are told on their next
    heartbeat and its switch memory is reclaimed now. The job stays readable (its record is
    the tenant's history): a cancel is a POST, not a DELETE."""
    return JobPublic.model_validate(
        cancel_job(service.coordinator, job_id=job_id, tenant_id=tenant.id)
    )
