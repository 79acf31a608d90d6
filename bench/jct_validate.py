"""Validation of ``--sim`` against ``--emu`` on one small workload.

    python -m bench.jct_validate --emu-out DIR [--repeats DIR2 ...] [--probe-bytes 65536]
                                 [--repeat 2] [--concurrency C] [--rates FILE] [--skew]
                                 [--calibrate CDIR ...] [--out VDIR]

`DIR` is the output folder of an ``inasched bench jct ... --emu`` run (it holds the scaled
``workload.csv`` and ``summary.json``); `--repeats` names more runs of the same workload,
whose average JCTs are averaged with DIR's (the loopback's run-to-run spread is 5-15% per
policy on 2 cores, as large as the differences between the policies). This module

1. measures the loopback, on the same machine, with the same service, soft switch, PS and
   worker processes as the emulation (`bench.jct_emu`), using probe jobs only (never the
   validated workload): `c` probe jobs of 2 workers (``--concurrency``, default
   `PROBE_JOBS`) that compute for ``--probe-compute`` seconds per iteration (default
   ``workload``: the validated workload's mean, so that the probes load the 2 cores as its
   jobs do; 0: no compute), submitted together (staggered when they compute), run for `K1`
   and `K2` iterations. The difference of the two JCTs divided by ``K2 - K1`` is the
   per-iteration time, free of the per-job fixed cost (service round trips, join), which is
   the rest. Under ``static`` every fragment is aggregated in the switch; under ``esa`` too,
   and its complete sum is copied to the PS; under ``atp`` every fragment's result comes
   from the PS; a one-fragment static probe gives what an iteration costs besides its
   fragments (the worker's blocking progress report); one static probe alone whether a lone
   job is held back by its link, and the fixed cost of a job that joins alone.
2. fits the simulator's parameters to those probes, by bisection on the simulator itself (so
   the fit uses exactly its model of a fragment's path): ``job_setup_s`` is the lone probe's
   fixed cost (`_setup_s`: joins submitted together queue at the service),
   ``iteration_overhead_s`` the one-fragment probe's time less the simulator's own compute
   and allreduce of one fragment, ``switch_pps`` the packet rate that gives the static
   probes their measured time (``link_gbps`` the lone one's), ``ps_switch_cost`` what a
   packet the PS receives costs the shared CPU, from the esa probe, and ``ps_gbps`` the atp
   probe's (1000 when the shared CPU already explains it); ``ps_processes=1`` (the service
   embeds one PS process), and the emulation's pool, window and lanes. The fit alternates
   until the rates settle.
   With ``--calibrate CDIR ...`` (--emu runs of another workload, say the same one with
   another ``--seed``), ``switch_pps`` and ``ps_switch_cost`` are then refitted to the
   calibration runs' average JCTs (`calibrate`): probes that run the whole time together do
   not show what jobs that arrive, queue and leave cost each other (fitted to probes alone,
   the simulator ran 13-27% fast on the 2026-12-03 runs). The validated workload's own JCTs
   are never fitted to; calibrating on its own runs is refused.
3. runs ``bench.jct --sim`` on ``DIR/workload.csv`` with those parameters into ``DIR/sim``
   and compares each policy's average JCT: gap = (sim - emu) / emu in %, and whether the
   policies rank the same. ``DIR/validation.json`` and ``DIR/validation.md`` hold the result
   (``passed``: every gap within 15% and the same ranking); the same section is appended to
   ``DIR/report.md``. The exit status is 0 when it passed, 1 when it did not. With
   ``--out VDIR`` the rates, ``sim`` and the validation files go to VDIR instead and DIR is
   left as it is, so that fits (say, probes of 2 and of 4 jobs) can be kept side by side.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.jct_emu import EMU_AGGREGATORS, EMU_WINDOW
from bench.jct_params import BenchParams
from scheduler.memory import COPIES_PER_SLOT, partition_slots
from scheduler.registry import make_policy, policy_names
from scheduler.workload import JobSpec

__all__ = ["compare", "main", "measure_rates", "probe_jobs", "sim_rate_for"]

PROBE_WORKERS = 2
# As many probe jobs as the emulation's static partitions hold (256 aggregators, 64 per
# window of 32): the most jobs static runs at once, so no probe queues, and about as many as
# the emulated workload has in the system (about 5). The probes compute like its jobs
# (`PROBE_COMPUTE`), so they load the 2 cores as it does. Two probes that only communicated
# (the fit until 2026-12-03) ranked esa first where the loopback ranks static first: they
# measure the shared policies' CPU cost per fragment at a load far below the workload's.
PROBE_JOBS = EMU_AGGREGATORS // (COPIES_PER_SLOT * partition_slots(EMU_WINDOW))
PROBE_COMPUTE = "workload"
# The model a probe with compute time runs as (``--probe-compute``): any row of the model table
# does, since the worker scales its compute time and gradient to the probe's.
PROBE_MODEL = "ResNet-50"
FRAGMENT_BYTES = 256  # 64 lanes of 4 B: the emulation's fragment payload
K1, K2 = 2, 22
TOLERANCE = 0.15  # the target: --sim within 15% of --emu per policy
MARKER = "\n## Validation: --sim against --emu\n"


def probe_jobs(
    grad_bytes: int, iterations: int, concurrent: int, compute_s: float = 0.0
) -> list[JobSpec]:
    """`concurrent` probe jobs of `PROBE_WORKERS` workers. Without compute they all arrive at
    0; with `compute_s` per iteration (a `PROBE_MODEL` job, so that the emulated worker
    sleeps that long) they arrive ``compute_s / concurrent`` apart, so that they do not
    compute and communicate in lockstep."""
    compute_s = max(0.0, compute_s)
    model = PROBE_MODEL if compute_s else "probe"
    gap = compute_s / concurrent
    return [
        JobSpec(i, i * gap, PROBE_WORKERS, model, grad_bytes, compute_s, iterations)
        for i in range(concurrent)
    ]


def _probe_jct(
    policy: str, grad_bytes: int, iterations: int, concurrent: int, compute_s: float = 0.0
) -> float:
    """Mean JCT (s) of `concurrent` identical probe jobs submitted to the emulation."""
    from bench.jct_emu import emu_runner

    jobs = probe_jobs(grad_bytes, iterations, concurrent, compute_s)
    run = emu_runner()(jobs, policy, BenchParams())
    if len(run.jobs) != concurrent:
        raise RuntimeError(f"the {policy} probe of {iterations} iterations did not finish")
    return statistics.fmean(j.jct_s for j in run.jobs)


def _per_iteration(
    policy: str, grad_bytes: int, repeat: int, concurrent: int, compute_s: float = 0.0
) -> dict[str, Any]:
    """Per-iteration time and fixed cost per job of `concurrent` probes under `policy`."""
    per_iter, fixed, raw = [], [], []
    for _ in range(repeat):
        short = _probe_jct(policy, grad_bytes, K1, concurrent, compute_s)
        long = _probe_jct(policy, grad_bytes, K2, concurrent, compute_s)
        raw.append([short, long])
        step = (long - short) / (K2 - K1)
        per_iter.append(step)
        fixed.append(short - K1 * step)
    return {
        "per_iteration_s": statistics.median(per_iter),
        "fixed_s": statistics.median(fixed),
        "jct_s": raw,
        "iterations": [K1, K2],
        "fragments_per_s_per_worker": math.ceil(grad_bytes / FRAGMENT_BYTES)
        / statistics.median(per_iter),
    }


def measure_rates(
    grad_bytes: int, repeat: int, concurrent: int, compute_s: float = 0.0
) -> dict[str, Any]:
    """Per-iteration allreduce time (s) and fixed cost per job (s) of `concurrent` probe jobs
    sharing the loopback, per policy; of a one-fragment probe (``overhead``: what an
    iteration costs besides its gradient's fragments); and of one static probe alone
    (``static_alone``: whether a lone job is held back by more than its share of the switch)."""
    out: dict[str, Any] = {
        "probe_bytes": grad_bytes,
        "probe_workers": PROBE_WORKERS,
        "probe_jobs": concurrent,
        "probe_compute_s": compute_s,
    }
    for policy in policy_names():
        out[policy] = _per_iteration(policy, grad_bytes, repeat, concurrent, compute_s)
    out["overhead"] = _per_iteration("static", FRAGMENT_BYTES, repeat, concurrent, compute_s)
    if concurrent > 1:
        out["static_alone"] = _per_iteration("static", grad_bytes, repeat, 1, compute_s)
    return out


def measure_occupancy(grad_bytes: int, concurrent: int) -> dict[str, Any]:
    """Mean share of the pool held by partial aggregators (state 1) while `concurrent` esa probe
    jobs run together, sampled from GET /switch: how long an aggregator waits for the last
    worker's contribution on this loopback (the simulator's ``worker_skew_s``)."""
    import bench.jct_emu as emu

    jobs = probe_jobs(grad_bytes, K2, concurrent)
    # esa's utilisation counts partial aggregators only (emu.occupancy_states).
    run = emu.emu_runner()(jobs, "esa", BenchParams())
    first_start = min(j.start_s for j in run.jobs)
    first_end = min(j.finish_s for j in run.jobs)
    samples = [v for t, v in run.utilisation if first_start <= t <= first_end]
    return {
        "live_share": statistics.fmean(samples) if samples else 0.0,
        "samples": len(samples),
        "probe_jobs": concurrent,
        "probe_bytes": grad_bytes,
    }


def sim_config_for(policy: str, params: BenchParams, skew_s: float | None) -> Any:
    from dataclasses import replace

    from bench.jct_sim import sim_config

    cfg = sim_config(policy, params)
    return cfg if skew_s is None else replace(cfg, worker_skew_s=skew_s)


def skewed_runner(skew_s: float | None) -> Any:
    """A `PolicyRunner` for the simulator with ``worker_skew_s`` set to `skew_s`."""
    from bench.jct_sim import to_policy_run
    from scheduler.simulator import simulate

    def run(jobs: Any, policy: str, params: BenchParams) -> Any:
        return to_policy_run(policy, jobs, simulate(jobs, sim_config_for(policy, params, skew_s)))

    return run


def _sim_live_share(grad_bytes: int, params: BenchParams, concurrent: int, skew: float) -> float:
    from scheduler.simulator import simulate

    jobs = probe_jobs(grad_bytes, K2, concurrent)
    result = simulate(jobs, sim_config_for("esa", params, skew))
    return float(result.mean_utilisation()["live"])


def sim_skew_for(target: float, grad_bytes: int, params: BenchParams, concurrent: int) -> float:
    """The ``worker_skew_s`` at which the simulated esa probe holds `target` of the pool in
    partial aggregators (bisection on a log scale)."""
    lo, hi = 1e-7, 10.0
    if _sim_live_share(grad_bytes, params, concurrent, lo) >= target:
        return lo
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        if _sim_live_share(grad_bytes, params, concurrent, mid) < target:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1.001:
            break
    return math.sqrt(lo * hi)


def _sim_per_iteration(
    policy: str,
    grad_bytes: int,
    params: BenchParams,
    concurrent: int,
    skew: float | None = None,
    compute_s: float = 0.0,
) -> float:
    run_policy = skewed_runner(skew)

    def jct(k: int) -> float:
        run = run_policy(probe_jobs(grad_bytes, k, concurrent, compute_s), policy, params)
        return statistics.fmean(j.jct_s for j in run.jobs)

    return (jct(K2) - jct(K1)) / (K2 - K1)


def sim_rate_for(
    field: str,
    policy: str,
    target_s: float,
    grad_bytes: int,
    params: BenchParams,
    concurrent: int = 1,
    skew: float | None = None,
    bracket: tuple[float, float] = (1e-7, 1e3),
    slower_with_more: bool = False,
    compute_s: float = 0.0,
) -> float:
    """The value of `field` at which the simulator's per-iteration time of the probe under
    `policy` is `target_s` (bisection on a log scale within `bracket`; the result is an end of
    it when the target lies beyond). `field` is a rate (link_gbps, ps_gbps, switch_pps: more
    is faster) or, with `slower_with_more`, a cost (ps_switch_cost)."""

    def time_of(value: float) -> float:
        trial = params.with_value(field, repr(value))
        return _sim_per_iteration(policy, grad_bytes, trial, concurrent, skew, compute_s)

    return _bisect(time_of, target_s, bracket, slower_with_more)


def _bisect(
    time_of: Callable[[float], float],
    target_s: float,
    bracket: tuple[float, float],
    slower_with_more: bool,
) -> float:
    """The value within `bracket` at which `time_of` is `target_s` (bisection on a log scale;
    an end of the bracket when the target lies beyond it)."""
    lo, hi = bracket
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        if (time_of(mid) > target_s) != slower_with_more:
            lo = mid  # too slow and more is faster, or too fast and more is slower
        else:
            hi = mid
        if hi / lo < 1.0001:
            break
    return math.sqrt(lo * hi)


def _fit_overhead(
    tiny_s: float, params: BenchParams, concurrent: int, compute_s: float = 0.0
) -> float:
    """``iteration_overhead_s`` at which the simulated one-fragment probe takes `tiny_s` per
    iteration: the measured time less the simulator's own compute and allreduce of one
    fragment."""
    bare = params.with_value("iteration_overhead_s", "0")
    comm = _sim_per_iteration("static", FRAGMENT_BYTES, bare, concurrent, compute_s=compute_s)
    return max(0.0, tiny_s - comm)


def _setup_s(rates: dict[str, Any]) -> float:
    """``job_setup_s``: the fixed cost per job of the lone probe when there is one. The probes
    run together are submitted within a fraction of a second, so their joins (REST, the
    switch's tables and groups over P4Runtime) queue behind each other at the service; the
    workload's jobs arrive `bench.jct_emu.ARRIVAL_GAP_S` apart and join one at a time. (Two
    joins together cost 0.74-0.81 s, four 1.1-1.2 s, one alone 0.34-0.36 s.)"""
    if "static_alone" in rates:
        return float(rates["static_alone"]["fixed_s"])
    return statistics.fmean([rates["static"]["fixed_s"], rates["atp"]["fixed_s"]])


def matched_params(rates: dict[str, Any]) -> tuple[BenchParams, float | None, dict[str, Any]]:
    """Simulator parameters that reproduce the probes (module docstring, step 2). Each moves
    the others a little, so the fit alternates until the rates settle (at most 6 rounds)."""
    grad = int(rates["probe_bytes"])
    c = int(rates.get("probe_jobs", 1))
    cs = float(rates.get("probe_compute_s", 0.0))
    setup = _setup_s(rates)
    base = BenchParams(
        aggregators=EMU_AGGREGATORS,
        window=EMU_WINDOW,
        lanes=64,
        ps_processes="1",
        job_setup_s=max(0.0, setup),
        ps_switch_cost=1.0,
    )
    atp_t = rates["atp"]["per_iteration_s"]
    static_t = rates["static"]["per_iteration_s"]
    esa_t = rates["esa"]["per_iteration_s"] if "esa" in rates else None
    tiny_t = rates["overhead"]["per_iteration_s"] if "overhead" in rates else None
    alone_t = rates["static_alone"]["per_iteration_s"] if "static_alone" in rates else None
    shared = alone_t is not None  # the switch's packet rate is measured by jobs sharing it
    if shared:
        base = base.with_value("link_gbps", "1000")
    occupancy = rates.get("occupancy")
    skew: float | None = None
    previous: tuple[float, ...] = ()
    rounds = 0
    while rounds < 6:
        rounds += 1
        if tiny_t is not None:
            overhead = _fit_overhead(tiny_t, base, c, cs)
            base = base.with_value("iteration_overhead_s", repr(overhead))
        if shared:
            assert alone_t is not None
            pps = sim_rate_for(
                "switch_pps", "static", static_t, grad, base, c, skew, (1, 1e9), compute_s=cs
            )
            base = base.with_value("switch_pps", repr(pps))
            link = sim_rate_for("link_gbps", "static", alone_t, grad, base, 1, skew, compute_s=cs)
        else:
            link = sim_rate_for("link_gbps", "static", static_t, grad, base, c, skew, compute_s=cs)
        base = base.with_value("link_gbps", repr(link))
        if esa_t is not None:
            # What esa's probe adds to static's is mostly each fragment's copy to the PS, off
            # the critical path: it costs the shared CPU only, so the PS is made fast here.
            fast = base.with_value("ps_gbps", "1000")
            cost = sim_rate_for(
                "ps_switch_cost", "esa", esa_t, grad, fast, c, skew, (1e-3, 20.0),
                slower_with_more=True, compute_s=cs,
            )  # fmt: skip
            base = base.with_value("ps_switch_cost", repr(cost))
        fast_ps = base.with_value("ps_gbps", "1000")
        if atp_t <= _sim_per_iteration("atp", grad, fast_ps, c, skew, cs):
            ps = 1000.0  # the PS is not slower than the switch path: it does not bind
        else:
            ps = sim_rate_for("ps_gbps", "atp", atp_t, grad, base, c, skew, compute_s=cs)
        base = base.with_value("ps_gbps", repr(ps))
        if occupancy:
            skew = sim_skew_for(float(occupancy["live_share"]), grad, base, c)
        now = (
            base.link_gbps,
            base.ps_gbps,
            base.switch_pps,
            base.iteration_overhead_s,
            base.ps_switch_cost,
        )
        if previous and all(
            math.isclose(x, y, rel_tol=1e-3, abs_tol=1e-9)
            for x, y in zip(now, previous, strict=True)
        ):
            break
        previous = now
    # What the fitted simulator gives each probe: the fit has as many rates as probes, but a
    # rate at an end of its range (ps_gbps 1000: the PS does not bind) leaves a residual.
    refit = {name: _sim_per_iteration(name, grad, base, c, skew, cs) for name in policy_names()}
    refit |= {
        "overhead": _sim_per_iteration("static", FRAGMENT_BYTES, base, c, skew, cs),
        "static_alone": _sim_per_iteration("static", grad, base, 1, skew, cs),
    }
    derived = {
        "link_gbps": base.link_gbps,
        "ps_gbps": base.ps_gbps,
        "ps_processes": "1",
        "aggregators": EMU_AGGREGATORS,
        "window": EMU_WINDOW,
        "lanes": 64,
        "job_setup_s": base.job_setup_s,
        "iteration_overhead_s": base.iteration_overhead_s,
        "switch_pps": base.switch_pps,
        "ps_switch_cost": base.ps_switch_cost,
        "worker_skew_s": skew,
        "static_per_iteration_s": static_t,
        "atp_per_iteration_s": atp_t,
        "esa_per_iteration_s": esa_t,
        "one_fragment_per_iteration_s": tiny_t,
        "static_alone_per_iteration_s": alone_t,
        "fit_rounds": rounds,
        "sim_probe_per_iteration_s": refit,
    }
    return base, skew, derived


# The rates a calibration refits (`calibrate`), and the brackets it searches them in.
CALIBRATED = ("switch_pps", "ps_switch_cost")
PPS_BRACKET = (1.0, 1e9)
COST_BRACKET = (1e-3, 50.0)
# The policies whose packets the PS costs the switch's CPU: those that send some to a PS.
SHARED = tuple(name for name in policy_names() if make_policy(name).shared)


def sim_avg_jct(jobs: Sequence[JobSpec], policy: str, params: BenchParams) -> float:
    """The simulator's average JCT (s) of `jobs` under `policy`."""
    run = skewed_runner(None)(list(jobs), policy, params)
    if len(run.jobs) != len(jobs):
        raise RuntimeError(f"the simulated {policy} run finished {len(run.jobs)} of {len(jobs)}")
    return statistics.fmean(j.jct_s for j in run.jobs)


