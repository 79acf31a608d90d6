"""Job lifecycle operations driven by clients: workers join, heartbeat and report progress;
tenants cancel. Each commits, publishes the job, and asks for a decision round when the change
can free or need switch memory. Every change of state goes through the coordinator's
`DecisionApplier`, which checks the transition. (Silent jobs fail in `Coordinator.reap`.)
"""

from __future__ import annotations

import logging

from p4ctl.backend import Endpoint
from sqlalchemy.orm import Session

from api.coordinator.fabriclink import NotUnderATor
from api.coordinator.inputs import check_progress
from api.coordinator.scheduling import Coordinator
from api.errors import Conflict, Invalid, NotFound
from api.schemas import WorkerJoin, WorkerJoinRequest, WorkerProgress
from api.store.crud import get_job
from api.store.models import Job, WorkerRow, utcnow
from scheduler.memory import JobState

__all__ = ["cancel_job", "heartbeat", "join", "report_progress"]

log = logging.getLogger(__name__)
ENDED_FOR_WORKERS = (JobState.CANCELLED, JobState.FAILED)


def _job(s: Session, job_id: int) -> Job:
    job = s.get(Job, job_id)
    if job is None:
        raise NotFound(f"job {job_id} does not exist")
    return job


def _worker(job: Job, worker_id: int) -> WorkerRow:
    for w in job.workers:
        if w.worker_id == worker_id:
            return w
    raise NotFound(f"job {job.id} has no worker {worker_id}; join first")


def _state(job: Job) -> JobState:
    return JobState(job.state)


def _refuse_ended(job: Job) -> None:
    if job.state in ENDED_FOR_WORKERS:
        raise Conflict(f"job {job.id} is {job.state}: {job.reason or 'stop'}", state=job.state)


def join(coord: Coordinator, *, job_id: int, request: WorkerJoinRequest) -> WorkerJoin:
    """Register a worker's UDP socket with the switch; returns its rendezvous answer.

    Joining again from the same address gives the same worker id (a retried join).
    """
    with coord.lock, coord.sessions() as s:
        job = _job(s, job_id)
        _refuse_ended(job)
        if job.state == JobState.FINISHED:
            raise Conflict(f"job {job.id} already finished", state=job.state)
        if job.switch_job_id is None:
            raise Conflict(
                f"job {job.id} is queued: {job.reason or 'waiting for switch memory'}; retry",
                state=job.state,
                retry_after_s=1,
            )
        address = (str(request.data_host), request.data_port)
        try:
            data = coord.data_address_of(address[0])
        except NotUnderATor as exc:
            raise Invalid(("body", "data_host"), str(exc)) from None
        row = next((w for w in job.workers if (w.host, w.port) == address), None)
        if row is None:
            taken = {w.worker_id for w in job.workers}
            free = [i for i in range(job.n_workers) if i not in taken]
            if not free:
                raise Conflict(
                    f"job {job.id} already has its {job.n_workers} workers", state=job.state
                )
            row = WorkerRow(worker_id=free[0], host=address[0], port=address[1])
            job.workers.append(row)
        row.last_heartbeat = utcnow()
        coord.backend.add_worker(job.switch_job_id, row.worker_id, Endpoint(*address))
        if job.state == JobState.ADMITTED and len(job.workers) == job.n_workers:
            store = coord.store(s, {job.id: job})
            coord.applier.transition(store, job.id, JobState.RUNNING, now=coord.clock())
        s.commit()
        answer = _join_answer(coord, job, row.worker_id, data)
    coord.publish_jobs([job])
    return answer


