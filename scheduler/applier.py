"""`DecisionApplier`: the one place a policy's decisions change jobs and the switch.

As SimPy lets one model run on a virtual or a wall clock, one applier serves every driver: the
REST service applies with wall time, its SQL store and the P4Runtime backend; both simulators
with virtual time, their in-memory `JobTable` and an `InMemorySwitch`. It depends on two small
interfaces, a `JobStore` and `p4ctl.backend.SwitchBackend`, and keeps the invariants for all of
them: every change of state goes through `check_transition`, every partition through
`MemoryMap.reserve`, every shared pool through `MemoryMap.reserve_shared`.

``Admit`` takes a switch job id, reserves the memory, registers the job with its PS and
installs it; when every id is taken, or the PS or the switch refuses, what was taken is given
back and the job stays queued with the reason: no job is admitted without its PS. ``Queue``
updates a waiting job's reason; ``Reject`` fails the job; ``SetPriority`` MODIFYs the job's
``job_table`` entry; ``Reclaim`` releases the job's memory and switch job id (idempotent).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from p4ctl.backend import Endpoint, JobInstall, SwitchBackend
from p4ctl.errors import SwitchError
from p4ctl.protocol import MAX_JOBS
from p4ctl.protocol import Policy as SwitchPolicy

from scheduler.errors import MemoryConflict, PsUnavailable
from scheduler.memory import JobState, MemoryMap, Partition, Pool, check_transition
from scheduler.registry import policy_class
from scheduler.scheduler import Scheduler
from scheduler.snapshot import Admit, Decision, JobView, Queue, Reclaim, Reject, SetPriority

__all__ = [
    "DecisionApplier",
    "JobStore",
    "NoSwitchJobId",
    "Placement",
    "PsRefused",
    "StoredJob",
    "SwitchIds",
    "SwitchRefused",
    "Waiting",
    "release_now",
    "switch_rule",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StoredJob:
    """What the applier reads of a job: its state, fan-in, window, current priority level and
    the switch job id it holds (None when it holds no switch state)."""

    job_id: int
    state: JobState
    fan_in: int
    window: int
    priority: int
    switch_job_id: int | None


@dataclass(frozen=True, slots=True)
class Placement:
    """Where an admitted job lives in the switch: its switch job id, the policy it was
    admitted under and the switch `rule` its packets follow (`switch_rule`, resolved once at
    admission), and its `partition` (static) or `hash_seed` and `shared_pool` (atp/esa)."""

    switch_job_id: int
    policy: str
    rule: SwitchPolicy
    partition: Partition | None
    hash_seed: int | None
    shared_pool: int | None


def switch_rule(policy: str) -> SwitchPolicy:
    """The switch rule the packets of a job admitted under `policy` follow
    (`Policy.switch_rule`)."""
    return SwitchPolicy.parse(policy_class(policy).switch_rule())


@dataclass(frozen=True, slots=True)
class NoSwitchJobId:
    """An admitted job waits: all `max_jobs` entries of the switch's job table are taken."""

    max_jobs: int

    @property
    def reason(self) -> str:
        return f"all {self.max_jobs:,} switch job ids in use"


@dataclass(frozen=True, slots=True)
class SwitchRefused:
    """An admitted job waits: the switch refused its configuration."""

    error: Exception

    @property
    def reason(self) -> str:
        return f"switch refused the job: {self.error}"


@dataclass(frozen=True, slots=True)
class PsRefused:
    """An admitted job waits: its parameter server did not take it (`PsUnavailable`)."""

    error: Exception

    @property
    def reason(self) -> str:
        return f"its PS did not take the job: {self.error}"


#: Why a queued job still waits: the policy's `Queue`, or admission that the switch or the PS
#: stopped.
Waiting = Queue | NoSwitchJobId | SwitchRefused | PsRefused


class JobStore(Protocol):
    """The job records an applier changes: the service's database, a simulator's table.

    The applier checks every transition before it calls `set_state`; a store only records.
    """

    def job(self, job_id: int) -> StoredJob: ...

    def set_state(self, job_id: int, state: JobState, *, now: float, reason: str | None) -> None:
        """Record `state` (admitted, failed, ...) reached at `now`, with `reason` for the user."""

    def set_reason(self, job_id: int, why: Waiting) -> bool:
        """Record why a queued job waits; True when the reason changed."""

    def place(self, job_id: int, placement: Placement | None) -> None:
        """Record the job's placement, or (None) that it holds no switch state any more."""

    def set_priority(self, job_id: int, level: int, *, now: float) -> None:
        """Record the level now in the job's ``job_table`` entry on the switch."""