def calibrate(
    params: BenchParams, jobs: Sequence[JobSpec], emu_avg_jct: dict[str, float]
) -> tuple[BenchParams, dict[str, Any]]:
    """Refit the switch's shared rates on a calibration workload (`jobs`, not the validated
    one) whose --emu average JCTs per policy are `emu_avg_jct`. The probes fix what one job
    costs (``job_setup_s``, ``iteration_overhead_s``, ``link_gbps``); the calibration what jobs
    cost each other when they arrive, queue and leave as a workload's do, which probes running
    the whole time together do not show:

    - ``switch_pps`` so that the simulator's static average JCT is the emulation's (static's
      packets never reach the PS, so nothing else moves it);
    - then ``ps_switch_cost``, one rate for two policies: the value that minimises the sum of
      squared log-ratios sim/emu of atp's and esa's average JCTs (golden-section search on a
      log scale; with one of them, the exact fit).

    Everything else is kept as `params` has it (``ps_gbps`` too, as the probes fitted it)."""
    if "static" in emu_avg_jct:

        def static_jct(pps: float) -> float:
            return sim_avg_jct(jobs, "static", params.with_value("switch_pps", repr(pps)))

        pps = _bisect(static_jct, emu_avg_jct["static"], PPS_BRACKET, slower_with_more=False)
        params = params.with_value("switch_pps", repr(pps))
    shared = [name for name in SHARED if name in emu_avg_jct]
    if shared:

        def misfit(log_cost: float) -> float:
            trial = params.with_value("ps_switch_cost", repr(math.exp(log_cost)))
            return sum(
                math.log(sim_avg_jct(jobs, name, trial) / emu_avg_jct[name]) ** 2 for name in shared
            )

        lo, hi = (math.log(x) for x in COST_BRACKET)
        cost = math.exp(_golden_min(misfit, lo, hi, tol=1e-3))
        params = params.with_value("ps_switch_cost", repr(cost))
    fitted = {name: sim_avg_jct(jobs, name, params) for name in emu_avg_jct}
    return params, {
        "emu_avg_jct": dict(emu_avg_jct),
        "sim_avg_jct": fitted,
        "parameters": {field: getattr(params, field) for field in CALIBRATED},
    }


