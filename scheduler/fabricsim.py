"""The fabric simulator: whole workloads on a `Fabric`, in virtual time, in the fluid model.

A job of N GPUs arrives, waits until its ceil(N / gpus_per_server) servers are free (`Placer`,
one INA worker per server; a job placed where it cannot run yet gives its servers back), and is
admitted when every switch of its tree (`Fabric.tree_of`) admits it: each switch has its own
`Scheduler` running the switch policy on its own pool and its own `JobTable` (the simulators'
store and `DecisionApplier`), where the job's fan-in is its servers under that ToR, or its
children that lead to them. Wider than the 32 workers one contributor bitmap counts, it is
refused with `too_wide`'s words (the bitmap stays global to the job in the two-level protocol).
The `FabricPolicy` (`scheduler.tiered`) then says where each running job aggregates and may
set one level for it everywhere; the fabric's fluid model (`scheduler.fabricflow`) gives each
its allreduce time, and the loop advances as `scheduler.simulator` does (arrivals, finishes,
progress marks, aging crossings, ``job_setup_s``). On a fabric of one ToR whose servers have
one GPU each, every run is today's single-switch `simulate` (``tests/scheduler/
test_fabricsim``). Each job also gets the analytic times Mina's score compares with.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from scheduler.clock import VirtualClock
from scheduler.config import RunResult, SimConfig, UtilSample
from scheduler.errors import PlacementError
from scheduler.fabric import Fabric
from scheduler.fabricflow import (
    FabricFlow,
    FabricFluid,
    FabricRate,
    exclusive_comm_s,
    fan_in,
    no_ina_comm_s,
)
from scheduler.jobs import JobRecord, JobResult, JobTable
from scheduler.memory import JobState, Pool
from scheduler.placement import Placer
from scheduler.registry import make_fabric_policy
from scheduler.scheduler import Scheduler, too_wide
from scheduler.snapshot import JobView, Queue, Reject
from scheduler.tiered import AggregateAt, FabricJobView, FabricSnapshot, PerSwitch
from scheduler.workload import JobSpec

__all__ = [
    "FabricJob",
    "FabricJobState",
    "FabricRun",
    "FabricState",
    "fabric_result",
    "simulate_fabric",
]

_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class FabricJob:
    """A finished job in the fabric: its `hosts` (servers), racks, the switches its tree has,
    the seconds it aggregated below the top of its tree (`below_top_s`, its PS adding partial
    sums), and the analytic run times from admission with exclusive INA at every switch of
    its tree (`t_ina_s`) and with none (`t_none_s`)."""

    job_id: int
    hosts: int
    racks: tuple[tuple[str, int], ...]
    tree: tuple[str, ...]
    below_top_s: float
    t_ina_s: float
    t_none_s: float


@dataclass(frozen=True, slots=True)
class FabricRun:
    """A fabric run: the `RunResult` (its jobs' times are the run's), each finished job's
    `FabricJob`, and the lines a report states (`fabric`, `placement`)."""

    result: RunResult
    jobs: tuple[FabricJob, ...]
    fabric: str
    placement: str


@dataclass(slots=True)
class FabricJobState:
    """One job's state in a fabric run (its racks, tree, per-switch records and progress);
    ``scheduler.fragfabric`` drives the same state packet by packet."""

    spec: JobSpec
    #: Arrival order (`scheduler.fragfabric` numbers its jobs by it too).
    order: int
    servers: int
    racks: tuple[tuple[str, int], ...] = ()
    tree: tuple[str, ...] = ()
    records: dict[str, JobRecord] = field(default_factory=dict)
    state: JobState = JobState.QUEUED
    iterations_done: float = 0.0
    starved_s: float = 0.0
    admitted_s: float | None = None
    finished_s: float | None = None
    bytes_switch: float = 0.0
    bytes_ps: float = 0.0
    preemptions_suffered: float = 0.0
    preemptions_caused: float = 0.0
    refused: str | None = None
    aggregate: AggregateAt | None = None
    held: float = 0.0
    below_top_s: float = 0.0
    t_ina_s: float = 0.0
    t_none_s: float = 0.0


class FabricState:
    """The per-switch schedulers and tables, the placer, the fabric policy and the jobs."""

    def __init__(self, cfg: SimConfig, fabric: Fabric, policy: str, placement: str) -> None:
        self.cfg, self.fabric = cfg, fabric
        self.fpolicy = make_fabric_policy(policy, cfg.spec)
        spec = replace(cfg.spec, policy=self.fpolicy.switch_policy)
        self.switch_cfg = replace(cfg, spec=spec)
        self.tables = {
            s.name: JobTable(Scheduler(spec, fabric.pool(s.name), seed=cfg.seed), cfg.window)
            for s in fabric.switches
        }
        self.policy = next(iter(self.tables.values())).scheduler.policy
        self.placer = Placer(fabric, placement, seed=cfg.seed)
        self.fluid = FabricFluid(self.switch_cfg, fabric, self.policy)
        self.live: dict[int, FabricJobState] = {}
        self.waiting: list[FabricJobState] = []
        self.done: list[FabricJobState] = []

    def sync(self, switch: str) -> None:
        """Give `switch`'s records their job's progress and starvation, which the loop keeps
        on the job (its priority at each switch is the switch's own)."""
        for rec in self.tables[switch].live.values():
            job = self.live[rec.spec.job_id]
            rec.iterations_done = job.iterations_done
            rec.starved_s = job.starved_s

    def admit(self, now: float) -> list[FabricJobState]:
        """Place and admit the waiting jobs that fit now, in arrival order (later ones past
        an earlier one that waits); refuse those that can never run. The admitted ones."""
        admitted = []
        for job in list(self.waiting):
            why = too_wide(job.servers)
            if why is None and self._try(job, now):
                admitted.append(job)
            elif why is not None or job.refused is not None:
                self._refuse(job, now, job.refused or why or "")
        return admitted

    def _try(self, job: FabricJobState, now: float) -> bool:
        try:
            placement = self.placer.place(job.spec.job_id, job.spec.workers)
        except PlacementError as exc:
            job.refused = str(exc)
            return False
        if placement is None:
            return False
        racks = tuple(placement.servers_by_tor().items())
        tree = self.fabric.tree_of(tor for tor, _ in racks)
        specs = {s: replace(job.spec, workers=fan_in(self.fabric, racks, s)) for s in tree}
        if not self.policy.shared:
            for s in tree:
                verdict = self._dry_run(s, specs[s], now)
                if verdict is not None:
                    self.placer.free(job.spec.job_id)
                    job.refused = verdict or None
                    return False
        job.racks, job.tree = racks, tree
        for s in tree:
            job.records[s] = self.tables[s].add(specs[s])
            self.sync(s)
            self.tables[s].decide(now)
        if any(r.state != JobState.ADMITTED for r in job.records.values()):
            raise AssertionError(f"job {job.spec.job_id}: a switch of its tree did not admit it")
        self.waiting.remove(job)
        job.state, job.admitted_s = JobState.ADMITTED, now
        self._analytic(job)
        return True

    def _dry_run(self, switch: str, spec: JobSpec, now: float) -> str | None:
        """What `switch`'s policy would do with `spec` now (pure): None to admit, "" to
        wait, or the reason it rejects it."""
        table = self.tables[switch]
        view = JobView(spec.job_id, JobState.QUEUED, spec.arrival_s, spec.workers,
                       spec.grad_bytes, spec.iterations, window=table.window,
                       priority_class=spec.priority_class)  # fmt: skip
        views = [r.view() for r in table.live.values()] + [view]
        for d in table.scheduler.decide(table.scheduler.snapshot(now, views)):
            if d.job_id == spec.job_id and isinstance(d, Reject):
                return d.reason
            if d.job_id == spec.job_id and isinstance(d, Queue):
                return ""
        return None

    def _refuse(self, job: FabricJobState, now: float, why: str) -> None:
        self.waiting.remove(job)
        self.live.pop(job.spec.job_id, None)
        job.state, job.refused, job.finished_s = JobState.FAILED, why, now
        self.done.append(job)

    def _analytic(self, job: FabricJobState) -> None:
        s, cfg = job.spec, self.cfg
        compute = s.iter_time_s + cfg.iteration_overhead_s
        ina = exclusive_comm_s(self.switch_cfg, self.fabric, job.racks, s.grad_bytes, compute)
        none = no_ina_comm_s(self.switch_cfg, self.fabric, job.racks, s.grad_bytes)
        job.t_ina_s = cfg.job_setup_s + s.iterations * (compute + ina)
        # Until a switch has counted it: its window for its share of time communicating.
        job.held = self.cfg.window * (ina / (ina + compute) if ina + compute > 0 else 1.0)
        job.t_none_s = cfg.job_setup_s + s.iterations * (compute + none)

    def decide(self, now: float, switches: set[str]) -> None:
        for s in switches:
            self.sync(s)
            self.tables[s].decide(now)

    def finish(self, now: float, job: FabricJobState) -> None:
        for s, rec in job.records.items():
            self.sync(s)
            self.tables[s].finish(now, rec)
        self.placer.free(job.spec.job_id)
        job.state, job.finished_s = JobState.FINISHED, now
        del self.live[job.spec.job_id]
        self.done.append(job)

    def aggregate(self, running: Sequence[FabricJobState]) -> None:
        """Ask the fabric policy where each running job aggregates (a switch policy: each
        on its whole tree, once)."""
        if isinstance(self.fpolicy, PerSwitch):
            for job in running:
                job.aggregate = job.aggregate or AggregateAt(job.spec.job_id, job.tree)
            return
        views = tuple(
            FabricJobView(
                JobView(j.spec.job_id, JobState.RUNNING, j.spec.arrival_s, j.servers,
                        j.spec.grad_bytes, j.spec.iterations, int(j.iterations_done),
                        self.cfg.window, j.spec.priority_class, j.starved_s),
                j.racks, j.tree, j.held,
            )
            for j in running
        )  # fmt: skip
        snapshot = FabricSnapshot(self.fabric, views, self.cfg.window)
        for job, at in zip(running, self.fpolicy.aggregate(snapshot), strict=True):
            job.aggregate = at

    def flow(self, job: FabricJobState) -> FabricFlow:
        at = job.aggregate or AggregateAt(job.spec.job_id, job.tree)
        levels = tuple(
            (s, at.level if at.level is not None else job.records[s].priority) for s in at.switches
        )
        compute = job.spec.iter_time_s + self.cfg.iteration_overhead_s
        return FabricFlow(job.spec.job_id, job.racks, at.switches, at.ps_partials,
                          job.spec.grad_bytes, compute, levels)  # fmt: skip


def simulate_fabric(
    jobs: Sequence[JobSpec],
    cfg: SimConfig,
    fabric: Fabric,
    *,
    policy: str | None = None,
    placement: str = "packed",
) -> FabricRun:
    """Run `jobs` on `fabric` under `policy` (a fabric policy, or a switch policy on every
    switch; default ``cfg.spec.policy``), placed by `placement` (`scheduler.placement`).
    Every switch has the fabric's pool and lanes (`cfg.pool` is not read for them)."""
    # A packet has the fabric's lanes at every switch; each switch's pool is its own.
    cfg = replace(cfg, pool=Pool(cfg.pool.aggregators, fabric.lanes))
    fab = FabricState(cfg, fabric, policy or cfg.spec.policy, placement)
    clock = VirtualClock()
    pending = deque(sorted(jobs, key=lambda j: (j.arrival_s, j.job_id)))
    util: list[UtilSample] = []
    key: tuple[FabricFlow, ...] = ()
    steady = _Steady(fab, [], {})
    setup: dict[int, float] = {}
    events = order = 0
    preempts = fab.policy.preempts
    while pending or fab.live:
        now = clock.now()
        active = [j for j in fab.live.values()
                  if j.state == JobState.RUNNING and j.spec.job_id not in setup]  # fmt: skip
        flows = [fab.flow(j) for j in active]
        if tuple(flows) != key:
            key = tuple(flows)
            steady = _Steady(fab, active, fab.fluid.rates(flows))
        t_outside = pending[0].arrival_s if pending else math.inf
        t_outside = min(t_outside, *setup.values()) if setup else t_outside
        marks = steady.next_marks(active)
        t_next = min(t_outside, now + steady.time_to_event(active, marks))
        if t_next == math.inf:
            break  # nothing runs and nothing arrives: what waits cannot ever be placed
        if t_next <= now < t_outside and not steady.reach_marks_due(active, marks, now):
            t_next = math.nextafter(now, math.inf)
        steady.advance(active, t_next - now, util, now)
        clock.advance_to(t_next)
        events += 1
        changed = False
        # The switches whose own timeline has an event now: those of the jobs due (a mark,
        # a finish, an aging crossing), arriving or ending their set-up. Only they decide, as
        # each would alone (a switch never sees another's events).
        dirty: set[str] = set()
        due = steady.due(active, marks, now, t_next) if preempts else set()
        while pending and pending[0].arrival_s <= t_next + _EPS:
            spec = pending.popleft()
            job = FabricJobState(spec, order, math.ceil(spec.workers / fabric.gpus_per_server))
            order += 1
            fab.live[spec.job_id] = job
            fab.waiting.append(job)
            changed = True
        for job_id, until in list(setup.items()):
            if until <= t_next + _EPS:
                del setup[job_id]
                dirty.update(fab.live[job_id].records)
        # Whether the last round at a switch saw its jobs as they are now (a finish decides
        # at once, as in `scheduler.simulator`).
        fresh: dict[str, bool] = {}
        for job, mark in zip(active, marks, strict=True):
            if job.iterations_done >= job.spec.iterations - _EPS:
                fab.finish(t_next, job)
                fresh.update(dict.fromkeys(job.records, True))
                changed = True
                continue
            if job.iterations_done >= mark - _EPS:
                job.starved_s = 0.0
                fresh.update(dict.fromkeys(job.records, False))
            if job.spec.job_id in due:
                dirty.update(job.records)
        if changed and fab.waiting:
            for job in fab.admit(t_next):
                fresh.update(dict.fromkeys(job.records, True))
        if preempts and dirty:
            fab.decide(t_next, {s for s in dirty if not fresh.get(s, False)})
            changed = True
        running = []
        for job in fab.live.values():
            if job.state == JobState.ADMITTED:
                for s, rec in job.records.items():
                    fab.tables[s].start(t_next, rec)
                job.state = JobState.RUNNING
                if cfg.job_setup_s > 0:
                    setup[job.spec.job_id] = t_next + cfg.job_setup_s
            if job.state == JobState.RUNNING:
                running.append(job)
        if changed:
            fab.aggregate(running)
    return fabric_result(fab, cfg, util, events)


def fabric_result(
    fab: FabricState, cfg: SimConfig, util: list[UtilSample], events: int
) -> FabricRun:
    """The run's outcome from its state: the finished jobs' results, the refused ones."""
    finished = sorted((j for j in fab.done if j.state == JobState.FINISHED),
                      key=lambda j: j.spec.job_id)  # fmt: skip
    results = tuple(
        JobResult(j.spec.job_id, j.spec.arrival_s, j.admitted_s or 0.0, j.finished_s or 0.0,
                  j.bytes_switch, j.bytes_ps, j.preemptions_suffered, j.preemptions_caused)
        for j in finished
    )  # fmt: skip
    refused = tuple(sorted((j.spec.job_id, j.refused) for j in fab.done
                           if j.refused is not None and j.state == JobState.FAILED))  # fmt: skip
    unfinished = len(fab.done) - len(finished) + len(fab.live)
    run = RunResult(cfg, results, tuple(util), events, unfinished, refused)
    infos = tuple(
        FabricJob(j.spec.job_id, j.servers, j.racks, j.tree, j.below_top_s, j.t_ina_s,
                  j.t_none_s)
        for j in finished
    )  # fmt: skip
    return FabricRun(run, infos, fab.fabric.describe(), fab.placer.describe())


class _Steady:
    """What stays fixed while the running jobs, where they aggregate and their levels do
    (as `scheduler.simulator`'s, over the fabric: memory shares of all pools together)."""

    def __init__(
        self, fab: FabricState, active: Sequence[FabricJobState], rates: dict[int, FabricRate]
    ):
        cfg = fab.cfg
        self.rates = [rates[j.spec.job_id] for j in active]
        for j, r in zip(active, self.rates, strict=True):
            j.held = max(x.duty * (x.held + x.held_complete) for x in r.per_switch.values())
        self.below_top = [j.aggregate is not None and j.aggregate.ps_partials > 0 for j in active]
        self.per_iter = [j.spec.iter_time_s + cfg.iteration_overhead_s + r.t_comm_s
                         for j, r in zip(active, self.rates, strict=True)]  # fmt: skip
        self.frags = [math.ceil(j.spec.grad_bytes / cfg.payload_bytes) for j in active]
        self.steps = [max(1, int(cfg.progress_step * j.spec.iterations)) for j in active]
        ages = cfg.spec.aging_s > 0 and fab.policy.preempts
        self.aging_s = cfg.spec.aging_s
        self.starving = [r.duty * r.lost if ages else 0.0 for r in self.rates]
        live = complete = crit = copies = 0.0
        pools = sum(s.aggregators for s in fab.fabric.switches)
        used = {s for r in self.rates for s in r.per_switch}
        for s in used:
            n = fab.fabric.switch(s).aggregators
            sw_live = sw_complete = 0.0
            for r in self.rates:
                rate = r.per_switch.get(s)
                if rate is None:
                    continue
                busy = rate.duty * rate.held
                sw_live += busy
                sw_complete += rate.duty * rate.held_complete + max(0.0, rate.reserved - busy)
                crit += rate.ps_critical
                copies += rate.ps_copies
            share_live, share_complete = min(1.0, sw_live / n), min(1.0, sw_complete / n)
            live += share_live * n
            complete += min(share_complete, 1.0 - share_live) * n
        self.live_s, self.complete_s = live / pools, complete / pools
        capacity = len({cfg.ps_of(j.spec.job_id) for j in active}) / cfg.ps_fragment_s
        self.crit = crit / capacity if capacity else 0.0
        self.copies = copies / capacity if capacity else 0.0

    def next_marks(self, active: Sequence[FabricJobState]) -> list[int]:
        return [
            min(j.spec.iterations, (math.floor(j.iterations_done / step + _EPS) + 1) * step)
            for j, step in zip(active, self.steps, strict=True)
        ]

    def time_to_event(self, active: Sequence[FabricJobState], marks: Sequence[int]) -> float:
        first = math.inf
        for j, per_iter, starving, mark in zip(
            active, self.per_iter, self.starving, marks, strict=True
        ):
            t = max(0.0, mark - j.iterations_done) * per_iter
            if starving > 0:
                level_at = (math.floor(j.starved_s / self.aging_s + _EPS) + 1) * self.aging_s
                t = min(t, (level_at - j.starved_s) / starving)
            first = min(first, max(t, 0.0))
        return first

    def due(
        self, active: Sequence[FabricJobState], marks: Sequence[int], now: float, t_next: float
    ) -> set[int]:
        """The jobs whose own next event (mark, last iteration, aging crossing) is at
        `t_next`, as `time_to_event` counts it."""
        out = set()
        for j, per_iter, starving, mark in zip(
            active, self.per_iter, self.starving, marks, strict=True
        ):
            t = max(0.0, mark - j.iterations_done) * per_iter
            if starving > 0:
                level_at = (math.floor(j.starved_s / self.aging_s + _EPS) + 1) * self.aging_s
                t = min(t, (level_at - j.starved_s) / starving)
            if now + max(t, 0.0) <= t_next:
                out.add(j.spec.job_id)
        return out

    def reach_marks_due(
        self, active: Sequence[FabricJobState], marks: Sequence[int], now: float
    ) -> bool:
        moved = False
        for j, per_iter, mark in zip(active, self.per_iter, marks, strict=True):
            left = max(0.0, mark - j.iterations_done) * per_iter
            if left > 0 and now + left <= now:
                j.iterations_done = mark
                moved = True
        return moved

    def advance(
        self, active: Sequence[FabricJobState], dt: float, util: list[UtilSample], now: float
    ) -> None:
        if dt <= 0:
            return
        for j, rate, per_iter, frags, below in zip(
            active, self.rates, self.per_iter, self.frags, self.below_top, strict=True
        ):
            j.below_top_s += dt if below else 0.0
            iters = min(dt / per_iter, j.spec.iterations - j.iterations_done)
            j.iterations_done += iters
            grad = iters * j.spec.grad_bytes
            j.bytes_switch += grad * (1 - rate.at_ps)
            j.bytes_ps += grad * rate.at_ps
            j.preemptions_suffered += iters * frags * rate.evict
            j.preemptions_caused += dt * rate.caused
            j.starved_s += dt * rate.duty * rate.lost
        idle = 1.0 - self.live_s - self.complete_s
        util.append(
            UtilSample(now, now + dt, self.live_s, self.complete_s, idle, self.crit, self.copies)
        )
