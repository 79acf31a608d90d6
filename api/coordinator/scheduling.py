"""`Coordinator`: the scheduling loop. It asks the policy for decisions and has the
scheduler's one `DecisionApplier` apply them to the job store (`SqlJobStore`) and the switch,
with wall time; the simulators drive the same applier with virtual time.

Every change that can alter decisions (submit, finish, cancel, failure, policy change) calls
`reschedule`; progress marks the state dirty and the next tick reschedules, so a burst of
reports costs one decision round. Decision rounds run one at a time under one lock; requests
that arrive while a round runs are served by the next round together (see `reschedule`). A
round re-reads only the jobs committed since the last one and loads only those it changes
(`api.coordinator.rounds`, with the profile that led there).

Switch job ids (0..1023, the switch's job table) are given at admission and returned when the
switch no longer holds the job (`Releaser`), so an id is unique among jobs that hold switch
state.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict
from datetime import datetime, timedelta
from ipaddress import IPv4Network

from p4ctl.backend import Endpoint, JobInstall, SwitchBackend
from p4ctl.errors import SwitchError
from p4ctl.protocol import MAX_JOBS
from sqlalchemy import select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from api.coordinator.counters import settle_counters, switch_view, track_starvation
from api.coordinator.durations import Durations
from api.coordinator.events import Event, EventBus
from api.coordinator.fabriclink import FabricSwitches, SwitchRead
from api.coordinator.jobstore import SqlJobStore
from api.coordinator.jobviews import QueueReasons, job_public, load_jobs
from api.coordinator.progress import Claim, ProgressCheck
from api.coordinator.pslink import PsLink
from api.coordinator.quotas import UNLIMITED, QuotaDefaults, hold_back, load_limits, within_share
from api.coordinator.releaser import Releaser
from api.coordinator.rounds import ACTIVE, HOLDING, ROUND_COLUMNS, TERMINAL, ActiveJobs, JobWaiters
from api.coordinator.topology import PsRegistry, Topology
from api.schemas import FabricSwitchPublic, JobPublic, SwitchPublic
from api.store.crud import get_state, put_state
from api.store.health import StoreHealth
from api.store.models import Job, WorkerRow, utcnow
from scheduler.applier import DecisionApplier, Placement, switch_rule
from scheduler.errors import MemoryConflict
from scheduler.memory import JobState, Partition, Pool
from scheduler.scheduler import Scheduler
from scheduler.snapshot import Queue
from scheduler.spec import PolicySpec

__all__ = ["ACTIVE", "TERMINAL", "Coordinator"]

log = logging.getLogger(__name__)

POLICY_KEY = "policy"
# When the service last stopped cleanly ({"at": epoch seconds}; {} while it runs).
STOPPED_KEY = "stopped"
SERVICE_STOPPED = "service stopped"
# How long a request waits for the decision round it asked for before answering anyway (with
# the job as it is then, e.g. still queued).
ROUND_WAIT_S = 30.0
ROUND_GAP_S = 0.02
# The pause after a round, in multiples of the round's time, and at most (see
# `Coordinator._decide_loop`).
ROUND_PAUSE = 3.0
ROUND_PAUSE_MAX_S = 0.1
# Rounds read only changed rows; every so often one reads them all, in case the store was
# written some other way than through the service's sessions.
FULL_READ_S = 60.0
# A gap between two reaps (or a step of the wall clock) shorter than this is jitter, not an
# absence of the service (`Coordinator._away_s`).
_AWAY_S = 5.0


class Coordinator:
    """Owns the scheduler and is the only writer to the switch."""

    def __init__(
        self,
        *,
        sessions: sessionmaker[Session],
        backend: SwitchBackend,
        topology: Topology,
        events: EventBus,
        policy: PolicySpec,
        seed: int,
        tick_s: float,
        heartbeat_interval_s: float,
        heartbeat_timeout_s: float,
        ps_registry: PsRegistry | None = None,
        quota: QuotaDefaults = UNLIMITED,
        join_timeout_s: float | None = None,
        verify_progress: bool = True,
        health: StoreHealth | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.sessions = sessions
        self.backend = backend
        self.topology = topology
        self.events = events
        self.pool = Pool(aggregators=backend.aggregators, lanes=backend.lanes)
        self.seed = seed
        self.policy = policy
        self.scheduler = Scheduler(policy, self.pool, seed=seed)
        self.quota = quota
        self.ps_registry = ps_registry
        # Every call to the PS goes through it: its outages are episodes, logged once each.
        self.ps = (
            PsLink(ps_registry, switch=topology.switch_data) if ps_registry is not None else None
        )
        # Store faults: logged once per episode, and heartbeats they kept from the store are
        # not held against the workers (`reap`).
        self.health = health or StoreHealth()
        self._faults_seen = self.health.faults
        self._restarts_told = self.health.episodes  # the episode whose restart was logged
        self._init_clocks(clock, tick_s, heartbeat_interval_s, heartbeat_timeout_s, join_timeout_s)
        self._init_rounds()
        self._init_switch_view()
        # Without a data plane (the in-memory backend) there is nothing to hold reports to.
        self.progress = ProgressCheck(lanes=self.pool.lanes) if verify_progress else None
        self.releaser = Releaser(backend=backend, ps=self.ps, on_released=self._released)
        if isinstance(backend, FabricSwitches) and self.ps is not None:
            ps = self.ps
            backend.on_tree = lambda sid, top, below: ps.route(sid, switch=top, children=below)
        self.applier = DecisionApplier(
            backend=backend,
            pool=self.pool,
            ps=topology.ps,
            release=self.releaser.submit,
            register_ps=self._register_ps if self.ps is not None else None,
            switch_jobs=MAX_JOBS,
        )

    def _init_clocks(
        self,
        clock: Callable[[], float],
        tick_s: float,
        heartbeat_interval_s: float,
        heartbeat_timeout_s: float,
        join_timeout_s: float | None,
    ) -> None:
        """The wall clock, the periods and deadlines measured on it, and the reaper's clock."""
        self.clock = clock
        self.tick_s = tick_s
        self.heartbeat_interval_s = heartbeat_interval_s
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.join_timeout_s = join_timeout_s
        # The join deadline of a job admitted before this start counts from the start: its
        # workers could not join while the service was away.
        self.started_at = utcnow()
        # The reaper's own clock, to notice when it could not watch (tests may replace it).
        self.monotonic: Callable[[], float] = time.monotonic
        self._last_reap: tuple[float, datetime] | None = None  # (monotonic, wall) of it
        # How long decision rounds and ticks (the workers' watch) take, for /metrics.
        self.round_times = Durations()
        self.tick_times = Durations()

    def _init_rounds(self) -> None:
        """The decision rounds' lock, their request counters and the jobs they read."""
        self.lock = threading.RLock()
        self._cv = threading.Condition()
        self._requested = 0
        self._done = 0
        self._dirty = False
        self.active = ActiveJobs(self.sessions)
        self.waiters = JobWaiters()
        self.queue_reasons = QueueReasons()
        self._full_read_at = self.clock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def _init_switch_view(self) -> None:
        """What the last reads of the switch found: counters, drops, occupancy, starvation."""
        # Last counters read, by switch job id (raw: not yet relative to any job's base).
        self.counters: dict[int, dict[str, int]] = {}
        self.drops: dict[str, int] = {}
        self.occupancy_runs: list[tuple[int, int, int, int]] = []
        self.occupancy_unavailable = ""  # why occupancy is unknown (no register access)
        self.counters_unavailable = ""  # why counters are unknown (no counter reads)
        self._settled: dict[int, dict[str, int]] = {}
        # Seconds each job has spent hindered (bypassed, evicted): the priority's aging input.
        # Kept in memory: after a restart every job starts unhindered, which only delays aging.
        self.starved: dict[int, float] = {}

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Load the stored policy, re-sync the switch from the store, start the threads."""
        with self.sessions() as s:
            stored = get_state(s, key=POLICY_KEY)
        if stored:
            self.policy = PolicySpec(**stored)
            self.scheduler = Scheduler(self.policy, self.pool, seed=self.seed)
        self._end_jobs_of_a_long_stop()
        self.read_switch()
        self.started_at = utcnow()
        self.resync()
        self.releaser.start()
        for target, name in ((self._decide_loop, "decide"), (self._tick_loop, "tick")):
            thread = threading.Thread(target=target, name=f"inasched-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self.reschedule()

    def stop(self, *, record: bool = True) -> None:
        """Stop the threads; `record` the clean stop (not when another service leads now)."""
        self._stop.set()
        with self._cv:
            self._cv.notify_all()
        for thread in self._threads:
            thread.join(timeout=10)
        self.releaser.stop()
        self.active.close()
        if not record:
            return
        try:
            with self.sessions() as s:
                put_state(s, key=STOPPED_KEY, value={"at": self.clock()})
                s.commit()
        except SQLAlchemyError as exc:
            # The store is away: the next start finds no clean stop and restarts the
            # heartbeat clocks instead, as after a crash.
            if self.health.fault(exc) is None:
                log.exception("could not record the clean stop")
            else:
                log.warning("could not record the clean stop: the store is away or full")

    def _end_jobs_of_a_long_stop(self) -> None:
        """After a clean stop longer than the heartbeat timeout, the workers of the jobs that
        were running have given up: those jobs end with the reason "service stopped" (not a
        silent worker's). After a shorter stop, or a crash, they keep running."""
        with self.lock, self.sessions() as s:
            stopped = get_state(s, key=STOPPED_KEY) or {}
            put_state(s, key=STOPPED_KEY, value={})
            at = stopped.get("at")
            if not isinstance(at, (int, float)) or self.clock() - at <= self.heartbeat_timeout_s:
                s.commit()
                return
            jobs = s.scalars(select(Job).where(Job.state.in_(HOLDING))).all()
            store = self.store(s, {job.id: job for job in jobs})
            for job in jobs:
                self.applier.transition(
                    store, job.id, JobState.FAILED, now=self.clock(), reason=SERVICE_STOPPED
                )
            s.commit()
        if jobs:
            log.warning(
                "%d jobs ended: %s for longer than the heartbeat timeout",
                len(jobs),
                SERVICE_STOPPED,
            )

    def _tick_loop(self) -> None:
        while not self._stop.wait(self.tick_s):
            started = time.perf_counter()
            try:
                self.tick()
            except Exception as exc:
                # The loop must outlive a bad tick (switch briefly away, database hiccup).
                if self.health.fault(exc) is None:
                    log.exception("scheduling tick failed")
            self.tick_times.record(time.perf_counter() - started)

    def tick(self) -> None:
        """One period: fail silent jobs, re-rank after progress, publish the switch view."""
        failed = self.reap()
        with self._cv:
            dirty, self._dirty = self._dirty, False
        if self.clock() - self._full_read_at > FULL_READ_S:
            self._full_read_at = self.clock()
            self.active.reload()
        # While the PS is away, jobs it did not take wait queued: a retry is a decision round.
        ps_retry = self.ps is not None and self.ps.due()
        if failed or dirty or ps_retry:
            self.reschedule(wait=False)
        self.read_switch()
        self._fail_jobs_of_lost_switches()
        self._settle_active_counters()
        self._check_progress()

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
            started = time.perf_counter()
            try:
                with self.lock:
                    self.decision_round()
            except Exception as exc:
                if self.health.fault(exc) is None:
                    log.exception("decision round failed; retrying on the next tick")
                self.active.reload()
                self.mark_dirty()
            with self._cv:
                self._done = target
                self._cv.notify_all()
            # Part of a round's cost grows with the active jobs, so a pause of ROUND_PAUSE times
            # the round keeps rounds to about a quarter of the process's time under load, at
            # the price of a later decision. Another part grows with the jobs submitted since
            # the last round, so an unbounded pause would feed itself: ROUND_PAUSE_MAX_S caps it.
            took = time.perf_counter() - started
            self.round_times.record(took)
            self._stop.wait(min(max(ROUND_GAP_S, ROUND_PAUSE * took), ROUND_PAUSE_MAX_S))

    @property
    def owners(self) -> Mapping[int, int]:
        """``{switch job id: job id}`` of every job the switch holds state for."""
        return self.applier.ids.owners

    def store(
        self, s: Session, jobs: Mapping[int, Job] | None = None, *, known: bool = False
    ) -> SqlJobStore:
        """The applier's view of session `s` (`jobs`: rows already loaded; `known`: jobs not
        loaded are read from the round's rows until written)."""
        rows = self.active.rows if known else None
        return SqlJobStore(
            s, counters=self.counters, reasons=self.queue_reasons, jobs=jobs, known=rows
        )

    def decision_round(self) -> None:
        """One decision round now: decide on every live job and apply the decisions."""
        now = self.clock()
        active = self.active
        # Nothing is flushed before the commit: a round's reads never need its own writes (a
        # job it changed stays in the session), and on SQLite a flush takes the one write
        # lock, which the submissions' writer would wait for until the round's commit.
        with self.sessions() as s, s.no_autoflush:
            # Plain rows, not ORM objects, re-read only where a commit changed them: a round
            # sees every active job but usually changes a few, and only those are loaded.
            active.refresh(s)
            self.queue_reasons.forget(active.take_unqueued())
            tenant_of = active.tenant_of
            limits = load_limits(s, set(tenant_of.values()), self.quota)
            # Quotas filter what the policy sees and what it admits; the applier applies all.
            held_back = hold_back(active.queued_of, active.holding, limits)
            leave_out = set().union(*(job_ids for _, job_ids in held_back.values()))
            offered = active.ordered_views(self.starved, leave_out=leave_out)
            if self.progress is not None:
                offered = [self.progress.cap(view) for view in offered]
            chosen = self.scheduler.decide(self.scheduler.snapshot(now, offered))
            decisions = [
                *active.quota_waits(held_back),
                *within_share(chosen, offered, tenant_of, limits, self.pool),
            ]
            decisions, to_load = active.to_apply(decisions, self.applier.ids, self.queue_reasons)
            # A wait changes at most a reason; every other decision applied may end a job.
            acted = {d.job_id for d in decisions if not isinstance(d, Queue)} | active.ended
            store = self.store(s, load_jobs(s, to_load), known=True)
            self.applier.apply(store, now, decisions, policy=self.scheduler.policy_name)
            for job_id in sorted(acted):
                # Release is idempotent; a terminal job keeps no switch state even if a
                # policy forgot to reclaim it.
                if store.job(job_id).state.terminal:
                    self.applier.release(store, job_id)
            reasoned = store.write_reasons(ROUND_COLUMNS)
            s.commit()
        active.reasons_written(reasoned)
        self.publish_jobs(store.changed.values())
        self.publish_reasons(row.id for row in reasoned)

    def _register_ps(self, install: JobInstall, window: int) -> None:
        """Have the PS serve a job being admitted; raises `PsUnavailable` (it stays queued)."""
        assert self.ps is not None
        policy = install.policy.name.lower()
        self.ps.register(install.job_id, install.fan_in, window=window, policy=policy)

    def _released(self, sid: int) -> None:
        with self.lock:
            self.applier.released(sid)
        # A job queued for want of a switch job id can have this one: decide now.
        self.reschedule(wait=False)

    # ------------------------------------------------------------------ restart

    def resync(self) -> None:
        """Make the switch hold exactly the jobs the store says hold switch state."""
        with self.lock, self.sessions() as s:
            holders = s.scalars(select(Job).where(Job.switch_job_id.is_not(None))).all()
            store = self.store(s, {job.id: job for job in holders})
            now = utcnow()
            failed: list[Job] = []
            for job in holders:
                assert job.switch_job_id is not None
                live = not JobState(job.state).terminal
                try:
                    # An ended job keeps its id until the first decision round reclaims it.
                    self.applier.adopt(job.id, self.placement_of(job), live=live)
                    if live:
                        self._restore(job)
                except (SwitchError, ValueError, MemoryConflict) as exc:
                    # E.g. a static partition stored by an older version that the switch
                    # cannot index (not a power of two). The job fails visibly, and the first
                    # decision round reclaims whatever the switch holds for it.
                    reason = f"could not be restored onto the switch after a restart: {exc}"
                    self.applier.transition(
                        store, job.id, JobState.FAILED, now=self.clock(), reason=reason
                    )
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

    def placement_of(self, job: Job) -> Placement:
        """Where the stored `job` lives in the switch (it holds a switch job id)."""
        assert job.switch_job_id is not None and job.policy is not None
        part = None
        if job.part_base is not None and job.part_slots is not None:
            part = Partition(job.part_base, job.part_slots)
        return Placement(
            job.switch_job_id,
            job.policy,
            switch_rule(job.policy),
            part,
            job.hash_seed,
            job.shared_pool,
        )

    def install_of(self, job: Job) -> JobInstall:
        """The switch configuration of an admitted `job`."""
        placement = self.placement_of(job)
        return self.applier.install_of(placement, fan_in=job.n_workers, priority=job.priority_level)

    def _restore(self, job: Job) -> None:
        """Register `job` with its PS again (owed while the PS is away: the job keeps running),
        and install it, its priority and its workers' addresses again."""
        assert job.switch_job_id is not None
        install = self.install_of(job)
        if self.ps is not None:
            # Owed and made again while the PS is away: the job keeps its place.
            policy = install.policy.name.lower()
            self.ps.restore(install.job_id, install.fan_in, window=job.window, policy=policy)
        self.backend.install_job(install)
        self.backend.set_priority(job.switch_job_id, job.priority_level)
        for w in job.workers:
            self.backend.add_worker(job.switch_job_id, w.worker_id, Endpoint(w.host, w.port))

    # ------------------------------------------------------------------ liveness, counters

    def reap(self) -> bool:
        """Fail every admitted or running job with a worker silent for longer than the
        heartbeat timeout, and every admitted job whose workers have not all joined within the
        join timeout; True if any. After store faults (`StoreHealth.faults` moved since the
        last reap) it fails none: heartbeats may have gone unrecorded, so every clock restarts
        instead, as after a stall of the service."""
        with self.lock:
            away = self._away_s()
            faults = self.health.faults
            if away or faults != self._faults_seen:
                self._restart_liveness_clocks(away, store=faults != self._faults_seen)
                self._faults_seen = faults
                return False
        failed = self._reap_unjoined()
        cutoff = utcnow() - timedelta(seconds=self.heartbeat_timeout_s)
        with self.lock, self.sessions() as s:
            rows = s.scalars(
                select(WorkerRow)
                .join(Job)
                .where(Job.state.in_(HOLDING), WorkerRow.last_heartbeat < cutoff)
            ).all()
            store = self.store(s)
            for row in rows:
                job = row.job
                if not JobState(job.state).holds_memory:
                    continue  # another of its workers failed it already
                silent = f"{self.heartbeat_timeout_s:g} s"
                reason = f"worker {row.worker_id} sent no heartbeat for {silent}"
                self.applier.transition(
                    store, job.id, JobState.FAILED, now=self.clock(), reason=reason
                )
                log.warning("job %d failed: %s", job.id, reason)
            s.commit()
        self.publish_jobs(store.changed.values())
        return bool(store.changed) or failed

    def _away_s(self) -> float:
        """Seconds since the last reap that the service cannot vouch for, or 0.

        Heartbeats are stamped with the wall clock, and a worker is silent when its stamp is
        older than the timeout. Two things break that without any worker falling silent: the
        service (or the whole machine: a paused virtual machine) stopped for a while, so
        heartbeats waited unread; or the wall clock stepped (a clock sync), so every stamp
        looks old at once. Either counts when it exceeds half the heartbeat timeout and
        `_AWAY_S`, which ordinary scheduling jitter on a loaded machine stays under.
        """
        now = (self.monotonic(), utcnow())
        last, self._last_reap = self._last_reap, now
        if last is None:
            return 0.0
        stalled = now[0] - last[0]
        stepped = abs((now[1] - last[1]).total_seconds() - stalled)
        away = max(stalled, stepped)
        return away if away > max(self.heartbeat_timeout_s / 2, _AWAY_S) else 0.0

    def _restart_liveness_clocks(self, away: float, *, store: bool = False) -> None:
        """After `away` seconds the service could not watch (`_away_s`), or a `store` fault
        that may have lost heartbeats, every worker of a job holding memory gets a fresh
        heartbeat timeout, and admitted jobs a fresh join deadline, as after a restart: the
        service or its store was away, not the workers."""
        now = utcnow()
        holding = select(Job.id).where(Job.state.in_(HOLDING))
        with self.lock, self.sessions() as s:
            s.execute(
                update(WorkerRow).where(WorkerRow.job_id.in_(holding)).values(last_heartbeat=now)
            )
            s.commit()
        self.started_at = now
        if store:
            if self._restarts_told == self.health.episodes:
                return
            self._restarts_told = self.health.episodes
            log.warning(
                "the job store failed since the last check, so heartbeats may be unrecorded: "
                "heartbeat timeouts and join deadlines restart now"
            )
            return
        log.warning(
            "the service could not watch the workers for %.0f s (it or its machine stalled, "
            "or the wall clock stepped): heartbeat timeouts and join deadlines restart now",
            away,
        )

    def _reap_unjoined(self) -> bool:
        """Fail admitted jobs still short of workers at the join deadline: an admitted job
        holds a switch job id and memory whether or not its workers ever come."""
        if self.join_timeout_s is None:
            return False
        cutoff = utcnow() - timedelta(seconds=self.join_timeout_s)
        if self.started_at >= cutoff:
            return False
        with self.lock, self.sessions() as s:
            late = s.scalars(
                select(Job).where(Job.state == JobState.ADMITTED, Job.admitted_at < cutoff)
            ).all()
            store = self.store(s, {job.id: job for job in late})
            for job in late:
                reason = (
                    f"{len(job.workers)} of its {job.n_workers} workers joined within "
                    f"{self.join_timeout_s:g} s (join_timeout_s)"
                )
                self.applier.transition(
                    store, job.id, JobState.FAILED, now=self.clock(), reason=reason
                )
                log.warning("job %d failed: %s", job.id, reason)
            s.commit()
        self.publish_jobs(store.changed.values())
        return bool(late)

    def _read_counters(self) -> dict[int, dict[str, int]]:
        counters = self.backend.counters()
        self.counters = {sid: dict(c) for sid, c in counters.jobs.items()}
        self.drops = dict(counters.drops)
        self.counters_unavailable = counters.unavailable
        return self.counters

    def read_switch(self, *, publish: bool = True) -> SwitchPublic:
        """Read occupancy and counters; returns the `/switch` view (and publishes it)."""
        # No coordinator lock: the backend serialises its own calls, and decisions must not
        # wait for a read that can take seconds on a remote switch.
        occupancy = self.backend.occupancy()
        self._read_counters()
        owners = dict(self.owners)
        self.occupancy_runs = occupancy.runs()
        self.occupancy_unavailable = occupancy.unavailable
        view = self.switch_public(owners)
        if publish:
            self.events.publish(Event("switch", view.model_dump(mode="json")))
        return view

    def switch_public(self, owners: Mapping[int, int] | None = None) -> SwitchPublic:
        """The `/switch` view from the last read (job ids are the service's); on a fabric,
        with every switch's own in `switches`."""
        owners = dict(self.owners) if owners is None else owners
        view = switch_view(
            self.pool,
            self.occupancy_runs,
            self.counters,
            self.drops,
            owners,
            self.occupancy_unavailable,
            self.counters_unavailable,
        )
        if isinstance(self.backend, FabricSwitches):
            view.switches = [
                _fabric_switch(read, self.backend, owners) for read in self.backend.reads()
            ]
        return view

    def fabric_data(self) -> list[Endpoint]:
        """The data addresses of a fabric's switches (none on a single switch)."""
        if isinstance(self.backend, FabricSwitches):
            return list(self.backend.data.values())
        return []

    def fabric_networks(self) -> list[IPv4Network]:
        """The worker networks of a fabric's racks: the topology says workers sit there."""
        if not isinstance(self.backend, FabricSwitches):
            return []
        racks = [t.rack for t in self.backend.fabric.tors if t.rack is not None]
        return [IPv4Network(net) for rack in racks for net in rack.networks]

    def data_address_of(self, host: str) -> Endpoint:
        """Where a worker at IPv4 `host` sends its gradients: on a fabric its ToR's data
        address (`NotUnderATor` if the topology puts it under none), else the switch's."""
        if isinstance(self.backend, FabricSwitches):
            return self.backend.tor_of(host)[1]
        return self.topology.switch_data

    def _fail_jobs_of_lost_switches(self) -> None:
        """On a fabric, fail every job holding memory whose tree (or, before all its workers
        joined, whose workers' ToRs) holds a lost switch; releasing it frees its memory on
        every other switch (`FabricSwitches.remove_job`)."""
        if not isinstance(self.backend, FabricSwitches):
            return
        lost = self.backend.lost()
        hit = self.backend.touching(lost) if lost else {}
        owners = dict(self.owners)
        doomed = {owners[sid]: name for sid, name in hit.items() if sid in owners}
        if not doomed:
            return
        with self.lock, self.sessions() as s:
            jobs = load_jobs(s, set(doomed))
            store = self.store(s, jobs)
            for job in jobs.values():
                if not JobState(job.state).holds_memory:
                    continue  # failed already, its release under way
                name = doomed[job.id]
                reason = (
                    f"switch {name} of its tree went away ({lost[name]}); its memory on the "
                    "other switches is freed"
                )
                self.applier.transition(
                    store, job.id, JobState.FAILED, now=self.clock(), reason=reason
                )
                log.warning("job %d failed: %s", job.id, reason)
            s.commit()
        self.publish_jobs(store.changed.values())
        self.reschedule(wait=False)

    def switch_payload(self) -> dict[str, object]:
        """The `/switch` view from the last read, as the event stream's JSON."""
        return self.switch_public().model_dump(mode="json")

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

    def _check_progress(self) -> None:
        """Hold the progress workers report to the counters just read (`ProgressCheck`); a job
        whose counted work passed its declaration is marked so on its row and re-ranked by a
        decision round asked for now."""
        if self.progress is None:
            return
        if self.counters_unavailable:
            # Nothing counted is not the same as nothing known: a claim is not held to counters
            # the switch cannot give (the client logged why, once; /switch says it).
            self.progress.forget()
            return
        with self.sessions() as s:
            rows = s.execute(
                select(
                    Job.id,
                    Job.switch_job_id,
                    Job.iterations_done,
                    Job.n_workers,
                    Job.gradient_bytes,
                    Job.counter_base,
                    Job.iterations,
                    Job.overran_declaration,
                ).where(Job.state.in_(HOLDING), Job.switch_job_id.is_not(None))
            ).all()
        claims = [Claim(r[0], r[1], r[2], r[3], r[4], r[5] or {}, r[6], r[7]) for r in rows]
        seen = self.progress.observe(claims, self.counters)
        if seen.overran:
            with self.lock, self.sessions() as s:
                jobs = load_jobs(s, {o.job_id for o in seen.overran})
                for job in jobs.values():
                    job.overran_declaration = True
                s.commit()
            self.publish_jobs(jobs.values())
            self.reschedule(wait=False)
        elif seen.changed:
            self.mark_dirty()

    def publish_reasons(self, job_ids: Iterable[int]) -> None:
        """Publish jobs whose queue reason a round wrote without loading them
        (`SqlJobStore.write_reasons`); they are loaded only while somebody follows the stream."""
        job_ids = set(job_ids)
        if not job_ids:
            return
        if not self.events.subscribers:
            self.waiters.wake(job_ids)
            return
        with self.sessions() as s:
            self.publish_jobs(load_jobs(s, job_ids).values())

    def publish_jobs(self, jobs: Iterable[Job]) -> None:
        """Publish each of `jobs` on the event stream and wake the requests waiting on it."""
        jobs = list(jobs)
        self.waiters.wake(job.id for job in jobs)
        if not self.events.subscribers:
            return  # nobody follows the stream: no payloads to build
        for job in jobs:
            data = job_public(job, self.queue_reasons, JobPublic).model_dump(mode="json")
            self.events.publish(Event("job", data, tenant_id=job.tenant_id, key=job.id))

    # ------------------------------------------------------------------ policy

    def set_policy(self, spec: PolicySpec) -> None:
        """Use `spec` for every job admitted from now on; stored across restarts."""
        scheduler = Scheduler(spec, self.pool, seed=self.seed)
        with self.lock, self.sessions() as s:
            put_state(s, key=POLICY_KEY, value=asdict(spec))
            s.commit()
            self.policy, self.scheduler = spec, scheduler
        self.reschedule()


def _fabric_switch(
    read: SwitchRead, fabric: FabricSwitches, owners: Mapping[int, int]
) -> FabricSwitchPublic:
    """One switch of `fabric` as `/switch` lists it, from its last read."""
    backend = fabric.switches[read.name]
    one = switch_view(
        Pool(aggregators=backend.aggregators, lanes=backend.lanes),
        read.occupancy.runs(),
        {sid: dict(c) for sid, c in read.counters.jobs.items()},
        dict(read.counters.drops),
        owners,
        read.occupancy.unavailable,
        read.counters.unavailable,
    )
    return FabricSwitchPublic(
        name=read.name,
        data=f"{read.data.host}:{read.data.port}",
        lost=read.lost,
        **one.model_dump(exclude={"switches"}),
    )