def _golden_min(f: Callable[[float], float], lo: float, hi: float, tol: float) -> float:
    """A minimum of `f` on [lo, hi] by golden-section search (to `tol`; f unimodal there)."""
    ratio = (math.sqrt(5) - 1) / 2
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = f(a), f(b)
    while hi - lo > tol:
        if fa <= fb:
            hi, b, fb = b, a, fa
            a = hi - ratio * (hi - lo)
            fa = f(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = f(b)
    return (lo + hi) / 2


def _sets(params: BenchParams) -> list[str]:
    out = []
    for name in (
        "aggregators",
        "window",
        "lanes",
        "link_gbps",
        "ps_gbps",
        "ps_processes",
        "job_setup_s",
        "iteration_overhead_s",
        "switch_pps",
        "ps_switch_cost",
    ):
        out += ["--set", f"{name}={getattr(params, name)}"]
    return out


def mean_summary(folders: list[Path]) -> dict[str, Any]:
    """The summaries of --emu runs of one workload, each policy's average JCT averaged over
    the runs (``runs``: each run's; ``spread_pct``: (max - min) / mean, the emulation's own
    run-to-run noise). Raises ValueError when the runs' workloads differ."""
    first = (folders[0] / "workload.csv").read_text()
    for folder in folders[1:]:
        if (folder / "workload.csv").read_text() != first:
            raise ValueError(f"{folder} ran another workload than {folders[0]}")
    runs = [json.loads((f / "summary.json").read_text()) for f in folders]
    policies: dict[str, Any] = {}
    for name in runs[0]["policies"]:
        values = [float(r["policies"][name]["avg_jct"]) for r in runs]
        mean = statistics.fmean(values)
        policies[name] = {
            "avg_jct": mean,
            "runs": values,
            "spread_pct": 100 * (max(values) - min(values)) / mean,
        }
    return {"policies": policies, "folders": [str(f) for f in folders]}


def compare(emu: dict[str, Any], sim: dict[str, Any]) -> dict[str, Any]:
    """Per-policy average JCTs, gaps (%) and whether the rankings agree."""
    rows = {}
    for name, e in emu["policies"].items():
        s = sim["policies"].get(name)
        if s is None or e.get("avg_jct") is None or s.get("avg_jct") is None:
            continue
        ea, sa = float(e["avg_jct"]), float(s["avg_jct"])
        rows[name] = {"emu_avg_jct": ea, "sim_avg_jct": sa, "gap_pct": 100 * (sa - ea) / ea}
        if "runs" in e:
            rows[name]["emu_runs"] = e["runs"]
            rows[name]["emu_spread_pct"] = e["spread_pct"]
    emu_rank = sorted(rows, key=lambda n: rows[n]["emu_avg_jct"])
    sim_rank = sorted(rows, key=lambda n: rows[n]["sim_avg_jct"])
    worst = max((abs(r["gap_pct"]) for r in rows.values()), default=None)
    return {
        "policies": rows,
        "pairs": _pairs(rows, emu_rank),
        "emu_ranking": emu_rank,
        "sim_ranking": sim_rank,
        "ranking_agrees": emu_rank == sim_rank,
        "max_abs_gap_pct": worst,
        "within_tolerance": worst is not None and worst <= 100 * TOLERANCE,
        "passed": worst is not None and worst <= 100 * TOLERANCE and emu_rank == sim_rank,
    }


def _pairs(rows: dict[str, Any], emu_rank: list[str]) -> list[dict[str, Any]]:
    """Each pair of policies in the emulation's mean order: in how many of the runs the
    emulation ordered them that way too (each run ran every policy, one after the other, so
    the runs pair up), and whether the simulator does."""
    out = []
    for i, first in enumerate(emu_rank):
        for second in emu_rank[i + 1 :]:
            a = rows[first].get("emu_runs", [rows[first]["emu_avg_jct"]])
            b = rows[second].get("emu_runs", [rows[second]["emu_avg_jct"]])
            out.append(
                {
                    "faster": first,
                    "slower": second,
                    "emu_runs_agreeing": sum(x < y for x, y in zip(a, b, strict=True)),
                    "emu_runs": len(a),
                    "sim_agrees": rows[first]["sim_avg_jct"] < rows[second]["sim_avg_jct"],
                }
            )
    return out


def _table(title: str, result: dict[str, Any]) -> list[str]:
    lines = [
        title,
        "",
        "| policy | emu avg JCT (s) | emu runs (s) | run-to-run spread | sim avg JCT (s) | "
        "gap (sim-emu)/emu |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in result["policies"].items():
        runs = ", ".join(f"{x:.2f}" for x in r.get("emu_runs", [r["emu_avg_jct"]]))
        lines.append(
            f"| {name} | {r['emu_avg_jct']:.2f} | {runs} | {r.get('emu_spread_pct', 0.0):.1f}% "
            f"| {r['sim_avg_jct']:.2f} | {r['gap_pct']:+.1f}% |"
        )
    gap = result["max_abs_gap_pct"]
    within = "within" if result["within_tolerance"] else "NOT within"
    lines += [
        "",
        f"Largest gap: {gap:.1f}% ({within} the 15% target). Ranking, fastest first: emu "
        f"{', '.join(result['emu_ranking'])}; sim {', '.join(result['sim_ranking'])} "
        f"({'agrees' if result['ranking_agrees'] else 'DISAGREES'}). Validation "
        f"{'PASSED' if result['passed'] else 'FAILED'}.",
        "",
    ]
    pairs = result.get("pairs", [])
    if pairs and pairs[0]["emu_runs"] > 1:
        lines += [
            "Pair by pair (emu mean order; the runs pair up, each ran every policy):",
            "",
            *(
                f"- {p['faster']} before {p['slower']}: in {p['emu_runs_agreeing']} of "
                f"{p['emu_runs']} emu runs; sim {'agrees' if p['sim_agrees'] else 'disagrees'}."
                for p in pairs
            ),
            "",
        ]
    return lines


def _path(policy: str) -> str:
    """Where a probe of `policy` sends its fragments, from the policy's traits."""
    traits = make_policy(policy)
    if not traits.shared:
        return "switch path"
    return "switch, a copy to the PS" if traits.early_release else "switch + PS"


def _markdown(result: dict[str, Any], rates: dict[str, Any], derived: dict[str, Any]) -> str:
    compute_s = float(rates.get("probe_compute_s", 0.0))
    compute = (
        f"each computing {compute_s:.3f} s per iteration, arrivals staggered"
        if compute_s > 0
        else "no compute"
    )
    lines = [
        MARKER.strip("\n"),
        "",
        "The same workload.csv through --sim, with the simulator's parameters fitted to probe "
        f"jobs run on this loopback (bench.jct_validate: {rates.get('probe_jobs', 1)} probe "
        f"jobs of 2 workers submitted together, and one alone; {compute}; a "
        f"{rates['probe_bytes']} B gradient, and a one-fragment one for the per-iteration "
        f"overhead; {K1} and {K2} iterations, the per-iteration time from the difference, the "
        "per-job fixed cost from the rest). The probes are not the validated workload: "
        "nothing is fitted to its JCTs.",
        "",
        "| probe | per-iteration time (s) | fixed cost per job (s) | fitted --sim (s) |",
        "|---|---|---|---|",
    ]
    together = rates.get("probe_jobs", 1)
    probes = (
        *((name, f"{name}, {together} jobs ({_path(name)})") for name in policy_names()),
        ("overhead", f"static, {together} jobs, one fragment"),
        ("static_alone", "static, 1 job"),
    )
    for key, label in probes:
        if key in rates:
            r = rates[key]
            fitted = derived.get("sim_probe_per_iteration_s", {}).get(key)
            sim = f"{fitted:.4f}" if fitted is not None else "-"
            lines.append(f"| {label} | {r['per_iteration_s']:.4f} | {r['fixed_s']:.3f} | {sim} |")
    link = derived["link_gbps"]
    lines += [
        "",
        f"Fitted simulator parameters ({derived['fit_rounds']} rounds): "
        f"switch_pps={derived['switch_pps']:.6g}, link_gbps={link:.6g}"
        + (" (a lone job is not held back by its link)" if link > 999 else "")
        + f", ps_gbps={derived['ps_gbps']:.6g}, job_setup_s={derived['job_setup_s']:.4g}, "
        f"iteration_overhead_s={derived['iteration_overhead_s']:.4g}, ps_processes=1, "
        f"ps_switch_cost={derived['ps_switch_cost']:.4g}, "
        f"aggregators={derived['aggregators']}, window={derived['window']}, lanes=64. "
        "Command: `" + result["sim_command"] + "`.",
        "",
    ]
    calibration = result.get("calibration")
    if calibration is not None:
        lines += _calibration_lines(calibration)
    lines += _table("Simulator defaults for latency and worker skew (scheduler.config).", result)
    skewed = result.get("with_measured_skew")
    if skewed is not None:
        share = rates["occupancy"]["live_share"]
        lines += _table(
            f"With worker_skew_s = {derived['worker_skew_s']:.4g} s: the skew at which the "
            f"simulated esa probe holds the share of the pool in partial aggregators measured "
            f"on the loopback ({share:.3f}, GET /switch, state 1).",
            skewed,
        )
    return "\n".join(lines)


def _calibration_lines(calibration: dict[str, Any]) -> list[str]:
    """The calibration's part of the validation section: what was refitted, to what."""
    before, after = calibration["probe_parameters"], calibration["parameters"]
    moved = ", ".join(f"{f} {before[f]:.4g} -> {after[f]:.4g}" for f in after)
    folders = ", ".join(f"`{f}`" for f in calibration["folders"])
    lines = [
        f"Calibrated on {len(calibration['folders'])} --emu runs of another workload "
        f"({folders}): switch_pps refitted to its static average JCT, ps_switch_cost to its "
        f"atp and esa ones (least squares of the log-ratios): {moved}. The probes keep what "
        "one job costs; nothing is fitted to the validated workload's JCTs.",
        "",
        "| policy | calibration emu avg JCT (s) | emu runs (s) | fitted sim avg JCT (s) |",
        "|---|---|---|---|",
    ]
    for name, emu in calibration["emu_avg_jct"].items():
        runs = ", ".join(f"{x:.2f}" for x in calibration["emu_runs"][name])
        sim = calibration["sim_avg_jct"][name]
        lines.append(f"| {name} | {emu:.2f} | {runs} | {sim:.2f} |")
    return [*lines, ""]


def _probe_compute(value: str, workload_csv: Path) -> float:
    """``--probe-compute``: seconds, or ``workload`` for the mean ``iter_time_s`` of its jobs."""
    from scheduler.workload import read_workload

    if value == "workload":
        return statistics.fmean(j.iter_time_s for j in read_workload(workload_csv))
    try:
        seconds = float(value)
    except ValueError:
        raise SystemExit(f"--probe-compute: seconds or 'workload', got {value!r}") from None
    if not seconds >= 0:
        raise SystemExit(f"--probe-compute must be at least 0, got {value}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.jct_validate", description=__doc__)
    p.add_argument("--emu-out", required=True, type=Path, help="output folder of an --emu run")
    p.add_argument("--probe-bytes", type=int, default=65536)
    p.add_argument("--repeat", type=int, default=2, help="probe pairs per policy (median)")
    p.add_argument(
        "--repeats",
        nargs="*",
        type=Path,
        default=[],
        help="more --emu runs of the same workload.csv; the average JCTs of all are compared",
    )
    p.add_argument("--rates", type=Path, help="reuse a rates JSON instead of measuring")
    p.add_argument(
        "--probe-compute",
        default=PROBE_COMPUTE,
        help="compute seconds per probe iteration, or 'workload' (the default) for the mean of "
        "the validated workload's; 0: probes only communicate",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=PROBE_JOBS,
        help="probe jobs run together (they share the switch and the PS)",
    )
    p.add_argument(
        "--skew",
        action="store_true",
        help="also measure how long aggregators stay partial, and rerun with that worker skew",
    )
    p.add_argument(
        "--calibrate",
        nargs="+",
        type=Path,
        default=[],
        metavar="DIR",
        help="--emu runs of another workload (say, the same one with another --seed): the "
        "shared rates (switch_pps, ps_switch_cost) are refitted to their average JCTs before "
        "the validated workload is simulated",
    )
    p.add_argument(
        "--out",
        type=Path,
        help="folder for the validation, its sim runs and the rates (default: --emu-out, whose "
        "report.md then gets the validation section); to compare fits without overwriting",
    )
    args = p.parse_args(argv)
    runs: Path = args.emu_out
    out: Path = args.out or runs
    out.mkdir(parents=True, exist_ok=True)
    emu = mean_summary([runs, *args.repeats])
    if args.rates:
        rates = json.loads(args.rates.read_text())
    else:
        t = time.monotonic()
        c = args.concurrency
        compute_s = _probe_compute(args.probe_compute, runs / "workload.csv")
        rates = measure_rates(args.probe_bytes, args.repeat, c, compute_s)
        if args.skew:
            rates["occupancy"] = measure_occupancy(args.probe_bytes, c)
        rates["measured_in_s"] = time.monotonic() - t
        (out / "rates.json").write_text(json.dumps(rates, indent=2))
    params, skew, derived = matched_params(rates)
    from bench.jct import main as bench_main
    from bench.jct import run_bench
    from scheduler.workload import read_workload

    calibration = None
    if args.calibrate:
        cal = mean_summary(args.calibrate)
        cal_csv = args.calibrate[0] / "workload.csv"
        if cal_csv.read_text() == (runs / "workload.csv").read_text():
            raise SystemExit(
                "--calibrate: the calibration runs ran the validated workload itself; "
                "calibrate on another one (say, the same name with another --seed)"
            )
        means = {name: float(r["avg_jct"]) for name, r in cal["policies"].items()}
        params, calibration = calibrate(params, read_workload(cal_csv), means)
        calibration["folders"] = cal["folders"]
        calibration["emu_runs"] = {n: r["runs"] for n, r in cal["policies"].items()}
        calibration["probe_parameters"] = {f: derived[f] for f in CALIBRATED}
        derived.update(calibration["parameters"])

    policies = ",".join(emu["policies"])
    sim_argv = [
        "--workload", str(runs / "workload.csv"), "--policies", policies,
        "--out", str(out / "sim"), "--force", "--sim", "--quiet", *_sets(params),
    ]  # fmt: skip
    print("running: inasched bench jct " + " ".join(sim_argv), flush=True)
    bench_main(sim_argv)
    sim = json.loads((out / "sim" / "summary.json").read_text())
    result = compare(emu, sim)
    result["sim_command"] = "inasched bench jct " + " ".join(sim_argv)
    if skew is not None:
        # The same, with the simulator's worker_skew_s set to the measured hold time (not a
        # BenchParams field, so through run_bench with a runner of this module).
        folder = out / "sim-skew"
        folder.mkdir(parents=True, exist_ok=True)
        run_bench(
            read_workload(runs / "workload.csv"),
            list(emu["policies"]),
            params,
            skewed_runner(skew),
            out=folder,
            workload=str(runs / "workload.csv"),
            backend="sim",
            command=f"bench.jct_validate (sim, worker_skew_s={skew:.6g})",
        )
        skewed = json.loads((folder / "summary.json").read_text())
        result["with_measured_skew"] = compare(emu, skewed)
    result["rates"] = rates
    result["sim_parameters"] = derived
    if calibration is not None:
        result["calibration"] = calibration
    (out / "validation.json").write_text(json.dumps(result, indent=2))
    section = _markdown(result, rates, derived)
    (out / "validation.md").write_text(section)
    if out == runs:
        report = out / "report.md"
        text = report.read_text() if report.exists() else ""
        if MARKER in text:
            text = text[: text.index(MARKER)]
        report.write_text(text.rstrip("\n") + "\n" + section)
    print(section)
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
