"""The switch's shared rates refitted to --emu runs of another workload (``--calibrate``).

Probes that run the whole time together do not show what jobs that arrive, queue and leave
cost each other (fitted to probes alone, the simulator runs 13-27% fast), so `calibrate`
refits `CALIBRATED` to a calibration workload's average JCTs. The validated workload's own
JCTs are never fitted to. It returns ``(params, calibration)`` with
``calibration = {"emu_avg_jct", "sim_avg_jct", "parameters"}``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from bench.jct.params import BenchParams
from bench.jct.validate.fit import bisect_log, skewed_runner
from scheduler.registry import policy_class, policy_names
from scheduler.workload import JobSpec

__all__ = ["CALIBRATED", "calibrate", "sim_avg_jct"]

# The rates a calibration refits (`calibrate`), and the brackets it searches them in.
CALIBRATED = ("switch_pps", "ps_switch_cost")
PPS_BRACKET = (1.0, 1e9)
COST_BRACKET = (1e-3, 50.0)

# The policies whose packets the PS costs the switch's CPU: those that send some to a PS.
SHARED = tuple(name for name in policy_names() if policy_class(name).shared)


def sim_avg_jct(
    jobs: Sequence[JobSpec], policy: str, params: BenchParams, runner: Any = None
) -> float:
    """The simulator's average JCT (s) of `jobs` under `policy` (`runner`: a `PolicyRunner`,
    such as a fabric's; None: the one-switch simulator)."""
    run = (runner or skewed_runner(None))(list(jobs), policy, params)
    if len(run.jobs) != len(jobs):
        raise RuntimeError(f"the simulated {policy} run finished {len(run.jobs)} of {len(jobs)}")
    return statistics.fmean(j.jct_s for j in run.jobs)


def calibrate(
    params: BenchParams,
    jobs: Sequence[JobSpec],
    emu_avg_jct: dict[str, float],
    runner: Any = None,
) -> tuple[BenchParams, dict[str, Any]]:
    """Refit the switch's shared rates on a calibration workload (`jobs`, not the validated
    one) whose --emu average JCTs per policy are `emu_avg_jct`, simulated by `runner` (None:
    one switch; a `FabricRunner` on a fabric). The probes fix what one job costs
    (``job_setup_s``, ``iteration_overhead_s``, ``link_gbps``); the calibration what jobs cost
    each other when they arrive, queue and leave as a workload's do, which probes running the
    whole time together do not show:

    - ``switch_pps`` so that the simulator's static average JCT is the emulation's (static's
      packets never reach the PS, so nothing else moves it);
    - then ``ps_switch_cost``, one rate for two policies: the value that minimises the sum of
      squared log-ratios sim/emu of atp's and esa's average JCTs (golden-section search on a
      log scale; with one of them, the exact fit).

    Everything else is kept as `params` has it (``ps_gbps`` too, as the probes fitted it)."""
    if "static" in emu_avg_jct:

        def static_jct(pps: float) -> float:
            return sim_avg_jct(jobs, "static", params.with_value("switch_pps", repr(pps)), runner)

        pps = bisect_log(static_jct, emu_avg_jct["static"], PPS_BRACKET, slower_with_more=False)
        params = params.with_value("switch_pps", repr(pps))
    shared = [name for name in SHARED if name in emu_avg_jct]
    if shared:

        def misfit(log_cost: float) -> float:
            trial = params.with_value("ps_switch_cost", repr(math.exp(log_cost)))
            return sum(
                math.log(sim_avg_jct(jobs, name, trial, runner) / emu_avg_jct[name]) ** 2
                for name in shared
            )

        lo, hi = (math.log(x) for x in COST_BRACKET)
        cost = math.exp(_golden_min(misfit, lo, hi, tol=1e-3))
        params = params.with_value("ps_switch_cost", repr(cost))
    fitted = {name: sim_avg_jct(jobs, name, params, runner) for name in emu_avg_jct}
    return params, {
        "emu_avg_jct": dict(emu_avg_jct),
        "sim_avg_jct": fitted,
        "parameters": {field: params.as_dict()[field] for field in CALIBRATED},
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
