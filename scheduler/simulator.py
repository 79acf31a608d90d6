"""The aggregate discrete-event simulator: whole workloads in virtual time, in seconds.

Events are arrivals, finishes, progress marks (every ``progress_step`` of a job's iterations,
where priorities are recomputed) and aging crossings of jobs below the top level (one at the
top has no level to gain). Between two events the set of jobs holding memory and their
priorities are fixed, so each job advances at the steady rate the fluid model
(`scheduler.fluid`) gives for that set: one iteration per ``iter_time_s + iteration_overhead_s +
t_comm``. An admitted job first spends ``job_setup_s`` holding its admission without sending
(its end is an event too). Admission and priorities come from the same `Scheduler` the service
uses, driven by a `VirtualClock`. ``scheduler.fragsim`` is the packet-level reference.

    >>> from scheduler.workload import load_workload
    >>> run = simulate(load_workload("synthetic-50"), SimConfig(PolicySpec("atp")))
    >>> len(run.jobs)
    50
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Sequence

from scheduler.clock import VirtualClock
from scheduler.config import RunResult, SimConfig, UtilSample
from scheduler.fluid import CommRate, FlowJob, comm_rates
from scheduler.jobs import JobRecord, JobTable
from scheduler.memory import JobState
from scheduler.policy import Policy
from scheduler.scheduler import Scheduler
from scheduler.workload import JobSpec

__all__ = ["simulate"]

log = logging.getLogger(__name__)

_EPS = 1e-9


def simulate(jobs: Sequence[JobSpec], cfg: SimConfig) -> RunResult:
    """Run `jobs` under `cfg`; every job is simulated until it finishes or is rejected."""
    sched = Scheduler(cfg.spec, cfg.pool, seed=cfg.seed)
    table = JobTable(sched, cfg.window)
    clock = VirtualClock()
    pending = deque(sorted(jobs, key=lambda j: (j.arrival_s, j.job_id)))
    util: list[UtilSample] = []
    rates: dict[int, CommRate] = {}
    key: tuple[tuple[int, int], ...] = ()
    steady = _Steady(cfg, sched.policy, [], rates)
    events = 0
    # Admitted jobs still in their set-up (SimConfig.job_setup_s): job id -> when it ends.
    setup: dict[int, float] = {}
    while pending or table.active():
        now = clock.now()
        active = [r for r in table.active() if r.spec.job_id not in setup]
        new_key = tuple((r.spec.job_id, r.priority) for r in active)
        if new_key != key:
            key = new_key
            flows = [_flow(cfg, r) for r in active]
            rates = comm_rates(cfg, sched.policy, flows, start=rates)
            steady = _Steady(cfg, sched.policy, active, rates)
        t_outside = pending[0].arrival_s if pending else math.inf
        t_outside = min(t_outside, *setup.values()) if setup else t_outside
        t_next = t_outside
        marks = steady.next_marks(active)
        t_next = min(t_outside, now + steady.time_to_event(active, marks))
        # A job's next event closer than the clock can resolve at `now`: no time can pass
        # before it, so it happens now (or the loop would stand still for ever).
        if t_next <= now < t_outside and not _reach_marks_due(active, steady, marks, now):
            t_next = math.nextafter(now, math.inf)
        _advance(active, steady, t_next - now, util, now)
        clock.advance_to(t_next)
        events += 1
        changed = False
        while pending and pending[0].arrival_s <= t_next + _EPS:
            table.add(pending.popleft())
            changed = True
        for job_id, until in list(setup.items()):
            if until <= t_next + _EPS:
                del setup[job_id]
        # Whether the last decision round saw the jobs as they are now (a finish decides at
        # once): another at the same instant would decide the same, so it is skipped.
        fresh = False
        for rec, mark in zip(active, marks, strict=True):
            if rec.iterations_done >= rec.spec.iterations - _EPS:
                table.finish(t_next, rec)
                fresh = True
                continue
            if rec.iterations_done >= mark - _EPS:
                table.progress_mark(rec)
                fresh = False
            changed = changed or _reranks(sched.policy)
        if changed and not _decided(fresh):
            table.decide(t_next)
        for rec in table.active():
            if rec.state == JobState.ADMITTED:
                table.start(t_next, rec)
                if cfg.job_setup_s > 0:
                    setup[rec.spec.job_id] = t_next + cfg.job_setup_s
    unfinished = sum(1 for r in table.records.values() if r.state != JobState.FINISHED)
    return RunResult(cfg, table.results(), tuple(util), events, unfinished, table.refused())


def _decided(fresh: bool) -> bool:
    """Whether the round a finish just ran stands for this event's: no job changed since
    (`tests/scheduler/test_simulators` runs the round anyway and gets the same run)."""
    return fresh


def _reranks(policy: Policy) -> bool:
    """Whether a progress mark or an aging crossing needs a decision round: they re-rank the
    jobs, which only a preempting switch reads (see `_Steady`). Under the other
    policies a rank matters only when memory frees or a job arrives, and both decide anyway;
    skipping the round changes no result (`tests/scheduler/test_simulators`)."""
    return policy.preempts


def _flow(cfg: SimConfig, rec: JobRecord) -> FlowJob:
    """`rec` as the fluid model sees it: the iteration overhead is time it does not send."""
    s = rec.spec
    compute = s.iter_time_s + cfg.iteration_overhead_s
    return FlowJob(s.job_id, s.workers, s.grad_bytes, compute, rec.priority)


class _Steady:
    """What stays fixed while the jobs holding memory and their priorities do: each active
    job's rate, seconds per iteration, fragments, progress step and aging speed, in the order
    of the active list, and the memory and PS utilisation those rates give (a `UtilSample`'s
    shares)."""

    __slots__ = (
        "aging_s",
        "complete_s",
        "copies",
        "crit",
        "frags",
        "live_s",
        "per_iter",
        "rates",
        "starving",
        "steps",
    )

    def __init__(
        self,
        cfg: SimConfig,
        policy: Policy,
        active: Sequence[JobRecord],
        rates: dict[int, CommRate],
    ) -> None:
        self.rates = [rates[rec.spec.job_id] for rec in active]
        self.per_iter = [
            rec.spec.iter_time_s + cfg.iteration_overhead_s + rate.t_comm_s
            for rec, rate in zip(active, self.rates, strict=True)
        ]
        self.frags = [math.ceil(rec.spec.grad_bytes / cfg.payload_bytes) for rec in active]
        # Iterations between progress marks, whole ones as fragsim counts them.
        self.steps = [max(1, int(cfg.progress_step * rec.spec.iterations)) for rec in active]
        # Starved seconds gained per second (bypassed or evicted while sending). Only a
        # preempting switch reads priority levels, so only there is aging an event: 0 elsewhere.
        # A job already at the top level has no level to gain: its crossings are no event.
        ages = cfg.spec.aging_s > 0 and policy.preempts
        top = cfg.spec.levels - 1
        self.aging_s = cfg.spec.aging_s
        self.starving = [
            r.duty * (r.bypass + r.evict) if ages and rec.priority < top else 0.0
            for rec, r in zip(active, self.rates, strict=True)
        ]
        live = complete = crit = copies = 0.0
        for rate in self.rates:
            busy = rate.duty * rate.held
            live += busy
            complete += rate.duty * rate.held_complete + max(0.0, rate.reserved - busy)
            crit += rate.ps_critical
            copies += rate.ps_copies
        n = cfg.pool.aggregators
        self.live_s, complete_s = min(1.0, live / n), min(1.0, complete / n)
        self.complete_s = min(complete_s, 1.0 - self.live_s)
        # PS load as a share of the capacity of the processes serving the active jobs.
        capacity = len({cfg.ps_of(r.spec.job_id) for r in active}) / cfg.ps_fragment_s
        self.crit = crit / capacity if capacity else 0.0
        self.copies = copies / capacity if capacity else 0.0

    def next_marks(self, active: Sequence[JobRecord]) -> list[int]:
        """Iterations done at each job's next progress mark (or its last iteration)."""
        return [
            min(rec.spec.iterations, (math.floor(rec.iterations_done / step + _EPS) + 1) * step)
            for rec, step in zip(active, self.steps, strict=True)
        ]

    def time_to_event(self, active: Sequence[JobRecord], marks: Sequence[int]) -> float:
        """Time until the first job finishes, passes its next progress mark or ages one
        level (inf with no job)."""
        first = math.inf
        aging_s = self.aging_s
        for rec, per_iter, starving, mark in zip(
            active, self.per_iter, self.starving, marks, strict=True
        ):
            t = max(0.0, mark - rec.iterations_done) * per_iter
            if starving > 0:
                level_at = (math.floor(rec.starved_s / aging_s + _EPS) + 1) * aging_s
                t = min(t, (level_at - rec.starved_s) / starving)
            first = min(first, max(t, 0.0))
        return first


