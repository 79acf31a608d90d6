"""The simulator's parameters fitted to the probes (`bench.jct.validate.probe`).

By bisection on the simulator itself, so the fit uses exactly its model of a fragment's path:
``job_setup_s`` is the lone probe's fixed cost (`_setup_s`), ``iteration_overhead_s`` the
one-fragment probe's time less the simulator's own compute and allreduce of one fragment,
``switch_pps`` the packet rate that gives the static probes their measured time
(``link_gbps`` the lone one's), ``ps_switch_cost`` what a packet the PS receives costs the
shared CPU, from the esa probe, and ``ps_gbps`` the atp probe's (1000 when the shared CPU
already explains it); ``ps_processes=1`` and the emulation's pool, window and lanes.
`matched_params` returns ``(params, worker_skew_s or None, derived)``: the fitted
`BenchParams`, the skew fitted to the measured occupancy when there is one, and every fitted
value with the probes' measured and refitted per-iteration times.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.jct.emu import EMU_AGGREGATORS, EMU_WINDOW
from bench.jct.params import BenchParams
from bench.jct.validate.probe import FRAGMENT_BYTES, K1, K2, probe_jobs
from scheduler.config import SimConfig
from scheduler.registry import policy_names

__all__ = [
    "bisect_log",
    "matched_params",
    "sim_config_for",
    "sim_rate_for",
    "sim_skew_for",
    "skewed_runner",
]


def sim_config_for(policy: str, params: BenchParams, skew_s: float | None) -> Any:
    from dataclasses import replace

    from bench.jct.sim import sim_config

    cfg = sim_config(policy, params)
    return cfg if skew_s is None else replace(cfg, worker_skew_s=skew_s)


def skewed_runner(skew_s: float | None) -> Any:
    """A `PolicyRunner` for the simulator with ``worker_skew_s`` set to `skew_s`."""
    from bench.jct.sim import to_policy_run
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

    return bisect_log(time_of, target_s, bracket, slower_with_more)


def bisect_log(
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
    workload's jobs arrive `bench.jct.emu.ARRIVAL_GAP_S` apart and join one at a time. (Two
    joins together cost 0.74-0.81 s, four 1.1-1.2 s, one alone 0.34-0.36 s.)"""
    if "static_alone" in rates:
        return float(rates["static_alone"]["fixed_s"])
    return statistics.fmean([rates["static"]["fixed_s"], rates["atp"]["fixed_s"]])


@dataclass(frozen=True, slots=True)
class _Probes:
    """What the probes measured, as the fit reads it: gradient bytes, jobs run together,
    compute seconds per iteration, and each probe's seconds per iteration (None: not run);
    `live_share`: the measured occupancy's share of aggregators live, when measured."""

    grad: int
    concurrent: int
    compute_s: float
    static: float
    atp: float
    esa: float | None
    one_fragment: float | None
    static_alone: float | None
    live_share: float | None

    @classmethod
    def of(cls, rates: dict[str, Any]) -> _Probes:
        def per_iteration(name: str) -> float | None:
            return rates[name]["per_iteration_s"] if name in rates else None

        occupancy = rates.get("occupancy")
        return cls(
            grad=int(rates["probe_bytes"]),
            concurrent=int(rates.get("probe_jobs", 1)),
            compute_s=float(rates.get("probe_compute_s", 0.0)),
            static=rates["static"]["per_iteration_s"],
            atp=rates["atp"]["per_iteration_s"],
            esa=per_iteration("esa"),
            one_fragment=per_iteration("overhead"),
            static_alone=per_iteration("static_alone"),
            live_share=float(occupancy["live_share"]) if occupancy else None,
        )


