"""`JobTable`: the mutable job records both simulators keep, and the results they report.

It turns records into a `Snapshot`, applies a policy's decisions (checking every lifecycle
transition and every partition reservation), and accumulates per-job metrics. The REST
service keeps the same information in its database instead.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from scheduler.memory import JobState, MemoryMap, Partition, check_transition
from scheduler.service import Scheduler
from scheduler.snapshot import Admit, Decision, JobView, Queue, Reclaim, Reject, SetPriority
from scheduler.workload import JobSpec

__all__ = ["JobRecord", "JobResult", "JobTable"]

log = logging.getLogger(__name__)

_HOLDING = (JobState.ADMITTED, JobState.RUNNING)


@dataclass(slots=True)
class JobRecord:
    """A job's mutable state inside a simulation."""

    spec: JobSpec
    window: int
    state: JobState = JobState.QUEUED
    iterations_done: float = 0.0
    priority: int = 0
    starved_s: float = 0.0
    partition: Partition | None = None
    hash_seed: int | None = None
    admitted_s: float | None = None
    finished_s: float | None = None
    bytes_switch: float = 0.0
    bytes_ps: float = 0.0
    preemptions_suffered: float = 0.0
    preemptions_caused: float = 0.0
    decisions: list[Decision] = field(default_factory=list)

    def view(self) -> JobView:
        return JobView(
            job_id=self.spec.job_id,
            state=self.state,
            arrival_s=self.spec.arrival_s,
            workers=self.spec.workers,
            grad_bytes=self.spec.grad_bytes,
            iterations=self.spec.iterations,
            iterations_done=int(self.iterations_done),
            window=self.window,
            priority_class=self.spec.priority_class,
            starved_s=self.starved_s,
            priority=self.priority,
            partition=self.partition,
            hash_seed=self.hash_seed,
        )


@dataclass(frozen=True, slots=True)
class JobResult:
    """Per-job outcome of a run; times in virtual seconds, bytes of gradient (per worker)."""

    job_id: int
    arrival_s: float
    admitted_s: float
    finished_s: float
    bytes_switch: float
    bytes_ps: float
    preemptions_suffered: float
    preemptions_caused: float

    @property
    def jct_s(self) -> float:
        return self.finished_s - self.arrival_s

    @property
    def queueing_s(self) -> float:
        return self.admitted_s - self.arrival_s


class JobTable:
    """Job records keyed by id, with decision application."""

    def __init__(self, scheduler: Scheduler, window: int) -> None:
        self.scheduler = scheduler
        self.window = window
        self.records: dict[int, JobRecord] = {}
        # Jobs not yet terminal: what every snapshot holds, kept apart so that a long run's
        # finished jobs cost nothing per event.
        self.live: dict[int, JobRecord] = {}
        self.memory = MemoryMap(scheduler.pool)

    def add(self, spec: JobSpec) -> JobRecord:
        rec = JobRecord(spec=spec, window=self.window)
        self.records[spec.job_id] = rec
        self.live[spec.job_id] = rec
        return rec

    def active(self) -> list[JobRecord]:
        """Records holding memory (admitted or running), by job id."""
        return [r for r in self.live.values() if r.state in _HOLDING]

    def decide(self, now: float, extra: Iterable[JobRecord] = ()) -> tuple[Decision, ...]:
        """Run the policy on the live jobs (plus `extra`, e.g. just-finished ones) and apply."""
        views = [r.view() for r in (*self.live.values(), *extra)]
        decisions = self.scheduler.decide(self.scheduler.snapshot(now, views))
        for d in decisions:
            self.apply(now, d)
        return decisions

    def apply(self, now: float, d: Decision) -> None:
        rec = self.records[d.job_id]
        match d:
            case Admit(partition=part, hash_seed=seed):
                rec.state = check_transition(d.job_id, rec.state, JobState.ADMITTED)
                if part is not None:
                    self.memory.reserve(d.job_id, part)
                rec.partition, rec.hash_seed, rec.admitted_s = part, seed, now
            case Queue():
                pass
            case Reject(reason=reason):
                rec.state = check_transition(d.job_id, rec.state, JobState.FAILED)
                rec.finished_s = now
                self.live.pop(d.job_id, None)
                log.warning("job %d rejected: %s", d.job_id, reason)
            case SetPriority(level=level):
                rec.priority = level
            case Reclaim():
                self.memory.release(d.job_id)
                rec.partition, rec.hash_seed = None, None

    def progress_mark(self, rec: JobRecord) -> None:
        """`rec` completed another ``progress_step`` of its iterations: it is making progress,
        so its aging clock (``starved_s``, see `JobView`) starts again from zero."""
        rec.starved_s = 0.0

    def start(self, rec: JobRecord) -> None:
        rec.state = check_transition(rec.spec.job_id, rec.state, JobState.RUNNING)

    def finish(self, now: float, rec: JobRecord) -> None:
        rec.state = check_transition(rec.spec.job_id, rec.state, JobState.FINISHED)
        rec.finished_s = now
        del self.live[rec.spec.job_id]
        self.decide(now, extra=[rec])

    def results(self) -> tuple[JobResult, ...]:
        """Results of finished jobs, by job id."""
        out = []
        for r in sorted(self.records.values(), key=lambda r: r.spec.job_id):
            if r.state != JobState.FINISHED or r.finished_s is None or r.admitted_s is None:
                continue
            out.append(
                JobResult(
                    job_id=r.spec.job_id,
                    arrival_s=r.spec.arrival_s,
                    admitted_s=r.admitted_s,
                    finished_s=r.finished_s,
                    bytes_switch=r.bytes_switch,
                    bytes_ps=r.bytes_ps,
                    preemptions_suffered=r.preemptions_suffered,
                    preemptions_caused=r.preemptions_caused,
                )
            )
        return tuple(out)