class SwitchIds:
    """Switch job ids (the switch's job table, 0 .. MAX_JOBS - 1) and the job holding each.

    Handed out round-robin, so an id is reused as late as possible: stray packets of a removed
    job then meet an empty table entry rather than the next job.
    """

    def __init__(self, size: int = MAX_JOBS) -> None:
        self.size = size
        self.owners: dict[int, int] = {}  # switch job id -> job id
        self._next = 0

    def take(self, job_id: int) -> int | None:
        """A free id, now held by `job_id`; None when all are taken."""
        if len(self.owners) >= self.size:
            return None  # a backlog of queued jobs asks every round: answer without a scan
        for k in range(self.size):
            sid = (self._next + k) % self.size
            if sid not in self.owners:
                self._next = (sid + 1) % self.size
                self.owners[sid] = job_id
                return sid
        return None

    def hold(self, sid: int, job_id: int) -> None:
        """Mark `sid` as held by `job_id` (a job restored after a restart)."""
        self.owners[sid] = job_id

    def free(self, sid: int) -> None:
        """`sid` may be handed out again (idempotent)."""
        self.owners.pop(sid, None)


def release_now(backend: SwitchBackend, sid: int) -> None:
    """Remove switch job `sid` at once, which frees its aggregators too (the simulators'
    release; the service's `Releaser` does the same on its own thread)."""
    backend.remove_job(sid)


