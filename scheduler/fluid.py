"""The aggregate (fluid) model of allreduce under contention: closed form, no packets.

For the set of jobs holding switch memory it returns each job's mean allreduce time per
iteration, the shares of its fragments that bypass or are evicted, and the load it puts on its
PS process. Assumptions (the fragment-level model in `scheduler.fragsim` makes none of them;
`scheduler.validate` measures the difference):

- A worker streams its F = ceil(G / payload) fragments back to back, limited by its link
  (one fragment per `fragment_s`) and by its window: W fragments in flight, each holding its
  slot for one switch round trip, plus, when its result comes from the PS, one PS detour and
  the PS queueing delay. Under ``atp`` that is every fragment (the aggregator is freed and the
  result multicast only when the PS result passes back through the switch); under ``esa``
  only bypassed and evicted ones. The last worker starts `worker_skew_s` x (n-1)/(n+1) after
  the first on average, and the job waits for it.
- Jobs compute and communicate independently, so at a random instant job i communicates with
  probability d_i = t_comm / (t_compute + t_comm) (its duty cycle). A fragment's contributions
  arrive spread by the workers' start skew for the first window of an iteration; after that
  the leading worker is at most its window ahead (spread ``min(skew, W x fragment_s - slot)``,
  zero when the window binds, since every worker then sends on the same multicast result).
  What job j sees while it communicates is its own full load plus the others' duty-weighted
  loads.
- Hashed placement is uniform: a fragment finds its aggregator held with probability equal to
  the share of the pool held by fragments it cannot take (``atp``: anyone's; ``esa``: jobs of
  equal or higher priority, its own included). An aggregator is held from the first to the
  last contribution; under ``atp`` also for the PS detour and PS queueing. Under
  ``esa`` a partial sum is evicted when a higher-priority claim lands on it meanwhile
  (Poisson claims).
- PS processes (`SimConfig.ps_of`): each is one server taking `ps_fragment_s` per packet,
  serving critical-path packets first and esa's completion copies only when idle
  (non-preemptive priority). Critical packets per fragment: ``atp`` 1 complete sum; a bypassed
  fragment n contributions; an evicted one its held sum plus the (n-1)/2 contributions still
  to come on average. A critical packet waits Cobham's M/G/1 non-preemptive-priority delay
  ``R / (1 - rho_crit)`` with ``R = min(1, rho_all) x ps_fragment_s / 2`` (deterministic
  service). Windows close the loop, so rho_crit stays below 1: jobs slow down until the PS
  keeps up; copies beyond the PS's capacity only grow its backlog (they delay nothing here).
- ``static``: a private partition sized to the window, so nothing bypasses or visits a PS.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.config import SimConfig

__all__ = ["CommRate", "FlowJob", "comm_rates"]

_ROUNDS = 40
_TOL = 1e-4


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


def _skew(cfg: SimConfig, workers: int) -> float:
    return cfg.worker_skew_s * (workers - 1) / (workers + 1)


def _static(cfg: SimConfig, jobs: Sequence[FlowJob]) -> dict[int, CommRate]:
    out = {}
    step = max(cfg.fragment_s, cfg.rtt_s / cfg.window)
    for j in jobs:
        t = math.ceil(j.grad_bytes / cfg.payload_bytes) * step + cfg.rtt_s + _skew(cfg, j.workers)
        # The window's slots are live while streaming; the partition (both copies) is
        # reserved for the job's whole run.
        duty = t / (t + j.iter_time_s)
        out[j.job_id] = CommRate(t, 0.0, 0.0, 0.0, duty, cfg.window, 0.0, 2 * cfg.window)
    return out


def _rates(x: float, q: float, a: float, w: int, fs: float) -> float:
    """Fragments per second of a worker whose PS-bound fragments wait `x` at the PS."""
    return min(1 / fs, w / (a + q * x)) if q > 0 else 1 / fs


def _solve_wait(
    s: float, fs: float, w: int, group: list[tuple[float, float, float, float, int, float]]
) -> float:
    """The queueing delay x of critical packets at one PS process, by bisection.

    `group` holds, per job on the process, ``(q, a, c, g, frags, t_fixed)``: share of its
    fragments that wait for the PS, slot time without queueing, critical and copy packets per
    fragment, fragments per iteration, and compute + fixed allreduce time. For a given x each
    job streams at `_rates`, so it communicates a share d of the time; a communicating job
    sees its own load in full and the others' duty-weighted. ``x = R / (1 - rho_crit)``
    (Cobham) with ``R = min(1, rho_all) s / 2``: the left side grows with x, the right side
    shrinks (jobs slow down), so there is one root; windows keep rho_crit below 1.
    """
    lo, hi = 0.0, 1.0
    for _ in range(60):
        x = 0.5 * (lo + hi)
        crit = copies = self_crit = self_all = total_d = 0.0
        for q, a, c, g, f, t_fixed in group:
            r = _rates(x, q, a, w, fs)
            t = f / r + a + q * x
            d = t / (t + t_fixed)
            crit += d * c * r
            copies += d * g * r
            self_crit += d * (1 - d) * c * r
            self_all += d * (1 - d) * (c + g) * r
            total_d += d
        if total_d > 0:
            self_crit, self_all = self_crit / total_d, self_all / total_d
        rho_c = s * (crit + self_crit)
        rho_all = s * (crit + copies + self_all)
        rhs = math.inf if rho_c >= 1 else min(1.0, rho_all) * s / 2 / (1 - rho_c)
        if rhs > x:
            lo = x
        else:
            hi = x
        if hi - lo < 1e-3 * (lo + 1e-9):
            break
    return 0.5 * (lo + hi)


def comm_rates(cfg: SimConfig, jobs: Sequence[FlowJob]) -> dict[int, CommRate]:
    """``{job_id: CommRate}`` for `jobs` contending under ``cfg.policy`` (see module doc)."""
    if cfg.policy == "static":
        return _static(cfg, jobs)
    esa = cfg.policy == "esa"
    fs, rtt, s, detour = cfg.fragment_s, cfg.rtt_s, cfg.ps_fragment_s, cfg.ps_detour_s
    win, n_agg = cfg.window, cfg.pool.aggregators
    frags = {j.job_id: math.ceil(j.grad_bytes / cfg.payload_bytes) for j in jobs}
    server = {j.job_id: cfg.ps_of(j.job_id) for j in jobs}
    skew = {j.job_id: _skew(cfg, j.workers) for j in jobs}
    level = {j.job_id: (j.priority if esa else 0) for j in jobs}
    top = max(level.values(), default=0) + 2
    bypass = {j.job_id: 0.0 for j in jobs}
    evict = dict(bypass)
    wait = dict(bypass)
    spreads = dict(skew)
    # (t_comm, duty, rate, held, crit/s, copies/s, held complete) per job, previous round.
    state = {j.job_id: (0.0, 0.0, 1 / fs, 0.0, 0.0, 0.0, 0.0) for j in jobs}
    claims_above = [0.0] * (top + 1)
    for _ in range(_ROUNDS):
        delta = 0.0
        # One queueing delay per PS process, for the current loss shares.
        groups: dict[int, list[tuple[float, float, float, float, int, float]]] = {}
        params = {}
        for j in jobs:
            jid, n = j.job_id, j.workers
            b, e = bypass[jid], evict[jid]
            lost = b + e
            q = 1.0 if not esa else lost  # share of fragments whose result comes via the PS
            c = b * n + e * (n + 1) / 2 + (0.0 if esa else 1.0 - lost)
            g = 1.0 - lost if esa else 0.0
            a = rtt + q * detour
            params[jid] = (q, a, c, g)
            groups.setdefault(server[jid], []).append(
                (q, a, c, g, frags[jid], j.iter_time_s + skew[jid])
            )
        waits = {k: _solve_wait(s, fs, win, grp) for k, grp in groups.items()}
        new_state = {}
        for j in jobs:
            jid = j.job_id
            q, a, c, g = params[jid]
            lost = bypass[jid] + evict[jid]
            x = waits[server[jid]]
            delta = max(delta, abs(x - wait[jid]) / (x + detour))
            wait[jid] = x
            rate = _rates(x, q, a, win, fs)
            f = frags[jid]
            t = f / rate + rtt + q * (detour + x) + skew[jid]
            # How long a fragment's contributions take to all arrive: the workers' start skew
            # for the first window of an iteration; after that the leading worker can be at
            # most its window ahead, and when the window binds every worker sends its next
            # fragment when the same multicast result arrives, so the spread closes.
            slot = rtt + q * (detour + x)
            steady = min(skew[jid], max(0.0, win * fs - slot))
            spread = (min(f, win) * skew[jid] + max(0, f - win) * steady) / f
            hold = spread + (0.0 if esa else detour + x)
            held = rate * (1 - lost) * hold
            done = held - rate * (1 - lost) * spread  # atp: complete, awaiting the PS result
            new_state[jid] = (t, t / (t + j.iter_time_s), rate, held, c * rate, g * rate, done)
            spreads[jid] = spread
        state = new_state
        # Time-averaged aggregators held, and claim rates, by priority level (atp: all at 0).
        held_at = [0.0] * top
        claims_at = [0.0] * top
        for j in jobs:
            _, duty, rate, held, _, _, _ = state[j.job_id]
            held_at[level[j.job_id]] += duty * held
            claims_at[level[j.job_id]] += duty * rate * (1 - bypass[j.job_id] - evict[j.job_id])
        held_ge = [0.0] * (top + 1)
        claims_above = [0.0] * (top + 1)
        above = 0.0
        for lv in range(top - 1, -1, -1):
            held_ge[lv] = held_ge[lv + 1] + held_at[lv]
            claims_above[lv] = above
            above += claims_at[lv]
        for j in jobs:
            jid = j.job_id
            _, duty, _, held, _, _, _ = state[jid]
            lv = level[jid]
            b = min(0.95, (held + held_ge[lv] - duty * held) / n_agg)
            e = 0.0
            if esa:
                e = (1 - b) * (1 - math.exp(-claims_above[lv] * spreads[jid] / n_agg))
            nb = 0.5 * bypass[jid] + 0.5 * b
            ne = 0.5 * evict[jid] + 0.5 * e
            delta = max(delta, abs(nb - bypass[jid]) + abs(ne - evict[jid]))
            bypass[jid], evict[jid] = nb, ne
        if delta < _TOL:
            break
    return _finish(jobs, frags, state, bypass, evict, wait, level, claims_above, esa)


def _finish(
    jobs: Sequence[FlowJob],
    frags: dict[int, int],
    state: dict[int, tuple[float, float, float, float, float, float, float]],
    bypass: dict[int, float],
    evict: dict[int, float],
    wait: dict[int, float],
    level: dict[int, int],
    claims_above: list[float],
    esa: bool,
) -> dict[int, CommRate]:
    # Evictions a job suffers per second, shared among the higher jobs by their claim rates.
    suffered_at: dict[int, float] = {}
    for j in jobs:
        t = state[j.job_id][0]
        per_s = evict[j.job_id] * frags[j.job_id] / (t + j.iter_time_s)
        suffered_at[level[j.job_id]] = suffered_at.get(level[j.job_id], 0.0) + per_s
    out = {}
    for j in jobs:
        jid = j.job_id
        t, duty, rate, held, crit, copies, complete = state[jid]
        lost = bypass[jid] + evict[jid]
        caused = 0.0
        if esa:
            mine = duty * rate * (1 - lost)
            for lv, per_s in suffered_at.items():
                if lv < level[jid] and claims_above[lv] > 0:
                    caused += per_s * mine / claims_above[lv]
        out[jid] = CommRate(
            t,
            bypass[jid],
            evict[jid],
            caused,
            duty,
            held - complete,
            complete,
            0.0,
            wait[jid],
            duty * crit,
            duty * copies,
        )
    return out