def _join_answer(coord: Coordinator, job: Job, worker_id: int, switch: Endpoint) -> WorkerJoin:
    assert job.switch_job_id is not None and job.policy is not None
    topo = coord.topology
    if job.part_base is not None:
        placement: dict[str, object] = {
            "kind": "static",
            "part_base": job.part_base,
            "part_size": job.part_slots,
        }
    else:
        # Below any partition static jobs of an earlier policy held at admission.
        pool = job.shared_pool or coord.pool.aggregators
        placement = {"kind": "hashed", "seed": job.hash_seed, "pool": pool}
    return WorkerJoin.model_validate(
        {
            "job_id": job.id,
            "switch_job_id": job.switch_job_id,
            "worker_id": worker_id,
            "fan_in": job.n_workers,
            "policy": job.policy,
            "switch": {"host": switch.host, "port": switch.port},
            "ps": {"host": topo.ps.host, "port": topo.ps.port},
            "lanes": coord.pool.lanes,
            "window": job.window,  # a static worker holds it to its partition (window_limit)
            "placement": placement,
            "iterations": job.iterations,
            "gradient_bytes": job.gradient_bytes,
            "model": job.model,
            "heartbeat_interval_s": coord.heartbeat_interval_s,
        }
    )


def heartbeat(coord: Coordinator, *, job_id: int, worker_id: int) -> JobState:
    """Note that the worker is alive; returns the job's state (409 when it was stopped)."""
    with coord.sessions() as s:
        job = _job(s, job_id)
        _refuse_ended(job)
        _worker(job, worker_id).last_heartbeat = utcnow()
        s.commit()
        return _state(job)


def report_progress(
    coord: Coordinator, *, job_id: int, worker_id: int, progress: WorkerProgress
) -> JobState:
    """Record a worker's progress; the job finishes when every worker has done every
    iteration. Returns the job's state. Reports are cumulative, so a retry is harmless."""
    finished = False
    with coord.lock, coord.sessions() as s:
        job = _job(s, job_id)
        _refuse_ended(job)
        row = _worker(job, worker_id)
        if progress.iterations_done > job.iterations:
            raise Invalid(
                ("body", "iterations_done"), f"exceeds the job's {job.iterations} iterations"
            )
        check_progress(job, worker_id, progress, lanes=coord.pool.lanes)
        if job.state == JobState.FINISHED:
            return _state(job)
        row.iterations_done = max(row.iterations_done, progress.iterations_done)
        row.bytes_switch = max(row.bytes_switch, progress.bytes_switch)
        row.bytes_ps = max(row.bytes_ps, progress.bytes_ps)
        row.last_heartbeat = utcnow()
        complete = len(job.workers) == job.n_workers
        job.iterations_done = min(w.iterations_done for w in job.workers) if complete else 0
        job.bytes_switch = sum(w.bytes_switch for w in job.workers)
        job.bytes_ps = sum(w.bytes_ps for w in job.workers)
        if complete and job.iterations_done >= job.iterations and job.state == JobState.RUNNING:
            store = coord.store(s, {job.id: job})
            coord.applier.transition(store, job.id, JobState.FINISHED, now=coord.clock())
            finished = True
        s.commit()
    coord.publish_jobs([job])
    if finished:
        log.info("job %d finished, JCT %.3f s", job.id, job.jct_s or 0.0)
        coord.reschedule()
    else:
        coord.mark_dirty()
    return _state(job)


def cancel_job(coord: Coordinator, *, job_id: int, tenant_id: int) -> Job:
    """Cancel the tenant's job (404 if not theirs, 409 if it already ended); its memory is
    reclaimed at once and its workers learn it on their next heartbeat."""
    with coord.lock, coord.sessions() as s:
        job = get_job(s, job_id=job_id, tenant_id=tenant_id)
        if job is None:
            raise NotFound(f"job {job_id} does not exist")
        store = coord.store(s, {job.id: job})
        coord.applier.transition(
            store, job.id, JobState.CANCELLED, now=coord.clock(), reason="cancelled by its tenant"
        )
        s.commit()
    coord.reschedule()
    with coord.sessions() as s:
        fresh = get_job(s, job_id=job_id)
        assert fresh is not None
    coord.publish_jobs([fresh])
    return fresh
