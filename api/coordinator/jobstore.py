"""`SqlJobStore`: the service's `JobStore`, the job rows of one database session.

The scheduler's `DecisionApplier` changes jobs only through it, after checking every
transition. Counters are settled onto a job's row when it gives up its switch job id, since
switch counters are per switch job id and ids are reused (`Job.counter_base`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from sqlalchemy import Row, Table, update
from sqlalchemy.orm import QueryableAttribute, Session

from api.coordinator.counters import settle_counters
from api.coordinator.jobviews import QueueReasons
from api.store.crud import in_chunks
from api.store.models import Job, PriorityChange, utcnow
from scheduler.applier import (
    NoSwitchJobId,
    Placement,
    PsRefused,
    StoredJob,
    SwitchRefused,
    Waiting,
)
from scheduler.memory import JobState
from scheduler.snapshot import Queue

__all__ = ["SqlJobStore"]


class SqlJobStore:
    """Job rows of `session`: those in `jobs` (already loaded), others loaded on first use.

    `changed` collects the rows whose public view changed, for the caller to publish.
    `known` holds rows (`api.coordinator.rounds.ROUND_COLUMNS`) read in this transaction: a job
    among them
    is read from there until it is written, so a round that only re-confirms why a job waits
    never loads it, and one that gives a queued job a new reason does not load it either: the
    reason waits in `reasons_due` until `write_reasons`.
    """

    def __init__(
        self,
        session: Session,
        *,
        counters: Mapping[int, Mapping[str, int]],
        reasons: QueueReasons,
        jobs: Mapping[int, Job] | None = None,
        known: Mapping[int, Row[Any]] | None = None,
    ) -> None:
        self.session = session
        self.known = known or {}
        self.counters = counters
        self.reasons = reasons
        self.rows: dict[int, Job] = dict(jobs or {})
        self.changed: dict[int, Job] = {}
        self.reasons_due: dict[int, str] = {}  # by job id: known, queued, not loaded

    def row(self, job_id: int) -> Job:
        job = self.rows.get(job_id)
        if job is None:
            job = self.session.get(Job, job_id)
            if job is None:
                raise KeyError(f"job {job_id} is not in the store")
            self.rows[job_id] = job
            if job_id in self.reasons_due:  # loaded after all: the reason goes with the row
                job.reason = self.reasons_due.pop(job_id)
                self.changed[job_id] = job
        return job

    def write_reasons(self, returning: Sequence[QueryableAttribute[Any]]) -> list[Row[Any]]:
        """Write the reasons due (`reasons_due`) to the jobs still queued; returns their rows
        as written (of the columns `returning`), so that nobody reads them again.

        One statement for each reason (and `api.store.crud.IN_CHUNK` of its jobs): a reason is
        shared by many jobs (a backlog waits for the same one). One statement for each job
        cost a round about 30 ms at 500 submissions/s on PostgreSQL.
        Not a flush: the session's listeners do not see it (the caller tells
        `api.coordinator.rounds.ActiveJobs`)."""
        due, self.reasons_due = self.reasons_due, {}
        sharing: dict[str, list[int]] = {}
        for job_id, why in due.items():
            sharing.setdefault(why, []).append(job_id)
        table = cast(Table, Job.__table__)
        written: list[Row[Any]] = []
        for why, job_ids in sharing.items():
            for chunk in in_chunks(job_ids):
                written += self.session.execute(
                    update(table)
                    .where(table.c.id.in_(chunk), table.c.state == JobState.QUEUED)
                    .values(reason=why)
                    .returning(*returning)
                ).all()
        return written

    def job(self, job_id: int) -> StoredJob:
        if job_id not in self.rows and (read := self.known.get(job_id)) is not None:
            return StoredJob(
                read.id,
                JobState(read.state),
                read.n_workers,
                read.window,
                read.priority_level,
                read.switch_job_id,
            )
        job = self.row(job_id)
        return StoredJob(
            job.id,
            JobState(job.state),
            job.n_workers,
            job.window,
            job.priority_level,
            job.switch_job_id,
        )

    def set_state(self, job_id: int, state: JobState, *, now: float, reason: str | None) -> None:
        job = self.row(job_id)
        job.state = state
        stamp = utcnow()
        if state == JobState.ADMITTED:
            job.admitted_at, job.reason = stamp, None
        elif state == JobState.RUNNING:
            job.started_at = stamp
        elif state.terminal:
            job.finished_at = stamp
            if state == JobState.FINISHED:
                job.jct_s = (stamp - job.submitted_at).total_seconds()
        if reason is not None:
            job.reason = reason
        self.changed[job_id] = job

    def set_reason(self, job_id: int, why: Waiting) -> bool:
        match why:
            case Queue():
                message = self.reasons.queued(job_id, why).message
            case NoSwitchJobId(max_jobs=max_jobs):
                message = self.reasons.no_switch_job_id(job_id, max_jobs).message
            case SwitchRefused(error=error):
                message = self.reasons.switch_refused(job_id, error).message
            case PsRefused(error=error):
                message = self.reasons.ps_refused(job_id, error).message
        read = self.known.get(job_id) if job_id not in self.rows else None
        if read is not None:
            if read.reason == message:
                self.reasons_due.pop(job_id, None)
                return False
            if read.state == JobState.QUEUED:
                self.reasons_due[job_id] = message
                return True
        job = self.row(job_id)
        if job.reason == message:
            return False
        job.reason = message
        self.changed[job_id] = job
        return True

    def place(self, job_id: int, placement: Placement | None) -> None:
        job = self.row(job_id)
        self.changed[job_id] = job
        if placement is None:
            # The partition and seed stay on the row for the record; without a switch job id
            # they hold nothing (`api.coordinator.jobviews.job_view`).
            if job.switch_job_id is not None:
                settle_counters(job, self.counters.get(job.switch_job_id, {}))
            job.switch_job_id = None
            return
        sid = placement.switch_job_id
        part = placement.partition
        job.switch_job_id = sid
        job.policy = placement.policy
        job.part_base, job.part_slots = (part.base, part.slots) if part else (None, None)
        job.hash_seed = placement.hash_seed
        job.shared_pool = placement.shared_pool
        job.counter_base = dict(self.counters.get(sid, {}))

    def set_priority(self, job_id: int, level: int, *, now: float) -> None:
        job = self.row(job_id)
        job.priority_level = level
        self.session.add(PriorityChange(job_id=job_id, t=now, level=level))
        self.changed[job_id] = job
