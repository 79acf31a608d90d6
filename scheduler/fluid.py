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
from dataclasses import dataclass

import numpy as np

from scheduler.config import SimConfig
from scheduler.memory import COPIES_PER_SLOT, partition_slots
from scheduler.policy import Policy
from scheduler.psdelay import PsLoad, Vec, solve_wait, sum_by

__all__ = ["CommRate", "FlowJob", "comm_rates"]

_ROUNDS = 40
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


def _rates(x: Vec, q: Vec, a: Vec, w: int, fs: float, cap: Vec) -> Vec:
    """Fragments per second of each worker whose PS-bound fragments wait `x` at the PS.

    A job's window binds whether or not its fragments visit the PS (`q`); its link, or its
    share of the switch (`cap`, see `_switch_cap`), may bind first."""
    windowed = w / (a + q * x)
    return np.minimum(np.minimum(1 / fs, windowed), cap)


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
    when it `Policy.preempts`.

    `start` (optional) seeds the fixed-point iteration with an earlier answer, e.g. the
    previous set of contending jobs: jobs found there start from their bypass, eviction and
    PS-wait shares instead of zero, which saves rounds when one job joins or leaves. The
    answer is the same fixed point either way: to the iteration's tolerance (on the loss
    shares, and on the wait's part of each fragment's slot) where it settles within `_ROUNDS`
    rounds, within about 5% of ``t_comm_s`` where it does not (close to PS saturation, where
    the PS delay is steep in the loss shares; `tests/scheduler/test_fluid`).
    """
    if not policy.shared:
        return _static(cfg, jobs)
    if not jobs:
        return {}
    # What the module doc says of esa holds for `release` (its early release) and for
    # `preempt` (its evictions) separately, so that each can be switched off on its own.
    release, preempt = policy.early_release, policy.preempts
    fs, rtt, s, detour = cfg.fragment_s, cfg.rtt_s, cfg.ps_fragment_s, cfg.ps_detour_s
    win, n_agg = cfg.window, cfg.pool.aggregators
    ids = [j.job_id for j in jobs]
    n = np.array([j.workers for j in jobs], dtype=np.float64)
    frags = np.array([math.ceil(j.grad_bytes / cfg.payload_bytes) for j in jobs], np.float64)
    iter_s = np.array([j.iter_time_s for j in jobs], dtype=np.float64)
    skew = cfg.worker_skew_s * (n - 1) / (n + 1)  # first to last worker: a fragment's spread
    last = _last_start(cfg, n)
    servers: dict[int, int] = {}
    server = np.array([servers.setdefault(cfg.ps_of(i), len(servers)) for i in ids], dtype=np.intp)
    own = len(servers) == len(ids)  # a process per job, numbered in job order
    by_server = None if own else server
    per_server = sum_by(server, None, len(servers))
    level = np.array([j.priority if preempt else 0 for j in jobs], dtype=np.intp)
    top = int(level.max()) + 2
    seen = [start.get(i) for i in ids] if start else [None] * len(ids)
    bypass = np.array([r.bypass if r else 0.0 for r in seen])
    evict = np.array([r.evict if r else 0.0 for r in seen])
    wait = np.array([r.ps_wait_s if r else 0.0 for r in seen])
    open_wait = wait  # the open-queue (Cobham) part of it, which `solve_wait` solves for
    warm = start is not None
    claims_above = np.zeros(top + 1)
    # Damped (Mann) iteration on the loss shares, one step size per share (`_adapt`). A
    # share's target hardly moves with the share itself, so a full step settles most in a few
    # rounds; near PS saturation the map overshoots so far that a fixed step settles into a
    # 2-cycle, and a share whose pull reverses direction (an oscillation) has its step halved.
    step = np.ones(2 * len(jobs))
    pull = np.zeros(2 * len(jobs))
    cap = np.full(len(jobs), np.inf)
    split = np.zeros(len(jobs))
    ps_cap = np.full(len(jobs), np.inf)
    ps_step, ps_gap = np.ones(len(jobs)), np.zeros(len(jobs))
    for _ in range(_ROUNDS):
        lost = bypass + evict
        q = lost if release else np.ones_like(lost)
        c = bypass * n + evict * (n + 1) / 2 + (0.0 if release else 1.0 - lost) + split * n
        g = 1.0 - lost if release else np.zeros_like(lost)
        # A fragment whose contributions reach the PS (bypassed: n; evicted: its held sum and
        # the (n-1)/2 still to come) has its result when the PS has served the last of them.
        batch = (bypass * (n - 1) + evict * (n - 1) / 2) * s
        # A split fragment waits about two smoothed round trips for its workers' fast
        # retransmit, then one PS trip: its slot is three, the PS part counted once more.
        base_a, base_q = rtt + q * detour + batch, q
        a = base_a * (1 + 2 * split) + split * detour
        q = q * (1 + 2 * split) + split
        # A process of its own serves a job's critical packets at most one per s.
        new_ps_cap = (
            np.divide(1.0, s * c, out=np.full(len(jobs), np.inf), where=c > 0)
            if own and not release
            else np.full(len(jobs), np.inf)
        )
        # Damped like the loss shares: near the knee the cap and the shares pull on each
        # other, and undamped they settle into a cycle.
        both = np.isfinite(new_ps_cap) & np.isfinite(ps_cap)
        gap = np.subtract(new_ps_cap, ps_cap, out=np.zeros(len(jobs)), where=both)
        moved_ps = np.abs(gap) / np.where(both, new_ps_cap, 1.0)
        ps_step = _adapt(ps_step, gap, ps_gap)
        ps_gap = gap
        ps_cap = np.where(
            np.isinf(ps_cap) | np.isinf(new_ps_cap), new_ps_cap, ps_cap + ps_step * gap
        )
        held_to = np.minimum(cap, ps_cap)
        load = PsLoad(
            q, a, c, g, frags, iter_s + last, held_to, by_server, len(servers), win, not release
        )
        guess = sum_by(server, open_wait, len(servers)) / per_server if warm else None
        x = solve_wait(s, fs, win, load, guess)[server]
        open_wait = x
        warm = True
        rate = _rates(x, q, a, win, fs, held_to)
        # Held to its process's capacity, the job's window fills the PS queue: what does not
        # fit in a slot waits there, and its aggregators (atp) wait with it.
        at_ps = _rates(x, q, a, win, fs, ps_cap)  # the PS's cap alone, not the switch's
        # Without the cap its window is full (window-bound) or not (link-bound); with it, a
        # window's worth takes longer still, and the difference waits at the PS.
        uncapped = _rates(x, q, a, win, fs, np.full(len(jobs), np.inf))
        overflow = np.maximum(0.0, win / at_ps - win / uncapped)
        x = x + np.divide(overflow, q, out=np.zeros(len(jobs)), where=q > 0)
        # The wait has settled when its part of a fragment's slot (q x) has: near the PS's knee
        # the wait itself is steep in the loss shares, where q is small and the slot is not.
        delta = float(np.max(np.abs(q * (x - wait)) / (a + q * x)))
        delta = max(delta, float(np.max(moved_ps, initial=0.0)))
        wait = x
        slot = a + q * x
        t = (
            _stream_time(frags, rate, slot, fs, win)
            + last
            + _tail(release, frags, win, bypass, lost, slot - rtt, (n - 1) * s)
        )
        # How long a fragment's contributions take to all arrive: the workers' start skew
        # for the first window of an iteration; after that the leading worker can be at
        # most its window ahead, and when the window binds every worker sends its next
        # fragment when the same multicast result arrives, so the spread closes.
        steady = np.minimum(skew, np.maximum(0.0, win * fs - slot))
        spread = (np.minimum(frags, win) * skew + np.maximum(0.0, frags - win) * steady) / frags
        hold = spread + (0.0 if release else detour + x)
        # Fragments per second over the whole allreduce: `rate` is the streaming rate, but
        # the allreduce also waits for its last worker and its last results, and sends
        # nothing meanwhile.
        thr = frags / t
        # A split fragment's claim (see below) holds its aggregator as a partial sum that
        # cannot complete until the workers' fast retransmit flushes it, two smoothed round
        # trips after the first send.
        split_hold = 2 * (base_a + base_q * x)
        held = thr * ((1 - lost) * hold + split * split_hold)
        done = thr * (1 - lost) * (hold - spread)  # atp: complete, awaiting the PS result
        duty = t / (t + iter_s)
        if cfg.switch_pps > 0:
            # Packets the switch's CPU handles per fragment: the n contributions in and the n
            # results out, the PS result that re-enters the switch (one per PS-bound
            # fragment), the packets sent to the PS (critical ones and esa's copies) and,
            # when the PS runs on that CPU, its work on each of them at what a PS packet
            # costs there.
            per_frag = 2 * n + q + (1 + cfg.ps_switch_cost) * (c + g)
            free = _rates(x, q, a, win, fs, ps_cap)
            new_cap = _switch_cap(cfg.switch_pps, duty, free * per_frag, rate * per_frag, per_frag)
            moved_cap = np.where(np.isinf(cap), np.inf, np.abs(new_cap - cap) / new_cap)
            delta = max(delta, float(np.max(np.minimum(moved_cap, 1.0))))
            cap = np.where(np.isinf(cap), new_cap, 0.5 * (cap + new_cap))
        # Time-averaged aggregators held, and claim rates, by priority level (atp: all at 0).
        held_at = sum_by(level, duty * held, top)
        claims_at = sum_by(level, duty * thr * (1 - lost), top)
        held_ge = np.append(np.cumsum(held_at[::-1])[::-1], 0.0)
        claims_above = np.append(_above(claims_at), 0.0)
        claims_ge = claims_above[:-1] + claims_at
        # A job's own window never collides with itself (`p4ctl.rule.hashed_index` maps any
        # `pool` consecutive fragments of a job to distinct aggregators): a new fragment lands
        # on one of the aggregators the job does not hold, held by others in this share.
        others = held_ge[level] - duty * held
        b = np.minimum(0.95, others / np.maximum(n_agg - held, 1.0))
        e = (1 - b) * (1 - np.exp(-claims_above[level] * spread / n_agg)) if preempt else 0.0 * b
        # A split fragment: its first contribution collided, the holder let go before its last
        # one arrived, so the rest claimed the aggregator and wait for a sum that cannot
        # complete. Only the first window of an iteration spreads contributions (by the
        # workers' start skew); the holder lets go within that spread with probability
        # spread / (its mean hold), the hold's remainder being uniform.
        mean_hold = np.divide(
            held_ge[level], claims_ge[level], out=np.zeros(len(jobs)), where=claims_ge[level] > 0
        )
        first = np.minimum(frags, win) / frags
        let_go = np.minimum(
            1.0, np.divide(skew, mean_hold, out=np.ones(len(jobs)), where=mean_hold > 0)
        )
        new_split = first * b * let_go
        # The split share moves the slot too: the answer has settled only once it has.
        delta = max(delta, float(np.max(np.abs(new_split - split))))
        split = new_split
        new_pull = np.concatenate((b - bypass, e - evict))
        step = _adapt(step, new_pull, pull)
        pull = new_pull
        moved = step * new_pull
        count = len(jobs)
        # Settled by the pull, not the move: a halved step moves little while a share is still
        # far from its fixed point.
        delta = max(delta, float(np.max(np.abs(new_pull[:count]) + np.abs(new_pull[count:]))))
        bypass, evict = bypass + moved[:count], evict + moved[count:]
        if delta < _TOL:
            break
    # Evictions a job suffers per second, shared among the higher jobs by their claim rates.
    suffered_at = sum_by(level, evict * frags / (t + iter_s), top + 1)
    caused = np.zeros(len(jobs))
    if preempt:
        share = np.divide(suffered_at, claims_above, out=np.zeros(top + 1), where=claims_above > 0)
        below = np.concatenate(([0.0], np.cumsum(share)))  # below[L]: levels < L
        caused = duty * thr * (1 - bypass - evict) * below[level]
    fields = (t, bypass, evict, caused, duty, held - done, done, np.zeros(len(jobs)), wait,
              duty * c * thr, duty * g * thr)  # fmt: skip
    rows = zip(*(v.tolist() for v in fields), strict=True)
    return {jid: CommRate(*row) for jid, row in zip(ids, rows, strict=True)}


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


def _above(per_level: Vec) -> Vec:
    """``out[lv]`` = sum of `per_level` over the levels strictly above `lv`."""
    total = np.cumsum(per_level[::-1])[::-1]
    return np.append(total[1:], 0.0)
