"""The aggregate (fluid) model of allreduce under contention: closed form, no packets.

For the set of jobs holding switch memory it returns each job's mean allreduce time per
iteration and the shares of its fragments that bypass or are evicted. Assumptions (the
fragment-level model in `scheduler.fragsim` makes none of them; `scheduler.validate`
measures the difference):

- A worker streams its F = ceil(G / payload) fragments back to back, limited by its link
  (one fragment per `fragment_s`) and by its window (W in flight per RTT); the last worker
  starts `worker_skew_s` x (n-1)/(n+1) after the first on average, and the job waits for it.
- Jobs compute and communicate independently, so at a random instant job i communicates
  with probability d_i = t_comm / (t_compute + t_comm) (its duty cycle).
- Hashed placement is uniform: a fragment finds its aggregator held with probability equal
  to the share of the pool held by fragments it cannot take (``atp``: anyone's; ``esa``:
  jobs of equal or higher priority, its own included). An aggregator is held from its
  first to its last contribution (the skew); under ``atp`` also until the PS result comes
  back (one PS detour). Under ``esa`` a partial sum is evicted when a higher-priority claim
  lands on it during that time (Poisson claims).
- A bypassed or evicted fragment costs its PS ``n`` fragments of processing, and all of a
  job's PS work is serialized at `ps_bps`; its window slot waits one PS detour longer.
- ``static``: a private partition sized to the window, so nothing bypasses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.config import SimConfig

__all__ = ["CommRate", "FlowJob", "comm_rates"]

_ROUNDS = 30


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
    `reserved` is aggregators it owns for its whole run (a static partition).
    """

    t_comm_s: float
    bypass: float
    evict: float
    caused: float
    duty: float
    held: float
    held_complete: float
    reserved: float = 0.0


def _skew(cfg: SimConfig, workers: int) -> float:
    return cfg.worker_skew_s * (workers - 1) / (workers + 1)


def comm_rates(cfg: SimConfig, jobs: Sequence[FlowJob]) -> dict[int, CommRate]:
    """``{job_id: CommRate}`` for `jobs` contending under ``cfg.policy`` (see module doc)."""
    frags = {j.job_id: math.ceil(j.grad_bytes / cfg.payload_bytes) for j in jobs}
    if cfg.policy == "static":
        out = {}
        for j in jobs:
            t = frags[j.job_id] * max(cfg.fragment_s, cfg.rtt_s / cfg.window)
            t += cfg.rtt_s + _skew(cfg, j.workers)
            # The window's slots are live while streaming; the partition (both copies) is
            # reserved for the job's whole run.
            out[j.job_id] = CommRate(
                t, 0.0, 0.0, 0.0, t / (t + j.iter_time_s), cfg.window, 0.0, 2 * cfg.window
            )
        return out
    esa = cfg.policy == "esa"
    n_agg = cfg.pool.aggregators
    top = max((j.priority for j in jobs), default=0) + 2
    lost = {j.job_id: 0.0 for j in jobs}  # bypass + evict share
    bypass = dict(lost)
    evict = dict(lost)
    state: dict[int, tuple[float, float, float, float]] = {}  # t_comm, duty, rate, held
    claims_above = [0.0] * (top + 1)
    for _ in range(_ROUNDS):
        state = {}
        for j in jobs:
            q = lost[j.job_id]
            skew = _skew(cfg, j.workers)
            hold = skew + (0.0 if esa else cfg.ps_detour_s)
            rate = 1.0 / max(cfg.fragment_s, (cfg.rtt_s + q * cfg.ps_detour_s) / cfg.window)
            f = frags[j.job_id]
            t_stream = max(f / rate, q * f * j.workers * cfg.ps_fragment_s)
            t = t_stream + cfg.rtt_s + skew
            rate = f / t_stream
            state[j.job_id] = (t, t / (t + j.iter_time_s), rate, rate * (1 - q) * hold)
        # Time-averaged aggregators held, and claim rates, by priority level (atp: all at 0).
        held_at = [0.0] * top
        claims_at = [0.0] * top
        for j in jobs:
            _, duty, rate, held = state[j.job_id]
            level = j.priority if esa else 0
            held_at[level] += duty * held
            claims_at[level] += duty * rate * (1 - lost[j.job_id])
        held_ge = [0.0] * (top + 1)
        claims_above = [0.0] * (top + 1)
        above = 0.0
        for level in range(top - 1, -1, -1):
            held_ge[level] = held_ge[level + 1] + held_at[level]
            claims_above[level] = above
            above += claims_at[level]
        delta = 0.0
        for j in jobs:
            _, duty, _, held = state[j.job_id]
            level = j.priority if esa else 0
            blocked = held + held_ge[level] - duty * held
            b = min(0.95, blocked / n_agg)
            e = 0.0
            if esa:
                e = (1 - b) * (1 - math.exp(-claims_above[level] * _skew(cfg, j.workers) / n_agg))
            nb = 0.5 * bypass[j.job_id] + 0.5 * b
            ne = 0.5 * evict[j.job_id] + 0.5 * e
            delta = max(delta, abs(nb - bypass[j.job_id]) + abs(ne - evict[j.job_id]))
            bypass[j.job_id], evict[j.job_id] = nb, ne
        lost = {k: bypass[k] + evict[k] for k in lost}
        if delta < 1e-6:
            break
    return _finish(cfg, jobs, frags, state, bypass, evict, esa, claims_above)


def _finish(
    cfg: SimConfig,
    jobs: Sequence[FlowJob],
    frags: dict[int, int],
    state: dict[int, tuple[float, float, float, float]],
    bypass: dict[int, float],
    evict: dict[int, float],
    esa: bool,
    claims_above: list[float],
) -> dict[int, CommRate]:
    # Evictions a job suffers per second, shared among the higher jobs by their claim rates.
    suffered_at: dict[int, float] = {}
    for j in jobs:
        t, _, _, _ = state[j.job_id]
        per_s = evict[j.job_id] * frags[j.job_id] / (t + j.iter_time_s)
        suffered_at[j.priority] = suffered_at.get(j.priority, 0.0) + per_s
    out = {}
    for j in jobs:
        t, duty, rate, held = state[j.job_id]
        caused = 0.0
        if esa:
            mine = duty * rate * (1 - bypass[j.job_id] - evict[j.job_id])
            for level, per_s in suffered_at.items():
                if level < j.priority and claims_above[level] > 0:
                    caused += per_s * mine / claims_above[level]
        lost = bypass[j.job_id] + evict[j.job_id]
        complete = 0.0 if esa else rate * (1 - lost) * cfg.ps_detour_s
        out[j.job_id] = CommRate(t, bypass[j.job_id], evict[j.job_id], caused, duty, held, complete)
    return out
