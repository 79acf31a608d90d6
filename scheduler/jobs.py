"""`JobTable`: the mutable job records both simulators keep, and the results they report.

It is the simulators' `JobStore`: it turns records into a `Snapshot`, has the one
`DecisionApplier` apply a policy's decisions to it and to an `InMemorySwitch` (checking every
lifecycle transition and every memory reservation), and accumulates per-job metrics. The REST
service keeps the same information in its database and uses the same applier.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from p4ctl.backend import Endpoint, InMemorySwitch, SwitchBackend

from scheduler.applier import DecisionApplier, Placement, StoredJob, Waiting
from scheduler.memory import JobState, MemoryMap, Partition
from scheduler.scheduler import Scheduler
from scheduler.snapshot import Decision, JobView
from scheduler.workload import JobSpec

__all__ = ["JobRecord", "JobResult", "JobTable"]


_HOLDING = (JobState.ADMITTED, JobState.RUNNING)
# Where the simulated switch sends a job's PS traffic: the simulators route it themselves.
SIMULATED_PS = Endpoint("127.0.0.1", 9)


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
    shared_pool: int | None = None
    switch_job_id: int | None = None
    admitted_s: float | None = None
    finished_s: float | None = None
    bytes_switch: float = 0.0
    bytes_ps: float = 0.0
    preemptions_suffered: float = 0.0
    preemptions_caused: float = 0.0
    decisions: list[Decision] = field(default_factory=list)
    refused: str | None = None  # why the policy rejected the job (`Reject`)

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
            shared_pool=self.shared_pool,
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
    """Job records keyed by id: the simulators' `JobStore`, with the applier that drives it.

    `switch` is the simulated switch (an `InMemorySwitch` running `p4ctl.rule` by default).
    """

    def __init__(
        self, scheduler: Scheduler, window: int, switch: SwitchBackend | None = None
    ) -> None:
        self.scheduler = scheduler
        self.window = window
        self.records: dict[int, JobRecord] = {}
        # Jobs not yet terminal: what every snapshot holds, kept apart so that a long run's
        # finished jobs cost nothing per event.
        self.live: dict[int, JobRecord] = {}
        pool = scheduler.pool
        self.switch = switch or InMemorySwitch(pool.aggregators, 0, rule=True)
        self.applier = DecisionApplier(backend=self.switch, pool=pool, ps=SIMULATED_PS)

    @property
    def memory(self) -> MemoryMap:
        return self.applier.memory

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
        return self.applier.decide(self, self.scheduler, now, views)

    # ------------------------------------------------------------------ JobStore

    def job(self, job_id: int) -> StoredJob:
        rec = self.records[job_id]
        return StoredJob(
            job_id, rec.state, rec.spec.workers, rec.window, rec.priority, rec.switch_job_id
        )

    def set_state(self, job_id: int, state: JobState, *, now: float, reason: str | None) -> None:
        rec = self.records[job_id]
        rec.state = state
        if state == JobState.ADMITTED:
            rec.admitted_s = now
        if state.terminal:
            rec.finished_s = now
            self.live.pop(job_id, None)
        if state == JobState.FAILED:
            rec.refused = reason or "failed"

    def set_reason(self, job_id: int, why: Waiting) -> bool:
        return False  # a simulation reports no reasons

    def place(self, job_id: int, placement: Placement | None) -> None:
        rec = self.records[job_id]
        if placement is None:
            rec.switch_job_id = rec.partition = rec.hash_seed = rec.shared_pool = None
            return
        rec.switch_job_id = placement.switch_job_id
        rec.partition, rec.hash_seed = placement.partition, placement.hash_seed
        rec.shared_pool = placement.shared_pool

    def set_priority(self, job_id: int, level: int, *, now: float) -> None:
        self.records[job_id].priority = level

    # ------------------------------------------------------------------ lifecycle

    def progress_mark(self, rec: JobRecord) -> None:
        """`rec` completed another ``progress_step`` of its iterations: it is making progress,
        so its aging clock (``starved_s``, see `JobView`) starts again from zero."""
        rec.starved_s = 0.0

    def start(self, now: float, rec: JobRecord) -> None:
        self.applier.transition(self, rec.spec.job_id, JobState.RUNNING, now=now)

    def finish(self, now: float, rec: JobRecord) -> None:
        self.applier.transition(self, rec.spec.job_id, JobState.FINISHED, now=now)
        self.decide(now, extra=[rec])

    def refused(self) -> tuple[tuple[int, str], ...]:
        """``(job_id, reason)`` of each job the policy rejected, by job id."""
        return tuple(
            (job_id, rec.refused)
            for job_id, rec in sorted(self.records.items())
            if rec.refused is not None
        )

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
