"""The aggregate (fluid) model of allreduce under contention: closed form, no packets.

For the set of jobs holding switch memory it returns each job's mean allreduce time per
iteration, the shares of its fragments that bypass or are evicted, and the load it puts on its
PS process. A worker streams its fragments limited by its link and its window; a fragment's
slot is held for a switch round trip plus, when its result comes from the PS, the PS detour
and queueing. Jobs communicate with probability equal to their duty cycle; hashed placement is
uniform, so a fragment collides with the others' share of the pool; the aggregators a job
holds are its claims per second over the whole allreduce times the hold (Little's law). A PS
process is one server, critical packets before esa's completion copies (Cobham's M/G/1
priority delay, `scheduler.psdelay`); with `SimConfig.switch_pps` the switch is one processor
shared by every packet in and out. ``docs/scheduler.md`` states each assumption;
`scheduler.validate` measures the model against `scheduler.fragsim`, which makes none of them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from scheduler.config import REORDER, SimConfig
from scheduler.memory import COPIES_PER_SLOT, partition_slots
from scheduler.policy import Policy
from scheduler.psdelay import PsLoad, Vec, solve_wait, sum_by

__all__ = ["CommRate", "FlowJob", "comm_rates"]

_ROUNDS = 40
# Rounds of a solve that resumes an earlier one's iteration that had not settled
# (`CommRate.resume`): near the knee where a job's window starts to bind, its eviction share is
# steep in its PS wait and the iteration takes hundreds of rounds to settle, so a solve stops
# short and the next one, at the next change of the contenders, carries on from there.
_RESUMED_ROUNDS = 12
_TOL = 1e-4
# A share that oscillates has its step halved down to this: near PS saturation the map's slope
# is steep enough that a share still crosses its fixed point at a step of 1/64.
_MIN_STEP = 1 / 4096


@dataclass(frozen=True, slots=True)
class FlowJob:
    """A job holding memory, as the fluid model needs it."""

    job_id: int
    workers: int
    grad_bytes: int
    iter_time_s: float
    priority: int = 0


@dataclass(frozen=True, slots=True)
class CommRate:
    """One job's steady state: allreduce seconds per iteration and fragment shares.

    `bypass` + `evict` is the share of fragments finished at the PS; `caused` is evictions
    this job causes per second of its run; `held` is aggregators it holds while communicating
    (partial sums, and under atp complete sums waiting for the PS, in `held_complete`);
    `reserved` is aggregators it owns for its whole run (a static partition). `ps_wait_s` is
    the queueing delay of its critical packets at its PS; `ps_critical` and `ps_copies` are
    the packets per second it sends its PS on average over its run (duty-weighted).
    `resume` is where the fixed-point iteration left this job (`comm_rates`' `start`).
    """

    t_comm_s: float
    bypass: float
    evict: float
    caused: float
    duty: float
    held: float
    held_complete: float
    reserved: float = 0.0
    ps_wait_s: float = 0.0
    ps_critical: float = 0.0
    ps_copies: float = 0.0
    resume: _JobIterate | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class _JobIterate:
    """One job's part of the iteration's state beyond its `CommRate` (see `_Iterate`): its
    split share, open-queue wait, rescue rate, caps, and the damping of its shares and cap;
    and whether the solve it comes from settled."""

    settled: bool
    split: float
    open_wait: float
    rescue: float
    switch_cap: float
    ps_cap: float
    bypass_step: float
    evict_step: float
    bypass_pull: float
    evict_pull: float
    ps_cap_step: float
    ps_cap_pull: float


def _last_start(cfg: SimConfig, n: Vec) -> Vec:
    """When a job's last worker starts an iteration's allreduce, on average: each starts
    ``U(0, worker_skew_s)`` after its compute ends, and a result waits for all of them."""
    return cfg.worker_skew_s * n / (n + 1)


def _stream_time(frags: Vec, rate: Vec, slot: Vec, fs: float, win: int) -> Vec:
    """Seconds from a worker's first fragment to its last result: `frags` fragments at `rate`,
    each back one `slot` after it was sent.

    The first window goes out at line rate; only the fragments after it wait for results.
    When the window binds (``rate = win / slot``) that is ``(F - W) / rate + W x fs + slot``,
    one slot less than ``F / rate + slot``, which counted a window's worth of round trips
    twice; and a last window that is only partly full still waits its whole slot. When the
    link binds, or the switch (`_switch_cap`) does, neither applies; both fade out
    continuously between the two, which keeps the fixed point smooth.
    """
    unit = np.maximum(0.0, 2 * slot / win - 1 / rate - fs)
    # Past the first window, fragments go out a window per slot, so a last window that is
    # only partly full still waits a whole slot: the rounds are ceil(F / W).
    rounds = np.ceil(frags / win - 1e-9)
    short = np.where(frags > win, rounds * win - frags, 0.0)
    out: Vec = frags / rate + slot - (np.minimum(frags, win) - short) * unit
    return out


def _static(cfg: SimConfig, jobs: Sequence[FlowJob]) -> dict[int, CommRate]:
    step = max(cfg.fragment_s, cfg.rtt_s / cfg.window)
    reserved = COPIES_PER_SLOT * partition_slots(cfg.window)
    n = np.array([j.workers for j in jobs], dtype=np.float64)
    frags = np.array([math.ceil(j.grad_bytes / cfg.payload_bytes) for j in jobs], np.float64)
    compute = np.array([j.iter_time_s for j in jobs], dtype=np.float64)
    last = _last_start(cfg, n)
    per_frag = 2 * n  # n contributions in, n results out (module doc)
    cap = np.full(len(jobs), np.inf)
    for _ in range(_ROUNDS if cfg.switch_pps > 0 else 1):
        rate = np.minimum(1 / step, cap)
        t = _stream_time(frags, rate, np.full(len(jobs), cfg.rtt_s), cfg.fragment_s, cfg.window)
        t = t + last
        duty = t / (t + compute)
        if cfg.switch_pps <= 0:
            break
        new_cap = _switch_cap(cfg.switch_pps, duty, per_frag / step, rate * per_frag, per_frag)
        settled = np.allclose(new_cap, cap, rtol=_TOL, atol=0.0)
        cap = np.where(np.isinf(cap), new_cap, 0.5 * (cap + new_cap))
        if settled:
            break
    # The window's slots are live while streaming; the partition (both copies of its slots, a
    # power of two) is reserved for the job's whole run.
    return {
        j.job_id: CommRate(t_j, 0.0, 0.0, 0.0, duty_j, cfg.window, 0.0, reserved)
        for j, t_j, duty_j in zip(jobs, t.tolist(), duty.tolist(), strict=True)
    }


def _switch_cap(pps: float, duty: Vec, demand: Vec, packets: Vec, per_frag: Vec) -> Vec:
    """Per-worker fragments per second each job gets from a switch of `pps` packets/s.

    `demand`: each job's packet rate into the switch were the switch not limiting; `packets`:
    its packet rate at its current share; `per_frag`: its packets per worker fragment. While
    job j communicates, each other job i is communicating too with probability ``duty[i]``
    (independently), so the number k of others is Poisson-binomial. With k others at their
    mean active rate ``r``, j gets what they leave, and at least the fair share ``pps/(k+1)``
    (processor sharing), and no more than it asks for; its rate is the average over k.
    """
    count = len(duty)
    if count == 0:
        return np.zeros(0)
    # Row j: job j's view, which leaves j itself out. dist[j, k]: P(k others communicating),
    # built up one job i at a time (each row skips i == j).
    odds = np.where(np.eye(count, dtype=bool), 0.0, duty[None, :])
    dist = np.zeros((count, count))
    dist[:, 0] = 1.0
    for i in range(count):
        p = odds[:, i : i + 1]
        dist[:, 1:] = dist[:, 1:] * (1 - p) + dist[:, :-1] * p
        dist[:, 0] *= 1 - p[:, 0]
    busy = odds.sum(axis=1)
    load = (odds * packets[None, :]).sum(axis=1)
    mean = np.divide(load, busy, out=np.zeros(count), where=busy > 0)
    k = np.arange(count)[None, :]
    left = np.maximum(pps - k * mean[:, None], pps / (k + 1))
    share: Vec = np.sum(dist * np.minimum(demand[:, None], left), axis=1)
    return share / per_frag


def _rates(wait: Vec, ps_share: Vec, slot_base: Vec, w: int, fragment_s: float, cap: Vec) -> Vec:
    """Fragments per second of each worker whose PS-bound fragments wait `wait` at the PS.

    A job's window binds whether or not its fragments visit the PS (`ps_share`); its link, or
    its share of the switch (`cap`, see `_switch_cap`), may bind first."""
    windowed = w / (slot_base + ps_share * wait)
    return np.minimum(np.minimum(1 / fragment_s, windowed), cap)


@dataclass(frozen=True, slots=True)
class _Contenders:
    """The jobs holding shared memory, as arrays in job order, and their PS processes."""

    ids: list[int]
    workers: Vec
    frags: Vec
    iter_s: Vec
    #: First to last worker's start: how far a fragment's contributions spread.
    skew: Vec
    #: When the last worker starts (`_last_start`).
    last: Vec
    #: Each job's PS process, numbered 0 .. servers-1 in order of first use.
    server: npt.NDArray[np.intp]
    servers: int
    #: A process per job, numbered in job order.
    own: bool
    jobs_per_server: Vec
    #: Priority level (all 0 where the policy does not preempt).
    level: npt.NDArray[np.intp]
    #: Length of the per-level sums: the highest level + 2 (`_above` reads one level past it).
    top: int
    #: Whether any job's first window reaches into its last ``REORDER + 1`` fragments
    #: (`_stranded`; with gradients of many windows none does).
    strandable: bool

    @property
    def count(self) -> int:
        return len(self.ids)


def _contenders(cfg: SimConfig, jobs: Sequence[FlowJob], preempt: bool) -> _Contenders:
    ids = [j.job_id for j in jobs]
    n = np.array([j.workers for j in jobs], dtype=np.float64)
    servers: dict[int, int] = {}
    server = np.array([servers.setdefault(cfg.ps_of(i), len(servers)) for i in ids], dtype=np.intp)
    level = np.array([j.priority if preempt else 0 for j in jobs], dtype=np.intp)
    frags = np.array([math.ceil(j.grad_bytes / cfg.payload_bytes) for j in jobs], np.float64)
    return _Contenders(
        ids=ids,
        workers=n,
        frags=frags,
        iter_s=np.array([j.iter_time_s for j in jobs], dtype=np.float64),
        skew=cfg.worker_skew_s * (n - 1) / (n + 1),
        last=_last_start(cfg, n),
        server=server,
        servers=len(servers),
        own=len(servers) == len(ids),
        jobs_per_server=sum_by(server, None, len(servers)),
        level=level,
        top=int(level.max()) + 2,
        strandable=bool(np.any(frags < cfg.window + REORDER + 1)),
    )


@dataclass(frozen=True, slots=True)
class _Damping:
    """A damped quantity's per-element step sizes (`_adapt`) and the last pull on it."""

    step: Vec
    pull: Vec


@dataclass(frozen=True, slots=True)
class _Iterate:
    """What one round of `comm_rates`' iteration hands the next.

    `bypass`, `evict`, `split`: shares of fragments that bypass, are evicted, are split;
    `wait`: the PS wait of a PS-bound fragment, `open_wait` its open-queue (Cobham) part,
    which `solve_wait` solves for (None before any round, without a warm start);
    `switch_cap`, `ps_cap`: a worker's fragment rate allowed by its share of the switch and
    by its own PS process (inf: not known yet); the loss shares (bypass then evict) and
    `ps_cap` are damped; `rescue`: the rate at which higher levels' claims land on one
    aggregator, evicting a partial sum of the job there (0 without preemption)."""

    bypass: Vec
    evict: Vec
    split: Vec
    wait: Vec
    open_wait: Vec | None
    share_damping: _Damping
    switch_cap: Vec
    ps_cap: Vec
    ps_cap_damping: _Damping
    rescue: Vec


def _first_iterate(jobs: _Contenders, start: Mapping[int, CommRate] | None) -> _Iterate:
    """Zero losses and waits, or, for the jobs found in `start`, its shares and waits, and
    where it kept them (`CommRate.resume`) the rest of the iteration's state for those jobs:
    a job whose set of contenders changed a little carries on from where it was, step sizes
    included, instead of taking full steps again from its shares."""
    seen = [start.get(i) for i in jobs.ids] if start else [None] * jobs.count
    fresh = _JobIterate(True, 0.0, 0.0, 0.0, math.inf, math.inf, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0)
    rest = [r.resume if r is not None and r.resume is not None else fresh for r in seen]
    wait = np.array([r.ps_wait_s if r else 0.0 for r in seen])

    def column(name: str) -> Vec:
        return np.array([getattr(r, name) for r in rest], dtype=np.float64)

    open_wait = None
    if start is not None:
        resumed = np.array([r is not fresh for r in rest], dtype=bool)
        open_wait = np.where(resumed, column("open_wait"), wait)
    return _Iterate(
        bypass=np.array([r.bypass if r else 0.0 for r in seen]),
        evict=np.array([r.evict if r else 0.0 for r in seen]),
        split=column("split"),
        wait=wait,
        open_wait=open_wait,
        share_damping=_Damping(
            np.concatenate((column("bypass_step"), column("evict_step"))),
            np.concatenate((column("bypass_pull"), column("evict_pull"))),
        ),
        switch_cap=column("switch_cap"),
        ps_cap=column("ps_cap"),
        ps_cap_damping=_Damping(column("ps_cap_step"), column("ps_cap_pull")),
        rescue=column("rescue"),
    )


def _resume(it: _Iterate, settled: bool) -> list[_JobIterate]:
    """Each job's part of `it` beyond its `CommRate`, in job order (`_first_iterate`)."""
    count = len(it.bypass)
    share_step, share_pull = it.share_damping.step, it.share_damping.pull
    open_wait = it.wait if it.open_wait is None else it.open_wait
    columns = (it.split, open_wait, it.rescue, it.switch_cap, it.ps_cap, share_step[:count],
               share_step[count:], share_pull[:count], share_pull[count:],
               it.ps_cap_damping.step, it.ps_cap_damping.pull)  # fmt: skip
    rows = zip(*(c.tolist() for c in columns), strict=True)
    return [_JobIterate(settled, *row) for row in rows]


@dataclass(frozen=True, slots=True)
class _PsTraffic:
    """Per fragment, what the loss shares send to the PS and how long a slot is held.

    `ps_share`: share of a fragment's slot that waits for the PS (every fragment under atp);
    `slot_base`: the slot without PS queueing; `critical`, `copies`: critical and copy
    packets sent to the PS; `unsplit_base`, `unsplit_share`: the slot's terms without the
    split fragments' extra round trips."""

    ps_share: Vec
    slot_base: Vec
    critical: Vec
    copies: Vec
    unsplit_base: Vec
    unsplit_share: Vec


def _ps_traffic(cfg: SimConfig, release: bool, jobs: _Contenders, it: _Iterate) -> _PsTraffic:
    n, bypass, evict, split = jobs.workers, it.bypass, it.evict, it.split
    lost = bypass + evict
    q = lost if release else np.ones_like(lost)
    critical = bypass * n + evict * (n + 1) / 2 + (0.0 if release else 1.0 - lost) + split * n
    copies = 1.0 - lost if release else np.zeros_like(lost)
    # A fragment whose contributions reach the PS (bypassed: n; evicted: its held sum and
    # the (n-1)/2 still to come) has its result when the PS has served the last of them.
    batch = (bypass * (n - 1) + evict * (n - 1) / 2) * cfg.ps_fragment_s
    # A split fragment waits about two smoothed round trips for its workers' fast
    # retransmit, then one PS trip: its slot is three, the PS part counted once more.
    base = cfg.rtt_s + q * cfg.ps_detour_s + batch
    return _PsTraffic(
        ps_share=q * (1 + 2 * split) + split,
        slot_base=base * (1 + 2 * split) + split * cfg.ps_detour_s,
        critical=critical,
        copies=copies,
        unsplit_base=base,
        unsplit_share=q,
    )


def _own_ps_cap(
    cfg: SimConfig, release: bool, jobs: _Contenders, traffic: _PsTraffic, it: _Iterate
) -> tuple[Vec, _Damping, float]:
    """The fragment rate a job's own PS process allows (at most one critical packet per
    `SimConfig.ps_fragment_s`; inf under early release or on shared processes), damped like
    the loss shares, and how far it moved: near the knee the cap and the shares pull on each
    other, and undamped they settle into a cycle."""
    c, count = traffic.critical, jobs.count
    if release or not jobs.own:
        # No cap: the general case below would keep it at inf and its step sizes as they are.
        return np.full(count, np.inf), _Damping(it.ps_cap_damping.step, np.zeros(count)), 0.0
    target = np.divide(1.0, cfg.ps_fragment_s * c, out=np.full(count, np.inf), where=c > 0)
    before = it.ps_cap
    both = np.isfinite(target) & np.isfinite(before)
    gap = np.subtract(target, before, out=np.zeros(count), where=both)
    moved = np.abs(gap) / np.where(both, target, 1.0)
    step = _adapt(it.ps_cap_damping.step, gap, it.ps_cap_damping.pull)
    value = np.where(np.isinf(before) | np.isinf(target), target, before + step * gap)
    return value, _Damping(step, gap), float(np.max(moved, initial=0.0))


def _ps_wait(
    cfg: SimConfig,
    release: bool,
    jobs: _Contenders,
    traffic: _PsTraffic,
    held_to: Vec,
    guess: Vec | None,
) -> Vec:
    """The open-queue (Cobham) wait of each job's PS-bound fragments (`solve_wait`)."""
    load = PsLoad(
        traffic.ps_share, traffic.slot_base, traffic.critical, traffic.copies, jobs.frags,
        jobs.iter_s + jobs.last, held_to, None if jobs.own else jobs.server, jobs.servers,
        cfg.window, not release,
    )  # fmt: skip
    server_guess = (
        None if guess is None else sum_by(jobs.server, guess, jobs.servers) / jobs.jobs_per_server
    )
    wait = solve_wait(cfg.ps_fragment_s, cfg.fragment_s, cfg.window, load, server_guess)
    out: Vec = wait[jobs.server]
    return out


def _ps_overflow(cfg: SimConfig, traffic: _PsTraffic, wait: Vec, ps_cap: Vec) -> Vec:
    """The wait a PS-bound fragment adds, held to its process's capacity: the job's window
    fills the PS queue, what does not fit in a slot waits there, and its aggregators (atp)
    wait with it."""
    q, a, win, fs = traffic.ps_share, traffic.slot_base, cfg.window, cfg.fragment_s
    at_ps = _rates(wait, q, a, win, fs, ps_cap)  # the PS's cap alone, not the switch's
    # Without the cap its window is full (window-bound) or not (link-bound); with it, a
    # window's worth takes longer still, and the difference waits at the PS.
    uncapped = _rates(wait, q, a, win, fs, np.full(len(wait), np.inf))
    overflow = np.maximum(0.0, win / at_ps - win / uncapped)
    out: Vec = np.divide(overflow, q, out=np.zeros(len(wait)), where=q > 0)
    return out


@dataclass(frozen=True, slots=True)
class _Occupancy:
    """How long each job's allreduce takes and what it holds meanwhile.

    `t_comm`: allreduce seconds per iteration; `spread`: how long a fragment's contributions
    take to all arrive; `claims`: fragments per second over the whole allreduce; `held`:
    aggregators held while communicating, `held_complete` of them complete sums awaiting the
    PS (atp); `duty`: the share of time the job communicates; `holds`: the hold of a claim in
    an iteration's first window, of a later one and of a split fragment's, and the share of
    claims each takes (`_let_go`)."""

    t_comm: Vec
    spread: Vec
    claims: Vec
    held: Vec
    held_complete: Vec
    duty: Vec
    holds: tuple[tuple[Vec, Vec], ...]


def _occupancy(
    cfg: SimConfig,
    release: bool,
    jobs: _Contenders,
    it: _Iterate,
    traffic: _PsTraffic,
    rate: Vec,
    wait: Vec,
) -> _Occupancy:
    n, frags, skew, win, rtt = jobs.workers, jobs.frags, jobs.skew, cfg.window, cfg.rtt_s
    lost = it.bypass + it.evict
    slot = traffic.slot_base + traffic.ps_share * wait
    t = (
        _stream_time(frags, rate, slot, cfg.fragment_s, win)
        + jobs.last
        + _tail(release, frags, win, it.bypass, lost, slot - rtt, (n - 1) * cfg.ps_fragment_s)
    )
    if jobs.strandable:
        t = t + _stranded(cfg, jobs, it, t, slot)
    # How long a fragment's contributions take to all arrive: the workers' start skew
    # for the first window of an iteration; after that the leading worker can be at
    # most its window ahead, and when the window binds every worker sends its next
    # fragment when the same multicast result arrives, so the spread closes.
    steady = np.minimum(skew, np.maximum(0.0, win * cfg.fragment_s - slot))
    spread = (np.minimum(frags, win) * skew + np.maximum(0.0, frags - win) * steady) / frags
    hold = spread + (0.0 if release else cfg.ps_detour_s + wait)
    # Fragments per second over the whole allreduce: `rate` is the streaming rate, but
    # the allreduce also waits for its last worker and its last results, and sends
    # nothing meanwhile.
    thr = frags / t
    # A split fragment's claim (see `_collisions`) holds its aggregator as a partial sum that
    # cannot complete until the workers' fast retransmit flushes it, two smoothed round
    # trips after the first send.
    split_hold = 2 * (traffic.unsplit_base + traffic.unsplit_share * wait)
    # Without early release (atp) a claim is held until its result is back from the PS,
    # and an iteration's first window reaches the PS at once: its sums queue there behind
    # half of the window's critical packets on average.
    first = np.minimum(frags, win) / frags
    burst = 0.0 if release else 0.5 * (np.minimum(frags, win) - 1) * traffic.critical
    kept = 1 - lost
    holds = (
        (skew + hold - spread + burst * cfg.ps_fragment_s, kept * first),
        (steady + hold - spread, kept * (1 - first)),
        (split_hold, it.split),
    )
    return _Occupancy(
        t_comm=t,
        spread=spread,
        claims=thr,
        held=thr * ((1 - lost) * hold + it.split * split_hold),
        held_complete=thr * (1 - lost) * (hold - spread),
        duty=t / (t + jobs.iter_s),
        holds=holds,
    )


def _switch_share(
    cfg: SimConfig,
    jobs: _Contenders,
    traffic: _PsTraffic,
    occ: _Occupancy,
    rates: tuple[Vec, Vec],
    before: Vec,
) -> tuple[Vec, float]:
    """Each worker's fragment rate at its share of a switch of `SimConfig.switch_pps`
    (`_switch_cap`), halfway from `before`, and how far it moved (at most 1).

    `rates`: its streaming rate, and the rate its own PS process alone allows."""
    rate, free = rates
    # Packets the switch's CPU handles per fragment: the n contributions in and the n
    # results out, the PS result that re-enters the switch (one per PS-bound fragment), the
    # packets sent to the PS (critical ones and esa's copies) and, when the PS runs on that
    # CPU, its work on each of them at what a PS packet costs there.
    per_frag = (
        2 * jobs.workers
        + traffic.ps_share
        + (1 + cfg.ps_switch_cost) * (traffic.critical + traffic.copies)
    )
    cap = _switch_cap(cfg.switch_pps, occ.duty, free * per_frag, rate * per_frag, per_frag)
    moved = np.where(np.isinf(before), np.inf, np.abs(cap - before) / cap)
    halfway = np.where(np.isinf(before), cap, 0.5 * (before + cap))
    return halfway, float(np.max(np.minimum(moved, 1.0)))


@dataclass(frozen=True, slots=True)
class _Collisions:
    """What the occupancy implies: the shares of a job's fragments that bypass, are evicted
    and are split, and the claim rates above each priority level (`_above`, one past the
    top)."""

    bypass: Vec
    evict: Vec
    split: Vec
    claims_above: Vec


def _collisions(
    cfg: SimConfig, preempt: bool, jobs: _Contenders, lost: Vec, occ: _Occupancy
) -> _Collisions:
    level, top, n_agg = jobs.level, jobs.top, cfg.pool.aggregators
    # Time-averaged aggregators held, and claim rates, by priority level (atp: all at 0).
    held_at = sum_by(level, occ.duty * occ.held, top)
    claims_at = sum_by(level, occ.duty * occ.claims * (1 - lost), top)
    held_ge = np.append(np.cumsum(held_at[::-1])[::-1], 0.0)
    claims_above = np.append(_above(claims_at), 0.0)
    # A job's own window never collides with itself (`p4ctl.rule.hashed_index` maps any
    # `pool` consecutive fragments of a job to distinct aggregators): a new fragment lands
    # on one of the aggregators the job does not hold, held by others in this share.
    others = held_ge[level] - occ.duty * occ.held
    b = np.minimum(0.95, others / np.maximum(n_agg - occ.held, 1.0))
    e = (1 - b) * (1 - np.exp(-claims_above[level] * occ.spread / n_agg)) if preempt else 0.0 * b
    # A split fragment: its first contribution collided, the holder let go before its last
    # one arrived, so the rest claimed the aggregator and wait for a sum that cannot
    # complete. Only the first window of an iteration spreads contributions (by the
    # workers' start skew); `_let_go` is the chance the holder lets go within that spread.
    first = np.minimum(jobs.frags, cfg.window) / jobs.frags
    return _Collisions(b, e, first * b * _let_go(jobs, occ), claims_above)


def _let_go(jobs: _Contenders, occ: _Occupancy) -> Vec:
    """The chance that another job's claim a job's first contribution collides with (at its
    level or above) ends within the job's start skew.

    A collision lands at a uniform point of the time the others hold aggregators, so on a
    claim with a chance proportional to its hold h, and finds it ending within a spread s
    with chance min(h, s) / h: over the claims, E[min(h, s)] / E[h]. The holds differ
    several-fold between a first window's claims (the holder's own skew, atp's burst at
    the PS) and a later window's, so E[min(h, s)] is taken over each job's kinds of
    claim (`_Occupancy.holds`), not from the mean hold."""
    level, top, count = jobs.level, jobs.top, jobs.count
    rate = occ.duty * occ.claims
    weight = [(hold, rate * share) for hold, share in occ.holds]
    held: Vec = sum((w * h for h, w in weight), np.zeros(count))
    ge = np.cumsum(sum_by(level, held, top)[::-1])[::-1]
    total = ge[level] - held
    # One row per distinct skew (jobs of equal width share one), all rows at once: each row
    # is the same float operations in the same order as that skew alone.
    skews, row = np.unique(jobs.skew, return_inverse=True)
    spread = skews[:, None]
    within: Vec = sum((w * np.minimum(h, spread) for h, w in weight), np.zeros((len(skews), count)))
    at = (np.arange(len(skews))[:, None] * top + level[None, :]).ravel()
    by_level = sum_by(at, within.ravel(), len(skews) * top).reshape(len(skews), top)
    ge_s = np.cumsum(by_level[:, ::-1], axis=1)[:, ::-1]
    caught = ge_s[row, level] - within[row, np.arange(count)]
    out: Vec = np.divide(caught, total, out=np.ones(count), where=total > 0)
    return np.minimum(out, 1.0)


def _damp_shares(it: _Iterate, target: _Collisions) -> tuple[Vec, Vec, _Damping, float]:
    """The loss shares one damped (Mann) step towards `target`, their step sizes, and how far
    they are from it.

    A share's target hardly moves with the share itself, so a full step settles most in a few
    rounds; near PS saturation the map overshoots so far that a fixed step settles into a
    2-cycle, and a share whose pull reverses direction (an oscillation) has its step halved.
    Settled by the pull, not the move: a halved step moves little while a share is still far
    from its fixed point."""
    pull = np.concatenate((target.bypass - it.bypass, target.evict - it.evict))
    step = _adapt(it.share_damping.step, pull, it.share_damping.pull)
    moved = step * pull
    count = len(it.bypass)
    far = float(np.max(np.abs(pull[:count]) + np.abs(pull[count:])))
    return it.bypass + moved[:count], it.evict + moved[count:], _Damping(step, pull), far


@dataclass(frozen=True, slots=True)
class _Round:
    """One round's answer: the occupancy and PS traffic at its shares, and the claim rates
    above each level."""

    occ: _Occupancy
    traffic: _PsTraffic
    claims_above: Vec


def _round(
    cfg: SimConfig, policy: Policy, jobs: _Contenders, it: _Iterate
) -> tuple[_Iterate, _Round, float]:
    """One round of the fixed-point iteration: the next iterate, this round's answer, and how
    far from settled it is (below `_TOL`: settled)."""
    release, preempt = policy.early_release, policy.preempts
    win, fs = cfg.window, cfg.fragment_s
    traffic = _ps_traffic(cfg, release, jobs, it)
    q, a = traffic.ps_share, traffic.slot_base
    ps_cap, ps_cap_damping, moved_ps = _own_ps_cap(cfg, release, jobs, traffic, it)
    capped = bool(np.isfinite(ps_cap).any())
    held_to = np.minimum(it.switch_cap, ps_cap)
    open_wait = _ps_wait(cfg, release, jobs, traffic, held_to, it.open_wait)
    rate = _rates(open_wait, q, a, win, fs, held_to)
    # Without a cap nothing overflows (`_ps_overflow` would add exact zeros).
    wait = open_wait + _ps_overflow(cfg, traffic, open_wait, ps_cap) if capped else open_wait
    # The wait has settled when its part of a fragment's slot (q x) has: near the PS's knee
    # the wait itself is steep in the loss shares, where q is small and the slot is not.
    delta = float(np.max(np.abs(q * (wait - it.wait)) / (a + q * wait)))
    delta = max(delta, moved_ps)
    occ = _occupancy(cfg, release, jobs, it, traffic, rate, wait)
    switch_cap = it.switch_cap
    if cfg.switch_pps > 0:
        free = _rates(wait, q, a, win, fs, ps_cap)
        switch_cap, moved_cap = _switch_share(cfg, jobs, traffic, occ, (rate, free), switch_cap)
        delta = max(delta, moved_cap)
    target = _collisions(cfg, preempt, jobs, it.bypass + it.evict, occ)
    # The split share moves the slot too: the answer has settled only once it has.
    delta = max(delta, float(np.max(np.abs(target.split - it.split))))
    bypass, evict, shares, far = _damp_shares(it, target)
    delta = max(delta, far)
    rescue = target.claims_above[jobs.level] / cfg.pool.aggregators
    after = _Iterate(
        bypass, evict, target.split, wait, open_wait, shares, switch_cap, ps_cap, ps_cap_damping,
        rescue,
    )  # fmt: skip
    return after, _Round(occ, traffic, target.claims_above), delta


def _caused(preempt: bool, jobs: _Contenders, it: _Iterate, last: _Round) -> Vec:
    """Evictions each job causes per second of its run: those the jobs below it suffer,
    shared among the higher jobs by their claim rates."""
    occ, level, top = last.occ, jobs.level, jobs.top
    if not preempt:
        return np.zeros(jobs.count)
    suffered_at = sum_by(level, it.evict * jobs.frags / (occ.t_comm + jobs.iter_s), top + 1)
    claims_above = last.claims_above
    share = np.divide(suffered_at, claims_above, out=np.zeros(top + 1), where=claims_above > 0)
    below = np.concatenate(([0.0], np.cumsum(share)))  # below[L]: levels < L
    out: Vec = occ.duty * occ.claims * (1 - it.bypass - it.evict) * below[level]
    return out


def comm_rates(
    cfg: SimConfig,
    policy: Policy,
    jobs: Sequence[FlowJob],
    start: Mapping[int, CommRate] | None = None,
) -> dict[int, CommRate]:
    """``{job_id: CommRate}`` for `jobs` contending under `policy` (see module doc).

    The model reads the policy's traits, never its name: a private partition per job when
    it is not `Policy.shared`; the aggregator freed at completion or after the PS round trip
    (`Policy.early_release`, esa's or atp's way above); priority levels and evictions only
    when it `Policy.preempts`. What the module doc says of esa holds for each trait
    separately, so that each can be switched off on its own.

    `start` (optional) seeds the fixed-point iteration with an earlier answer, e.g. the
    previous set of contending jobs: jobs found there resume the iteration where it left them
    (`CommRate.resume`: shares, waits and step sizes) instead of starting from zero, which
    saves rounds when one job joins or leaves. The answer is the same fixed point either way:
    to the iteration's tolerance (on the loss shares, and on the wait's part of each
    fragment's slot) where it settles within `_ROUNDS` rounds, within about 5% of ``t_comm_s``
    where it does not (close to PS saturation, or where a window starts to bind, where the
    PS delay is steep in the loss shares; `tests/scheduler/test_fluid`). Where the solve it
    resumes had not settled, it stops after `_RESUMED_ROUNDS` and the next solve resumes it.
    """
    if not policy.shared:
        return _static(cfg, jobs)
    if not jobs:
        return {}
    contenders = _contenders(cfg, jobs, policy.preempts)
    first = _first_iterate(contenders, start)
    unsettled = start is not None and any(
        r.resume is not None and not r.resume.settled for r in start.values()
    )
    it, last, delta = _round(cfg, policy, contenders, first)
    for _ in range((_RESUMED_ROUNDS if unsettled else _ROUNDS) - 1):
        if delta < _TOL:
            break
        it, last, delta = _round(cfg, policy, contenders, it)
    occ, traffic = last.occ, last.traffic
    fields = (occ.t_comm, it.bypass, it.evict, _caused(policy.preempts, contenders, it, last),
              occ.duty, occ.held - occ.held_complete, occ.held_complete,
              np.zeros(contenders.count), it.wait, occ.duty * traffic.critical * occ.claims,
              occ.duty * traffic.copies * occ.claims)  # fmt: skip
    rows = zip(*(v.tolist() for v in fields), _resume(it, delta < _TOL), strict=True)
    return {jid: CommRate(*row) for jid, row in zip(contenders.ids, rows, strict=True)}


def _adapt(step: Vec, pull: Vec, before: Vec) -> Vec:
    """A damped iteration's step sizes after a round: halved (down to `_MIN_STEP`) where the
    pull reversed its direction since `before` (an oscillation), grown by a quarter (up to a
    full step) where it kept it, so that what is not oscillating keeps moving."""
    step = np.where(pull * before < 0, np.maximum(step / 2, _MIN_STEP), step)
    out: Vec = np.where(pull * before > 0, np.minimum(step * 1.25, 1.0), step)
    return out


def _tail(
    release: bool, frags: Vec, win: int, bypass: Vec, lost: Vec, ps_part: Vec, batch: Vec
) -> Vec:
    """What the slowest fragment of an iteration's last window adds to the mean slot.

    An iteration ends with the result of its last fragment; of the last window, whichever
    took the PS's way finishes last. With early release (esa) that is any lost fragment (its
    share of the slot is `ps_part`, ``lost x`` what one costs); without (atp) every fragment
    takes the PS's way, and a bypassed one waits for its n contributions there (`batch`
    more)."""
    m = np.minimum(frags, win)
    share, extra = (lost, ps_part / np.maximum(lost, 1e-12)) if release else (bypass, batch)
    some = 1 - (1 - share) ** m
    return (some - share) * extra


def _stranded(cfg: SimConfig, jobs: _Contenders, it: _Iterate, t: Vec, slot: Vec) -> Vec:
    """What a split fragment that no fast retransmit can rescue adds to an iteration.

    A split fragment (`_collisions`) waits for its workers to resend it. Fast retransmit
    resends it once `REORDER` later results have arrived; of its iteration's last
    ``REORDER + 1`` fragments none has that many, so their timeout does, `SimConfig.rto_s`
    after the first (collided) contribution was sent, unless a higher level's claim evicts
    the stuck partial sum to the PS first (`_Iterate.rescue`); the iteration ends a slot
    after that if it had not yet. Splits happen in an iteration's first window only, so
    this is the first window's fragments among the last ``REORDER + 1``: each split with
    the first window's share ``split x F / min(F, W)``, the iteration stranded when any is."""
    frags, win, split, rescue, rto = jobs.frags, cfg.window, it.split, it.rescue, cfg.rto_s
    first = np.minimum(frags, win)
    lo = np.maximum(0.0, frags - (REORDER + 1))
    count = np.maximum(0.0, first - lo)
    each = np.minimum(1.0, split * frags / first)
    some = 1 - (1 - each) ** count
    # The collided contribution is the earliest worker's, sent at line rate in the first
    # window; the middle of the stranded range stands for where the split fragment sits.
    sent = cfg.worker_skew_s / (jobs.workers + 1) + 0.5 * (lo + first - 1) * cfg.fragment_s
    # Stuck until the timeout or the first evicting claim, whichever comes first.
    rescued = -np.expm1(-rescue * rto)
    stuck = np.divide(rescued, rescue, out=np.full(len(t), rto), where=rescue > 0)
    out: Vec = some * np.maximum(0.0, sent + stuck + slot - t)
    return out


def _above(per_level: Vec) -> Vec:
    """``out[lv]`` = sum of `per_level` over the levels strictly above `lv`."""
    total = np.cumsum(per_level[::-1])[::-1]
    return np.append(total[1:], 0.0)