def _reach_marks_due(
    active: Sequence[JobRecord], steady: _Steady, marks: Sequence[int], now: float
) -> bool:
    """Move each job whose next mark (or last iteration) is less than the clock's resolution
    at `now` away onto it, as if that sliver of an iteration had been run; whether any was.

    The iterations a job has done are a float sum: 1e5 iterations in, one iteration's last
    1e-9 can take less time than the smallest step of a clock past 4e6 s (about 1e-9 s)."""
    moved = False
    for rec, per_iter, mark in zip(active, steady.per_iter, marks, strict=True):
        left = max(0.0, mark - rec.iterations_done) * per_iter
        if left > 0 and now + left <= now:
            rec.iterations_done = mark
            moved = True
    return moved


def _advance(
    active: Sequence[JobRecord], steady: _Steady, dt: float, util: list[UtilSample], now: float
) -> None:
    if dt <= 0:
        return
    for rec, rate, per_iter, frags in zip(
        active, steady.rates, steady.per_iter, steady.frags, strict=True
    ):
        iters = min(dt / per_iter, rec.spec.iterations - rec.iterations_done)
        rec.iterations_done += iters
        lost = rate.bypass + rate.evict
        grad = iters * rec.spec.grad_bytes
        rec.bytes_switch += grad * (1 - lost)
        rec.bytes_ps += grad * lost
        rec.preemptions_suffered += iters * frags * rate.evict
        rec.preemptions_caused += dt * rate.caused
        rec.starved_s += dt * rate.duty * lost
    live_s, complete_s = steady.live_s, steady.complete_s
    util.append(
        UtilSample(
            now, now + dt, live_s, complete_s, 1.0 - live_s - complete_s, steady.crit, steady.copies
        )
    )
