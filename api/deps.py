"""Dependency aliases for the routes: the session, the caller's tenant, the worker's job."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Path, Query, Request
from sqlalchemy.orm import Session

from api.models import Job, Tenant
from api.runtime import Service
from api.security import same_digest
from api.store import tenant_for_token

__all__ = [
    "JobIdPath",
    "JoinedJobDep",
    "ServiceDep",
    "SessionDep",
    "StreamTenantDep",
    "TenantDep",
    "WorkerIdPath",
]

# Ids are 32-bit in the store (PostgreSQL INTEGER); a larger one cannot name a row.
JobIdPath = Annotated[int, Path(ge=1, le=2**31 - 1, description="the service's job id")]
WorkerIdPath = Annotated[int, Path(ge=0, le=31, description="worker id within the job")]


# Dependencies without I/O are async: FastAPI runs a sync dependency on the thread pool, one
# hop per dependency per request, and under load those hops queue behind each other.
async def get_service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


ServiceDep = Annotated[Service, Depends(get_service)]


def get_session(service: ServiceDep) -> Iterator[Session]:
    with service.sessions() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(401, detail, headers={"WWW-Authenticate": "Bearer"})


async def bearer_token(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise _unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
    return token.strip()


def _tenant(session: Session, token: str) -> Tenant:
    tenant = tenant_for_token(session, token=token)
    if tenant is None:
        raise _unauthorized("unknown API token; create one with 'inasched token create TENANT'")
    return tenant


def get_tenant(session: SessionDep, token: Annotated[str, Depends(bearer_token)]) -> Tenant:
    return _tenant(session, token)


TenantDep = Annotated[Tenant, Depends(get_tenant)]


async def stream_token(
    request: Request,
    token: Annotated[str | None, Query(max_length=256, description="for EventSource")] = None,
) -> str:
    # A browser's EventSource cannot send headers, so the stream also takes ?token=.
    return token or await bearer_token(request)


def get_stream_tenant(session: SessionDep, token: Annotated[str, Depends(stream_token)]) -> Tenant:
    return _tenant(session, token)


StreamTenantDep = Annotated[Tenant, Depends(get_stream_tenant)]


def get_joined_job(
    job_id: JobIdPath, session: SessionDep, token: Annotated[str, Depends(bearer_token)]
) -> Job:
    job = session.get(Job, job_id)
    if job is None:
        raise HTTPException(404, f"job {job_id} does not exist")
    if not same_digest(token, job.join_token_hash):
        raise _unauthorized(f"not the join token of job {job_id}")
    return job


JoinedJobDep = Annotated[Job, Depends(get_joined_job)]
