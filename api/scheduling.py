"""`Coordinator`: the scheduling loop. It asks the policy for decisions and applies them to
the job store and the switch.

Every change that can alter decisions (submit, finish, cancel, failure, policy change) calls
`reschedule`; progress marks the state dirty and the next tick reschedules, so a burst of
reports costs one decision round. Decision rounds run one at a time under one lock; requests
that arrive while a round runs are served by the next round together (see `reschedule`).

Switch job ids (0..1023, the switch's job table) are given at admission and returned when the
job's memory is reclaimed, so an id is unique among jobs that hold switch state.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from p4ctl.backend import Endpoint, JobInstall, SwitchBackend
from p4ctl.errors import SwitchError
from p4ctl.protocol import MAX_JOBS, Policy
from sqlalchemy import or_, select
from sqlalchemy.orm import Session, sessionmaker

from api.counters import settle_counters, switch_view, track_starvation
from api.events import Event, EventBus
from api.jobviews import VIEW_COLUMNS, ViewCache, load_jobs
from api.models import Job, PriorityChange, utcnow
from api.releaser import Releaser
from api.schemas import JobPublic
from api.store import get_state, put_state
from api.topology import PolicyConfig, PsRegistry, Topology
from scheduler.memory import Partition, Pool
from scheduler.snapshot import Admit, Decision, Queue, Reclaim, Reject, SetPriority

__all__ = ["ACTIVE", "TERMINAL", "Coordinator"]

log = logging.getLogger(__name__)

ACTIVE = ("queued", "admitted", "running")
TERMINAL = ("finished", "failed", "cancelled")
POLICY_KEY = "policy"
# How long a request waits for the decision round it asked for before answering anyway (with
# the job as it is then, e.g. still queued).
ROUND_WAIT_S = 30.0
ROUND_GAP_S = 0.02


class Coordinator:
    """Owns the scheduler and is the only writer to the switch."""

    def __init__(
        self,
        *,
        sessions: sessionmaker[Session],
        backend: SwitchBackend,
        topology: Topology,
        events: EventBus,
        policy: PolicyConfig,
        seed: int,
        tick_s: float,
        heartbeat_interval_s: float,
        heartbeat_timeout_s: float,
        ps_registry: PsRegistry | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.sessions = sessions
        self.backend = backend
        self.topology = topology
        self.events = events
        self.pool = Pool(aggregators=backend.aggregators, lanes=backend.lanes)
        self.seed = seed
        self.tick_s = tick_s
        self.heartbeat_interval_s = heartbeat_interval_s
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.clock = clock
        self.ps_registry = ps_registry
        self.lock = threading.RLock()
        self.policy = policy
        self.scheduler = policy.build(self.pool, seed)
        self._cv = threading.Condition()
        self._requested = 0
        self._done = 0
        self._dirty = False
        self._next_sid = 0
        # Last counters read, by switch job id (raw: not yet relative to any job's base).
        self.counters: dict[int, dict[str, int]] = {}
        self.drops: dict[str, int] = {}
        self.occupancy_runs: list[tuple[int, int, int, int]] = []
        self.owners: dict[int, int] = {}  # switch job id -> service job id
        self._settled: dict[int, dict[str, int]] = {}
        # Seconds each job has spent hindered (bypassed, evicted): the priority's aging input.
        # Kept in memory: after a restart every job starts unhindered, which only delays aging.
        self.starved: dict[int, float] = {}
        self._views = ViewCache()
        self.releaser = Releaser(
            backend=backend, ps_registry=ps_registry, on_released=self._released
        )
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Load the stored policy, re-sync the switch from the store, start the threads."""
        with self.sessions() as s:
            stored = get_state(s, key=POLICY_KEY)
        if stored:
            self.policy = PolicyConfig(**stored)
            self.scheduler = self.policy.build(self.pool, self.seed)
        self.read_switch()
        self.resync()
        self.releaser.start()
        for target, name in ((self._decide_loop, "decide"), (self._tick_loop, "tick")):
            thread = threading.Thread(target=target, name=f"inasched-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self.reschedule()

    def stop(self) -> None:
        self._stop.set()
        with self._cv:
            self._cv.notify_all()
        for thread in self._threads:
            thread.join(timeout=10)
        self.releaser.stop()

    def _tick_loop(self) -> None:
        while not self._stop.wait(self.tick_s):
            try:
                self.tick()
            except Exception:
                # The loop must outlive a bad tick (switch briefly away, database hiccup).
                log.exception("scheduling tick failed")

    def tick(self) -> None:
        """One period: fail silent jobs, re-rank after progress, publish the switch view."""
        failed = self.reap()
        with self._cv:
            dirty, self._dirty = self._dirty, False
        if failed or dirty:
            self.reschedule(wait=False)
        self.read_switch()
        self._settle_active_counters()

    def mark_dirty(self) -> None:
        with self._cv:
            self._dirty = True

    # ------------------------------------------------------------------ decisions

    def reschedule(self, *, wait: bool = True) -> None:
        """Ask for a decision round that sees every change committed before this call, and
        (with `wait`) return once it has run.

        Rounds run one at a time on the decide thread; every request that arrives while one
        runs is served by the next, so a burst of submissions costs a few rounds, not one each.
        """
        with self._cv:
            self._requested += 1
            mine = self._requested
            self._cv.notify_all()
            if wait:
                self._cv.wait_for(
                    lambda: self._done >= mine or self._stop.is_set(), timeout=ROUND_WAIT_S
                )

    def _decide_loop(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._requested > self._done or self._stop.is_set())
                if self._stop.is_set():
                    return
                # Everything requested so far was committed before its request: one round
                # covers it all.
                target = self._requested
            try:
                with self.lock:
                    self._round()
            except Exception:
                log.exception("decision round failed; retrying on the next tick")
                self.mark_dirty()
            with self._cv:
                self._done = target
                self._cv.notify_all()
            # A short pause lets a burst of requests gather behind the next round: a round
            # costs time in proportion to the active jobs, whatever the number it admits.
            self._stop.wait(ROUND_GAP_S)

    def _round(self) -> None:
        now = self.clock()
        changed: list[Job] = []
        with self.sessions() as s:
            # Plain rows, not ORM objects: a round sees every active job, but usually
            # changes only a few, and only those are loaded as objects below.
            rows = s.execute(
                select(*VIEW_COLUMNS)
                .where(or_(Job.state.in_(ACTIVE), Job.switch_job_id.is_not(None)))
                .order_by(Job.id)
            ).all()
            views = self._views.views(rows, self.starved)  # type: ignore[arg-type]
            decisions = self.scheduler.decide(self.scheduler.snapshot(now, views))
            touched = {d.job_id for d in decisions}
            touched |= {r.id for r in rows if r.state in TERMINAL and r.switch_job_id is not None}
            by_id = load_jobs(s, touched)
            for decision in decisions:
                job = by_id[decision.job_id]
                if self._apply(s, job, decision, now):
                    changed.append(job)
            for job in by_id.values():
                # Release is idempotent; a terminal job keeps no switch state even if a
                # policy forgot to reclaim it.
                if job.state in TERMINAL and job.switch_job_id is not None:
                    self._release(job)
                    changed.append(job)
            s.commit()
        self.publish_jobs(changed)

    def _apply(self, s: Session, job: Job, decision: Decision, now: float) -> bool:
        """Apply one decision; True when `job` changed in a way clients should see."""
        match decision:
            case Admit(partition=part, hash_seed=seed):
                return self._admit(job, part, seed)
            case Queue(reason=reason):
                if job.reason == reason:
                    return False
                job.reason = reason
                return True
            case Reject(reason=reason):
                job.state, job.reason, job.finished_at = "failed", reason, utcnow()
                return True
            case SetPriority(level=level):
                if job.switch_job_id is not None:
                    self.backend.set_priority(job.switch_job_id, level)
                job.priority_level = level
                s.add(PriorityChange(job_id=job.id, t=now, level=level))
                return True
            case Reclaim():
                if job.switch_job_id is not None:
                    self._release(job)
                return True
        return False

    def _admit(self, job: Job, part: Partition | None, seed: int | None) -> bool:
        sid = self._free_switch_id()
        if sid is None:
            job.reason = f"all {MAX_JOBS} switch job ids are in use"
            return True
        job.switch_job_id = sid
        job.policy = self.scheduler.policy_name
        job.part_base, job.part_slots = (part.base, part.slots) if part else (None, None)
        job.hash_seed = seed
        job.counter_base = dict(self.counters.get(sid, {}))
        try:
            self._install(job)
        except SwitchError as exc:
            log.warning("job %d stays queued: %s", job.id, exc)
            job.switch_job_id = None
            job.reason = f"switch refused the job: {exc}"
            return True
        self.owners[sid] = job.id
        job.state, job.reason, job.admitted_at = "admitted", None, utcnow()
        return True

    def _free_switch_id(self) -> int | None:
        # Round-robin, so an id is reused as late as possible: stray packets of a removed
        # job then meet an empty table entry rather than the next job.
        jobs = int(MAX_JOBS)
        for k in range(jobs):
            sid = (self._next_sid + k) % jobs
            if sid not in self.owners:
                self._next_sid = (sid + 1) % jobs
                return sid
        return None

    def _install(self, job: Job) -> None:
        assert job.switch_job_id is not None
        self.backend.install_job(self.install_of(job))
        if self.ps_registry is not None:
            sw = self.topology.switch_data
            self.ps_registry.register_job(
                job.switch_job_id,
                job.n_workers,
                switch=(sw.host, sw.port),
                window=job.window,
                policy=job.policy,
            )

    def install_of(self, job: Job) -> JobInstall:
        """The switch configuration of an admitted `job`."""
        assert job.switch_job_id is not None and job.policy is not None
        return JobInstall(
            job.switch_job_id,
            Policy.parse(job.policy),
            job.n_workers,
            part_base=job.part_base or 0,
            part_size=job.part_slots or 0,
            ps=self.topology.ps,
            priority=job.priority_level,
        )

    def _release(self, job: Job) -> None:
        """Settle the job's counters and hand its switch state to the releaser."""
        sid = job.switch_job_id
        assert sid is not None
        # The last periodic read: a fresh one can take seconds over P4Runtime, and the job's
        # traffic has ended by the time it is released.
        settle_counters(job, self.counters.get(sid, {}))
        job.switch_job_id = None
        self.releaser.submit(sid)

    def _released(self, sid: int) -> None:
        with self.lock:
            self.owners.pop(sid, None)

    # ------------------------------------------------------------------ restart

    def resync(self) -> None:
        """Make the switch hold exactly the jobs the store says hold switch state."""
        with self.lock, self.sessions() as s:
            holders = s.scalars(select(Job).where(Job.switch_job_id.is_not(None))).all()
            now = utcnow()
            failed: list[Job] = []
            for job in holders:
                assert job.switch_job_id is not None
                self.owners[job.switch_job_id] = job.id
                if job.state in TERMINAL:
                    continue  # the first decision round reclaims it
                try:
                    self._restore(job)
                except (SwitchError, ValueError) as exc:
                    # E.g. a static partition stored by an older version that the switch
                    # cannot index (not a power of two). The job fails visibly, and the first
                    # decision round reclaims whatever the switch holds for it.
                    job.state, job.finished_at = "failed", now
                    job.reason = f"could not be restored onto the switch after a restart: {exc}"
                    failed.append(job)
                    log.error("job %d failed: %s", job.id, job.reason)
                    continue
                for w in job.workers:
                    # The service was away, not the worker: restart the heartbeat clock.
                    w.last_heartbeat = now
            stale = self.backend.installed_jobs() - set(self.owners)
            for sid in sorted(stale):
                log.info("removing stale switch job %d", sid)
                self.backend.reclaim(sid)
                self.backend.remove_job(sid)
            s.commit()
        self.publish_jobs(failed)
        if holders:
            log.info("re-synced %d jobs onto the switch", len(holders))

    def _restore(self, job: Job) -> None:
        """Install `job`, its priority and its workers' addresses again."""
        assert job.switch_job_id is not None
        self._install(job)
        self.backend.set_priority(job.switch_job_id, job.priority_level)
        for w in job.workers:
            self.backend.add_worker(job.switch_job_id, w.worker_id, Endpoint(w.host, w.port))

    # ------------------------------------------------------------------ liveness, counters

    def reap(self) -> bool:
        """Fail every job with a worker silent for longer than the heartbeat timeout."""
        from api.rendezvous import fail_silent_jobs

        return fail_silent_jobs(self)

    def _read_counters(self) -> dict[int, dict[str, int]]:
        counters = self.backend.counters()
        self.counters = {sid: dict(c) for sid, c in counters.jobs.items()}
        self.drops = dict(counters.drops)
        return self.counters

    def read_switch(self, *, publish: bool = True) -> dict[str, Any]:
        """Read occupancy and counters; returns the `/switch` payload (and publishes it)."""
        # No coordinator lock: the backend serialises its own calls, and decisions must not
        # wait for a read that can take seconds on a remote switch.
        occupancy = self.backend.occupancy()
        self._read_counters()
        owners = dict(self.owners)
        self.occupancy_runs = occupancy.runs()
        view = self.switch_payload(owners)
        if publish:
            self.events.publish(Event("switch", view))
        return view

    def switch_payload(self, owners: dict[int, int] | None = None) -> dict[str, Any]:
        """The `/switch` JSON from the last read (job ids are the service's)."""
        return switch_view(
            self.pool,
            self.occupancy_runs,
            self.counters,
            self.drops,
            dict(self.owners) if owners is None else owners,
        )

    def _settle_active_counters(self) -> None:
        """Copy counters that moved since the last tick onto their jobs' rows."""
        track_starvation(
            self.starved, self.counters, self._settled, self.owners, elapsed_s=self.tick_s
        )
        counters, owners = self.counters, dict(self.owners)
        moved = {
            owners[sid]
            for sid, values in counters.items()
            if sid in owners and self._settled.get(sid) != values
        }
        self._settled = counters
        if not moved:
            return
        changed: list[Job] = []
        with self.lock, self.sessions() as s:
            for job in load_jobs(s, moved).values():
                sid = job.switch_job_id
                if sid is not None and settle_counters(job, counters.get(sid, {})):
                    changed.append(job)
            s.commit()
        self.publish_jobs(changed)

    def publish_jobs(self, jobs: Iterable[Job]) -> None:
        for job in jobs:
            data = JobPublic.model_validate(job).model_dump(mode="json")
            self.events.publish(Event("job", data, tenant_id=job.tenant_id))

    # ------------------------------------------------------------------ policy

    def set_policy(self, config: PolicyConfig) -> None:
        """Use `config` for every job admitted from now on; stored across restarts."""
        scheduler = config.build(self.pool, self.seed)
        with self.lock, self.sessions() as s:
            put_state(s, key=POLICY_KEY, value=config.as_dict())
            s.commit()
            self.policy, self.scheduler = config, scheduler
        self.reschedule()
