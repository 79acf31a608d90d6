"""``/jobs/{id}/workers``: the rendezvous of ``inasched worker`` (join token auth)."""

from __future__ import annotations

import time
from typing import Annotated, Any

from anyio import to_thread
from fastapi import APIRouter, Depends, Request

from api.coordinator.inputs import check_data_address
from api.coordinator.rendezvous import heartbeat, join, report_progress
from api.errors import Conflict
from api.http.deps import (
    JobIdPath,
    JoinedJobDep,
    ServiceDep,
    WorkerIdPath,
    get_joined_job,
    join_token,
)
from api.http.routes import not_found
from api.schemas import WorkerJoin, WorkerJoinRequest, WorkerProgress, WorkerState

# A worker started right after its job's submission may find it still queued; holding the join
# a few seconds spares it a retry loop (its HTTP client waits 10 s). The hold is an await on
# the job's next change (`api.coordinator.rounds.JobWaiters`), not a thread: a queued job's workers
# cost
# no request thread and no database connection while they wait.
JOIN_WAIT_S = 5.0

router = APIRouter(prefix="/jobs/{job_id}/workers", tags=["workers"])

CONFLICT: dict[int | str, dict[str, Any]] = {
    **not_found("job or worker"),
    409: {"description": "the job was cancelled or failed (body has its state)"},
}


async def joined_job_id(
    job_id: JobIdPath, token: Annotated[str, Depends(join_token)], service: ServiceDep
) -> int:
    """`job_id` once `token` is its join token (404, 401), checked in a session that is closed
    before the join waits."""

    def check() -> None:
        with service.sessions() as session:
            get_joined_job(job_id, session, token)

    await to_thread.run_sync(check)
    return job_id


@router.post("", status_code=201, responses=CONFLICT, summary="join a job")
async def join_job(
    job_id: JobIdPath,
    body: WorkerJoinRequest,
    joined: Annotated[int, Depends(joined_job_id)],
    service: ServiceDep,
    request: Request,
) -> WorkerJoin:
    """The worker's id, the switch and PS addresses and the job's aggregator placement.
    A job still waiting for switch memory answers after a short wait, or 409 ``queued``.
    422 for a `data_host` that is not the request's source address nor in the service's
    ``worker_networks`` (nor a rack's networks on a fabric), that is not unicast, or for the
    service's own address."""
    coord = service.coordinator
    topology = coord.topology
    own = [(e.host, e.port) for e in (topology.switch_data, topology.ps, *coord.fabric_data())]
    server = request.scope.get("server")
    if server and server[1] is not None:
        own.append((str(server[0]), int(server[1])))
    check_data_address(
        body.data_host,
        body.data_port,
        source=request.client.host if request.client else None,
        networks=[*service.settings.worker_networks, *coord.fabric_networks()],
        own=own,
    )
    deadline = time.monotonic() + JOIN_WAIT_S
    while True:
        with coord.waiters.watch(job_id) as changed:
            try:
                return await to_thread.run_sync(lambda: join(coord, job_id=job_id, request=body))
            except Conflict as exc:
                if exc.state != "queued" or time.monotonic() > deadline:
                    raise
            await changed(deadline - time.monotonic())


@router.post("/{worker_id}/heartbeat", responses=CONFLICT, summary="worker is alive")
def beat(
    job_id: JobIdPath, worker_id: WorkerIdPath, job: JoinedJobDep, service: ServiceDep
) -> WorkerState:
    """``{"state": ...}``; 409 once the job is cancelled or failed: the worker should stop."""
    return WorkerState(state=heartbeat(service.coordinator, job_id=job.id, worker_id=worker_id))


@router.post("/{worker_id}/progress", responses=CONFLICT, summary="report progress")
def progress(
    job_id: JobIdPath,
    worker_id: WorkerIdPath,
    body: WorkerProgress,
    job: JoinedJobDep,
    service: ServiceDep,
) -> WorkerState:
    """``{"state": ...}`` after recording cumulative progress; ``finished`` once every worker
    has done every iteration."""
    state = report_progress(service.coordinator, job_id=job.id, worker_id=worker_id, progress=body)
    return WorkerState(state=state)