class DecisionApplier:
    """Applies decisions to a `JobStore` and a `SwitchBackend`, with the invariant checks.

    `release(sid)` removes a released job from the switch: `release_now` by default; the
    service hands it to a background thread (a P4Runtime read of the registers takes seconds)
    and calls `released` once the switch no longer holds it, so the id stays taken until then.
    `register_ps(install, window)` runs before each install (the service tells its PS); it
    raises `PsUnavailable` when the PS does not take the job, which then stays queued.
    `switch_jobs` is the size of the switch's job table.
    """

    def __init__(
        self,
        *,
        backend: SwitchBackend,
        pool: Pool,
        ps: Endpoint,
        release: Callable[[int], None] | None = None,
        register_ps: Callable[[JobInstall, int], None] | None = None,
        switch_jobs: int = MAX_JOBS,
    ) -> None:
        self.backend = backend
        self.pool = pool
        self.ps = ps
        self.memory = MemoryMap(pool)
        self.ids = SwitchIds(switch_jobs)
        self._release = release or self._release_now
        self._register_ps = register_ps

    def _release_now(self, sid: int) -> None:
        release_now(self.backend, sid)
        self.released(sid)

    # ------------------------------------------------------------------ rounds

    def decide(
        self, store: JobStore, scheduler: Scheduler, now: float, views: Iterable[JobView]
    ) -> tuple[Decision, ...]:
        """Ask `scheduler` about `views` (every live job, plus ended ones holding memory) at
        `now`, apply its decisions in order, and release ended jobs a policy left holding
        switch state. Returns the decisions."""
        views = tuple(views)
        decisions = scheduler.decide(scheduler.snapshot(now, views))
        self.apply(store, now, decisions, policy=scheduler.policy_name)
        for view in views:
            if view.state.terminal:
                self.release(store, view.job_id)
        return decisions

    def apply(
        self, store: JobStore, now: float, decisions: Iterable[Decision], *, policy: str
    ) -> list[int]:
        """Apply `decisions` in order (jobs admitted are installed under `policy`); returns
        the ids of jobs whose record changed."""
        return [d.job_id for d in decisions if self.apply_one(store, now, d, policy=policy)]

    def apply_one(self, store: JobStore, now: float, d: Decision, *, policy: str) -> bool:
        """Apply one decision; True when the job's record changed."""
        match d:
            case Admit():
                return self._admit(store, now, d, policy)
            case Queue():
                return store.set_reason(d.job_id, d)
            case Reject(reason=reason):
                self._transition(store, d.job_id, JobState.FAILED, now=now, reason=reason)
                log.warning("job %d rejected: %s", d.job_id, reason)
                return True
            case SetPriority(level=level):
                sid = store.job(d.job_id).switch_job_id
                if sid is not None:
                    self.backend.set_priority(sid, level)
                store.set_priority(d.job_id, level, now=now)
                return True
            case Reclaim():
                return self.release(store, d.job_id)
        return False

    def _transition(
        self, store: JobStore, job_id: int, new: JobState, *, now: float, reason: str | None
    ) -> None:
        state = check_transition(job_id, store.job(job_id).state, new)
        store.set_state(job_id, state, now=now, reason=reason)

    def transition(
        self, store: JobStore, job_id: int, new: JobState, *, now: float, reason: str | None = None
    ) -> None:
        """Move a job to `new` (a worker joined, the job finished, its tenant cancelled it,
        a worker went silent); raises `IllegalTransition`. An ended job's memory is released
        by the next decision round's `Reclaim`."""
        self._transition(store, job_id, new, now=now, reason=reason)

    # ------------------------------------------------------------------ admission

    def _admit(self, store: JobStore, now: float, d: Admit, policy: str) -> bool:
        job = store.job(d.job_id)
        check_transition(d.job_id, job.state, JobState.ADMITTED)
        shared = None
        if d.partition is not None:
            self.memory.reserve(d.job_id, d.partition)
        elif d.hash_seed is not None:
            shared = d.shared_pool or self.pool.aggregators
            self.memory.reserve_shared(d.job_id, shared)
        sid = self.ids.take(d.job_id)
        if sid is None:
            self.memory.release(d.job_id)
            return store.set_reason(d.job_id, NoSwitchJobId(self.ids.size))
        placement = Placement(sid, policy, switch_rule(policy), d.partition, d.hash_seed, shared)
        install = self.install_of(placement, fan_in=job.fan_in, priority=job.priority)
        # The PS first: a job the switch holds sends fragments to it from the first packet. A
        # PS registration left behind by a refusal of the switch is replaced at the id's next
        # admission.
        why: Waiting | None = None
        try:
            if self._register_ps is not None:
                self._register_ps(install, job.window)
            self.backend.install_job(install)
        except PsUnavailable as exc:
            why = PsRefused(exc)  # logged once per outage, by the caller's hook
        except (SwitchError, ValueError) as exc:
            log.warning("job %d stays queued: %s", d.job_id, exc)
            why = SwitchRefused(exc)
        if why is not None:
            self.memory.release(d.job_id)
            self.ids.free(sid)
            return store.set_reason(d.job_id, why)
        store.place(d.job_id, placement)
        self._transition(store, d.job_id, JobState.ADMITTED, now=now, reason=None)
        return True

    def install_of(self, placement: Placement, *, fan_in: int, priority: int) -> JobInstall:
        """The switch configuration of a job placed at `placement`."""
        part = placement.partition
        return JobInstall(
            placement.switch_job_id,
            placement.rule,
            fan_in,
            part_base=part.base if part else 0,
            part_size=part.slots if part else 0,
            ps=self.ps,
            priority=priority,
        )

    # ------------------------------------------------------------------ release, restart

    def release(self, store: JobStore, job_id: int) -> bool:
        """Free the job's memory and hand its switch job id to `release`; True when it held
        any (idempotent)."""
        self.memory.release(job_id)
        sid = store.job(job_id).switch_job_id
        if sid is None:
            return False
        store.place(job_id, None)
        self._release(sid)
        return True

    def released(self, sid: int) -> None:
        """The switch no longer holds `sid`: it may be handed out again."""
        self.ids.free(sid)

    def adopt(self, job_id: int, placement: Placement, *, live: bool) -> None:
        """Take over a job that holds `placement` after a restart: its switch job id stays
        taken, and (when `live`) its memory is reserved again; raises `MemoryConflict`."""
        self.ids.hold(placement.switch_job_id, job_id)
        if not live:
            return
        if placement.partition is not None:
            self.memory.reserve(job_id, placement.partition)
        elif placement.hash_seed is not None:
            size = placement.shared_pool or self.pool.aggregators
            try:
                self.memory.reserve_shared(job_id, size)
            except MemoryConflict:
                self.memory.release(job_id)
                raise
