"""Dependency aliases for the routes: the session, the caller's tenant, the worker's job."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Path, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from api.coordinator.runtime import Service
from api.coordinator.submissions import Submissions
from api.security import same_digest
from api.store.models import Job
from api.store.tokens import Caller, TenantRef, live_caller

__all__ = [
    "AdminDep",
    "CallerDep",
    "JobIdPath",
    "JoinedJobDep",
    "ServiceDep",
    "SessionDep",
    "StreamCallerDep",
    "StreamTenantDep",
    "TenantDep",
    "WorkerIdPath",
    "bearer_token",
    "caller_of",
    "get_joined_job",
    "join_token",
    "not_serving",
    "submissions_of",
    "unknown_token",
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


# Declared in the OpenAPI document, so that /docs has an "Authorize" button and every route
# shows which token it takes; both arrive as ``Authorization: Bearer <token>``. Missing or
# malformed headers are answered by `_bearer` below, with a message that says what to send.
TENANT_TOKEN = HTTPBearer(
    scheme_name="tenantToken",
    description="A tenant API token ('inasched token create TENANT'; `inasched up` prints one).",
    auto_error=False,
)
JOIN_TOKEN = HTTPBearer(
    scheme_name="joinToken",
    description="A job's join token, returned once by POST /jobs; only for the worker routes.",
    auto_error=False,
)
BearerCredentials = HTTPAuthorizationCredentials | None


def _bearer(credentials: BearerCredentials) -> str:
    token = credentials.credentials.strip() if credentials is not None else ""
    if not token:
        raise _unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
    return token


async def bearer_token(credentials: Annotated[BearerCredentials, Depends(TENANT_TOKEN)]) -> str:
    return _bearer(credentials)


async def join_token(credentials: Annotated[BearerCredentials, Depends(JOIN_TOKEN)]) -> str:
    return _bearer(credentials)


def caller_of(session: Session, token: str) -> Caller:
    """The caller whose live API token is `token`; 401 otherwise."""
    caller = live_caller(session, token=token)
    if caller is None:
        raise unknown_token()
    return caller


def unknown_token() -> HTTPException:
    """The 401 for a token that is not (or no longer) a live API token."""
    return _unauthorized(
        "unknown API token, or a revoked one; create one with 'inasched token create TENANT'"
    )


def submissions_of(service: Service) -> Submissions:
    """The service's submission writer; 503 while the service is not started."""
    if service.submissions is None:
        raise not_serving("the service is not started; submit again in a moment")
    return service.submissions


def not_serving(detail: str) -> HTTPException:
    """A 503 that asks the client to come back in a second."""
    return HTTPException(503, detail, headers={"Retry-After": "1"})


def get_caller(session: SessionDep, token: Annotated[str, Depends(bearer_token)]) -> Caller:
    return caller_of(session, token)


CallerDep = Annotated[Caller, Depends(get_caller)]


async def get_tenant(caller: CallerDep) -> TenantRef:
    return caller.tenant


TenantDep = Annotated[TenantRef, Depends(get_tenant)]


async def get_admin(caller: CallerDep) -> Caller:
    if not caller.admin:
        raise HTTPException(
            403,
            f"this needs an admin token; tenant '{caller.tenant.name}' has a tenant token "
            "(an admin makes one with 'inasched token create NAME --admin')",
        )
    return caller


AdminDep = Annotated[Caller, Depends(get_admin)]


async def stream_token(
    credentials: Annotated[BearerCredentials, Depends(TENANT_TOKEN)],
    token: Annotated[str | None, Query(max_length=256, description="for EventSource")] = None,
) -> str:
    # A browser's EventSource cannot send headers, so the stream also takes ?token=.
    return token or _bearer(credentials)


def get_stream_caller(service: ServiceDep, token: Annotated[str, Depends(stream_token)]) -> Caller:
    # Its own short session, not `SessionDep`'s: a stream must hold no store connection while
    # it stays open (a few dozen open streams would empty the pool for everyone).
    with service.sessions() as session:
        return caller_of(session, token)


StreamCallerDep = Annotated[Caller, Depends(get_stream_caller)]


async def get_stream_tenant(caller: StreamCallerDep) -> TenantRef:
    return caller.tenant


StreamTenantDep = Annotated[TenantRef, Depends(get_stream_tenant)]


def get_joined_job(
    job_id: JobIdPath, session: SessionDep, token: Annotated[str, Depends(join_token)]
) -> Job:
    job = session.get(Job, job_id)
    if job is None:
        raise HTTPException(404, f"job {job_id} does not exist")
    if not same_digest(token, job.join_token_hash):
        raise _unauthorized(f"not the join token of job {job_id}")
    return job


JoinedJobDep = Annotated[Job, Depends(get_joined_job)]
