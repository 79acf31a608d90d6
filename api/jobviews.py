"""The scheduler's view of the job store: `JobView`s from plain rows, and loading the few jobs
a decision round changes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from api.models import Job
from scheduler.memory import JobState, Partition
from scheduler.snapshot import JobView

__all__ = ["VIEW_COLUMNS", "ViewCache", "job_view", "load_jobs"]

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
    )


def load_jobs(s: Session, ids: set[int]) -> dict[int, Job]:
    """``{id: Job}`` for `ids`, in chunks that stay under every database's parameter limit."""
    out: dict[int, Job] = {}
    ordered = sorted(ids)
    for i in range(0, len(ordered), 500):
        chunk = ordered[i : i + 500]
        out.update((j.id, j) for j in s.scalars(select(Job).where(Job.id.in_(chunk))))
    return out


class ViewCache:
    """`JobView`s of the last round, reused for rows that did not change since.

    A round sees every active job but most are as they were; building a frozen `JobView` is
    the largest cost of a round with hundreds of jobs, comparing a row tuple is not.
    """

    def __init__(self) -> None:
        self._views: dict[int, tuple[tuple[Any, ...], JobView]] = {}

    def views(self, rows: Sequence[Row[Any]], starved: Mapping[int, float]) -> list[JobView]:
        """One `JobView` per row, in row order; forgets jobs no longer among `rows`."""
        fresh: dict[int, tuple[tuple[Any, ...], JobView]] = {}
        out = []
        for row in rows:
            key = (*row, starved.get(row.id, 0.0))
            cached = self._views.get(row.id)
            view = cached[1] if cached and cached[0] == key else job_view(row, starved_s=key[-1])
            fresh[row.id] = (key, view)
            out.append(view)
        self._views = fresh
        return out
