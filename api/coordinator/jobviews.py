"""The scheduler's view of the job store: `JobView`s from plain rows, loading the few jobs a
decision round changes, and why each queued job waits (`QueueReasons`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any, TypeVar

from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from api.coordinator.quotas import TenantQuota
from api.schemas import JobPublic, QueueGroup, QueueReason
from api.store.models import Job
from scheduler.memory import COPIES_PER_SLOT, JobState, Partition
from scheduler.snapshot import JobView, Queue

__all__ = ["VIEW_COLUMNS", "QueueReasons", "job_public", "job_view", "load_jobs"]

P = TypeVar("P", bound=JobPublic)

VIEW_COLUMNS = (
    Job.id,
    Job.state,
    Job.submitted_at,
    Job.n_workers,
    Job.gradient_bytes,
    Job.iterations,
    Job.iterations_done,
    Job.window,
    Job.priority_class,
    Job.priority_level,
    Job.part_base,
    Job.part_slots,
    Job.hash_seed,
    Job.switch_job_id,
    Job.tenant_id,
    Job.overran_declaration,
)


def job_view(row: Row[Any], *, starved_s: float = 0.0) -> JobView:
    """The scheduler's view of a job row (memory only while it holds a switch job id)."""
    holds = row.switch_job_id is not None
    part = None
    if holds and row.part_base is not None and row.part_slots:
        part = Partition(row.part_base, row.part_slots)
    return JobView(
        job_id=row.id,
        state=JobState(row.state),
        arrival_s=row.submitted_at.timestamp(),
        workers=row.n_workers,
        grad_bytes=row.gradient_bytes,
        iterations=row.iterations,
        iterations_done=row.iterations_done,
        window=row.window,
        priority_class=row.priority_class,
        priority=row.priority_level,
        starved_s=starved_s,
        partition=part,
        hash_seed=row.hash_seed if holds else None,
        overran_declaration=row.overran_declaration,
    )


def load_jobs(s: Session, ids: set[int]) -> dict[int, Job]:
    """``{id: Job}`` for `ids`, in chunks that stay under every database's parameter limit."""
    out: dict[int, Job] = {}
    ordered = sorted(ids)
    for i in range(0, len(ordered), 500):
        chunk = ordered[i : i + 500]
        out.update((j.id, j) for j in s.scalars(select(Job).where(Job.id.in_(chunk))))
    return out


NOT_YET_DECIDED = QueueReason(
    kind="scheduling", message="waiting for the scheduler's next decision round"
)


class QueueReasons:
    """Why each queued job waits, by job id, as the last decision round about it found.

    The decide thread records; request threads read. Kept in memory: after a restart the first
    round (which runs at start) finds every reason again.
    """

    def __init__(self) -> None:
        self._by_job: dict[int, QueueReason] = {}
        self._decided: dict[int, Queue] = {}  # the decision each recorded reason came from

    def queued(self, job_id: int, decision: Queue) -> QueueReason:
        """Record the policy's `Queue` decision (or a tenant quota's); returns the reason it
        gives."""
        if self._decided.get(job_id) == decision:
            return self._by_job[job_id]  # a waiting job hears the same every round
        if isinstance(decision, TenantQuota):
            why = QueueReason(kind="tenant_quota", message=decision.reason)
        elif decision.slots is not None:
            slots = decision.slots
            why = QueueReason(
                kind="partition",
                message=f"waiting for a partition of {slots:,} slots "
                f"({COPIES_PER_SLOT * slots:,} aggregators)",
                slots=slots,
            )
        else:
            why = QueueReason(kind="policy", message=decision.reason)
        self._record(job_id, why)
        self._decided[job_id] = decision
        return why

    @staticmethod
    def no_switch_job_id_message(max_jobs: int) -> str:
        """What a job hears when the switch's job table (`max_jobs` entries) is full."""
        return f"all {max_jobs:,} switch job ids in use"

    def no_switch_job_id(self, job_id: int, max_jobs: int) -> QueueReason:
        """Record that the switch's job table (`max_jobs` entries) had no free entry."""
        message = self.no_switch_job_id_message(max_jobs)
        known = self._by_job.get(job_id)
        if known is not None and known.kind == "switch_job_ids" and known.message == message:
            return known  # a backlog hears this every round
        return self._record(job_id, QueueReason(kind="switch_job_ids", message=message))

    def switch_refused(self, job_id: int, error: Exception) -> QueueReason:
        message = f"switch refused the job: {error}"
        return self._record(job_id, QueueReason(kind="switch_refused", message=message))

    def ps_refused(self, job_id: int, error: Exception) -> QueueReason:
        """Record that the job's PS did not take it (`api.coordinator.pslink`)."""
        message = f"its PS did not take the job: {error}"
        return self._record(job_id, QueueReason(kind="ps_unavailable", message=message))

    def forget(self, job_ids: Iterable[int]) -> None:
        """Forget why `job_ids` waited (they left the queue)."""
        for job_id in job_ids:
            self._by_job.pop(job_id, None)
            self._decided.pop(job_id, None)

    def grouped(self, job_ids: Iterable[int]) -> list[QueueGroup]:
        """The reasons the queued `job_ids` wait for, each with how many, most common first."""
        counts = Counter(
            (why.kind, why.message)
            for why in (self._by_job.get(job_id, NOT_YET_DECIDED) for job_id in job_ids)
        )
        groups = [QueueGroup(kind=k, message=m, jobs=n) for (k, m), n in counts.items()]
        return sorted(groups, key=lambda g: (-g.jobs, g.kind, g.message))

    def of(self, job: Job) -> QueueReason | None:
        """Why `job` waits; None unless it is queued."""
        if JobState(job.state) is not JobState.QUEUED:
            return None
        return self._by_job.get(job.id, NOT_YET_DECIDED)

    def _record(self, job_id: int, why: QueueReason) -> QueueReason:
        self._decided.pop(job_id, None)
        self._by_job[job_id] = why
        return why


def job_public(job: Job, reasons: QueueReasons, model: type[P]) -> P:
    """`job` as `model` (`JobPublic` or a subclass), with its queue reason."""
    return model.model_validate(job).model_copy(update={"queue_reason": reasons.of(job)})
