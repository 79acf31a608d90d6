"""The ``--sim`` back-end: the scheduler's discrete-event simulator, one run per policy.

Each policy runs on the same jobs with the same `SimConfig` (`BenchParams.sim`) apart from
``policy``; the simulator's own defaults (link and switch latency, worker skew, loss, progress
step) are kept and reported with ``scheduler.config`` as their source.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from bench.jct.params import BenchParams
from bench.jct.results import JobOutcome, PolicyRun, PsLoad
from scheduler.config import RunResult, SimConfig
from scheduler.fluid import FlowJob, comm_rates
from scheduler.registry import make_policy
from scheduler.scheduler import too_wide
from scheduler.simulator import simulate
from scheduler.workload import JobSpec

__all__ = ["ideal_jct", "run_policy", "sim_config", "to_policy_run"]

# Points kept for the utilisation plot; the time average is computed from every sample.
_PLOT_POINTS = 4000


def sim_config(policy: str, params: BenchParams) -> SimConfig:
    """The simulator's configuration for `policy` under `params`."""
    return replace(params.sim, spec=replace(params.sim.spec, policy=policy))


def run_policy(jobs: Sequence[JobSpec], policy: str, params: BenchParams) -> PolicyRun:
    """Simulate `jobs` under `policy`; one `JobOutcome` per finished job."""
    result = simulate(jobs, sim_config(policy, params))
    return to_policy_run(policy, jobs, result)


def to_policy_run(policy: str, jobs: Sequence[JobSpec], result: RunResult) -> PolicyRun:
    specs = {j.job_id: j for j in jobs}
    rows = []
    for r in result.jobs:
        spec = specs[r.job_id]
        rows.append(
            JobOutcome(
                policy=policy,
                job_id=r.job_id,
                arrival_s=r.arrival_s,
                start_s=r.admitted_s,
                finish_s=r.finished_s,
                jct_s=r.jct_s,
                queue_s=r.queueing_s,
                compute_s=spec.iterations * spec.iter_time_s,
                workers=spec.workers,
                model=spec.model,
                grad_bytes=spec.grad_bytes,
                iterations=spec.iterations,
                bytes_switch=r.bytes_switch,
                bytes_ps=r.bytes_ps,
                preemptions_caused=round(r.preemptions_caused),
                preemptions_suffered=round(r.preemptions_suffered),
            )
        )
    busy = [(u.start_s, u.end_s, 1.0 - u.idle) for u in result.utilisation]
    span = sum(e - s for s, e, _ in busy)
    mean = sum((e - s) * v for s, e, v in busy) / span if span > 0 else 0.0
    return PolicyRun(
        policy,
        tuple(rows),
        _plot_points(busy),
        mean,
        result.unfinished,
        _ps_load(result),
        refused=result.refused,
    )


def _ps_load(result: RunResult) -> PsLoad:
    mean = result.mean_utilisation(("ps_critical", "ps_copies"))
    total = sum(u.end_s - u.start_s for u in result.utilisation)
    over = sum(u.end_s - u.start_s for u in result.utilisation if u.ps_copies > 1.0)
    return PsLoad(mean["ps_critical"], mean["ps_copies"], over / total if total > 0 else 0.0)


def _plot_points(busy: list[tuple[float, float, float]]) -> tuple[tuple[float, float], ...]:
    """At most `_PLOT_POINTS` ``(t, share)`` points: time-weighted means over equal bins."""
    if not busy:
        return ()
    t0, t1 = busy[0][0], busy[-1][1]
    if len(busy) <= _PLOT_POINTS or t1 <= t0:
        return tuple((s, v) for s, _, v in busy) + ((t1, busy[-1][2]),)
    width = (t1 - t0) / _PLOT_POINTS
    acc = [0.0] * _PLOT_POINTS
    for s, e, v in busy:
        while s < e:
            b = min(_PLOT_POINTS - 1, int((s - t0) / width))
            edge = min(e, t0 + (b + 1) * width)
            if edge <= s:  # float rounding at a bin edge
                edge = e
            acc[b] += (edge - s) * v
            s = edge
    return tuple((t0 + i * width, a / width) for i, a in enumerate(acc))


def ideal_jct(jobs: Sequence[JobSpec], params: BenchParams) -> dict[int, float]:
    """``{job_id: seconds}``: each job alone on the switch, every byte aggregated in it at line
    rate and no queueing. No memory policy can give a job a shorter JCT under this model, so
    ``baseline avg JCT / mean of these`` bounds any policy's speed-up over the baseline.
    A job the scheduler refuses under every policy (`too_wide`) has none."""
    cfg = sim_config("static", params)
    policy = make_policy(cfg.spec)
    out = {}
    for j in jobs:
        if too_wide(j.workers) is not None:
            continue
        alone = comm_rates(cfg, policy, [FlowJob(j.job_id, j.workers, j.grad_bytes, j.iter_time_s)])
        out[j.job_id] = j.iterations * (j.iter_time_s + alone[j.job_id].t_comm_s)
    return out