def matched_params(rates: dict[str, Any]) -> tuple[BenchParams, float | None, dict[str, Any]]:
    """Simulator parameters that reproduce the probes (module docstring, step 2). Each moves
    the others a little, so the fit alternates until the rates settle (at most 6 rounds)."""
    probes = _Probes.of(rates)
    # Rates measured before the pool was recorded are the default configuration's.
    pool = int(rates.get("aggregators", EMU_AGGREGATORS))
    window = int(rates.get("window", EMU_WINDOW))
    base = BenchParams(
        aggregators=pool,
        lanes=64,
        ps_processes="1",
        sim=SimConfig(window=window, job_setup_s=max(0.0, _setup_s(rates)), ps_switch_cost=1.0),
    )
    if probes.static_alone is not None:  # the switch's packet rate is measured by jobs sharing it
        base = base.with_value("link_gbps", "1000")
    skew: float | None = None
    previous: tuple[float, ...] = ()
    rounds = 0
    while rounds < 6:
        rounds += 1
        base, skew = _fit_round(base, probes, skew)
        now = (
            base.link_gbps,
            base.ps_gbps,
            base.sim.switch_pps,
            base.sim.iteration_overhead_s,
            base.sim.ps_switch_cost,
        )
        if previous and all(
            math.isclose(x, y, rel_tol=1e-3, abs_tol=1e-9)
            for x, y in zip(now, previous, strict=True)
        ):
            break
        previous = now
    derived = {
        "link_gbps": base.link_gbps,
        "ps_gbps": base.ps_gbps,
        "ps_processes": "1",
        "aggregators": pool,
        "window": window,
        "lanes": 64,
        "job_setup_s": base.sim.job_setup_s,
        "iteration_overhead_s": base.sim.iteration_overhead_s,
        "switch_pps": base.sim.switch_pps,
        "ps_switch_cost": base.sim.ps_switch_cost,
        "worker_skew_s": skew,
        "static_per_iteration_s": probes.static,
        "atp_per_iteration_s": probes.atp,
        "esa_per_iteration_s": probes.esa,
        "one_fragment_per_iteration_s": probes.one_fragment,
        "static_alone_per_iteration_s": probes.static_alone,
        "fit_rounds": rounds,
        "sim_probe_per_iteration_s": _refit(base, probes, skew),
    }
    return base, skew, derived


def _fit_round(
    base: BenchParams, probes: _Probes, skew: float | None
) -> tuple[BenchParams, float | None]:
    """One round of the fit, each rate in turn from the others' current values: the
    iteration overhead, the switch's packet rate and the link, the PS packet's cost on the
    shared CPU, the PS's rate, and the worker skew."""
    grad, c, cs = probes.grad, probes.concurrent, probes.compute_s
    if probes.one_fragment is not None:
        overhead = _fit_overhead(probes.one_fragment, base, c, cs)
        base = base.with_value("iteration_overhead_s", repr(overhead))
    if probes.static_alone is not None:
        pps = sim_rate_for(
            "switch_pps", "static", probes.static, grad, base, c, skew, (1, 1e9), compute_s=cs
        )
        base = base.with_value("switch_pps", repr(pps))
        link = sim_rate_for(
            "link_gbps", "static", probes.static_alone, grad, base, 1, skew, compute_s=cs
        )
    else:
        link = sim_rate_for("link_gbps", "static", probes.static, grad, base, c, skew, compute_s=cs)
    base = base.with_value("link_gbps", repr(link))
    if probes.esa is not None:
        # What esa's probe adds to static's is mostly each fragment's copy to the PS, off
        # the critical path: it costs the shared CPU only, so the PS is made fast here.
        fast = base.with_value("ps_gbps", "1000")
        cost = sim_rate_for(
            "ps_switch_cost", "esa", probes.esa, grad, fast, c, skew, (1e-3, 20.0),
            slower_with_more=True, compute_s=cs,
        )  # fmt: skip
        base = base.with_value("ps_switch_cost", repr(cost))
    fast_ps = base.with_value("ps_gbps", "1000")
    if probes.atp <= _sim_per_iteration("atp", grad, fast_ps, c, skew, cs):
        ps = 1000.0  # the PS is not slower than the switch path: it does not bind
    else:
        ps = sim_rate_for("ps_gbps", "atp", probes.atp, grad, base, c, skew, compute_s=cs)
    base = base.with_value("ps_gbps", repr(ps))
    if probes.live_share is not None:
        skew = sim_skew_for(probes.live_share, grad, base, c)
    return base, skew


def _refit(base: BenchParams, probes: _Probes, skew: float | None) -> dict[str, float]:
    """What the fitted simulator gives each probe: the fit has as many rates as probes, but a
    rate at an end of its range (ps_gbps 1000: the PS does not bind) leaves a residual."""
    grad, c, cs = probes.grad, probes.concurrent, probes.compute_s
    refit = {name: _sim_per_iteration(name, grad, base, c, skew, cs) for name in policy_names()}
    refit |= {
        "overhead": _sim_per_iteration("static", FRAGMENT_BYTES, base, c, skew, cs),
        "static_alone": _sim_per_iteration("static", grad, base, 1, skew, cs),
    }
    return refit
