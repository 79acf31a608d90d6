"""A ``--sim`` run's own check of the fluid model.

The fluid model is validated against the fragment-level simulator on seeded cases
(`scheduler.validate`), but a run's workload may sit in a regime those cases miss. So every
``--sim`` report also runs both simulators on a scaled-down slice of its own workload, with
its own parameters: the `SLICE_JOBS` consecutive arrivals closest together; each job's
gradient cut to at most `MAX_WINDOWS` windows and its compute time by the same factor, at most
`MAX_ITERATIONS` iterations; arrivals and ``aging_s`` shrunk by the slice's median time factor;
the pool shrunk with the number of jobs (at least one static partition), so the jobs' windows
press on it as the whole run's do; everything else the run's.

The gap is ``(fluid - fragment) / fragment`` of the mean JCT; `scheduler.validate.BOUND` (5%)
is the bound the fluid model is held to.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from bench.jct.params import BenchParams
from bench.jct.results import PolicyRun
from bench.jct.sim import sim_config
from scheduler.fragsim import simulate_fragments
from scheduler.memory import COPIES_PER_SLOT, partition_slots
from scheduler.simulator import simulate
from scheduler.validate import BOUND
from scheduler.workload import JobSpec

__all__ = [
    "MAX_ITERATIONS",
    "MAX_WINDOWS",
    "SLICE_JOBS",
    "PolicyGap",
    "SimCheck",
    "check_slice",
    "check_run",
    "render_check",
    "scaled_slice",
]

SLICE_JOBS = 8
MAX_WINDOWS = 4
MAX_ITERATIONS = 4


@dataclass(frozen=True, slots=True)
class PolicyGap:
    """Mean JCT of the slice under one policy in both simulators (seconds of virtual time)."""

    policy: str
    fragment_s: float
    fluid_s: float

    @property
    def gap(self) -> float:
        """(fluid - fragment) / fragment."""
        return (self.fluid_s - self.fragment_s) / self.fragment_s


@dataclass(frozen=True, slots=True)
class SimCheck:
    """The slice both simulators ran and the gap per policy."""

    jobs: int
    workers: int
    fragments: int
    aggregators: int
    time_scale: float
    gaps: tuple[PolicyGap, ...]

    @property
    def worst(self) -> PolicyGap | None:
        return max(self.gaps, key=lambda g: abs(g.gap), default=None)

    @property
    def within_bound(self) -> bool:
        return all(abs(g.gap) <= BOUND for g in self.gaps)


def _densest(jobs: Sequence[JobSpec], count: int) -> list[JobSpec]:
    ordered = sorted(jobs, key=lambda j: (j.arrival_s, j.job_id))
    if len(ordered) <= count:
        return ordered
    spans = [
        ordered[i + count - 1].arrival_s - ordered[i].arrival_s
        for i in range(len(ordered) - count + 1)
    ]
    first = spans.index(min(spans))
    return ordered[first : first + count]


def scaled_slice(
    jobs: Sequence[JobSpec], params: BenchParams, running: float
) -> tuple[tuple[JobSpec, ...], BenchParams, float]:
    """``(slice jobs, slice parameters, time scale)`` of `jobs` (see module doc); `running`
    is the whole run's mean number of running jobs."""
    chosen = _densest(jobs, SLICE_JOBS)
    if not chosen:
        return (), params, 1.0
    payload = 4 * params.lanes
    cap = MAX_WINDOWS * params.sim.window
    scaled, factors = [], []
    for j in chosen:
        frags = math.ceil(j.grad_bytes / payload)
        keep = min(frags, cap)
        cut = keep / frags
        iterations = min(j.iterations, MAX_ITERATIONS)
        factors.append(cut * iterations / j.iterations)
        scaled.append((j, keep, cut, iterations))
    tau = statistics.median(factors)
    t0 = chosen[0].arrival_s
    out = tuple(
        JobSpec(
            job_id=i,
            arrival_s=(j.arrival_s - t0) * tau,
            workers=j.workers,
            model=j.model,
            grad_bytes=keep * payload,
            iter_time_s=j.iter_time_s * cut,
            iterations=iterations,
            priority_class=j.priority_class,
        )
        for i, (j, keep, cut, iterations) in enumerate(scaled)
    )
    partition = COPIES_PER_SLOT * partition_slots(params.sim.window)
    share = len(out) / max(running, float(len(out)))
    pool = min(params.aggregators, max(partition, round(params.aggregators * share)))
    spec = params.sim.spec
    return (
        out,
        replace(
            params,
            aggregators=pool,
            load=1.0,
            sim=replace(params.sim, spec=replace(spec, aging_s=spec.aging_s * tau)),
        ),
        tau,
    )


def check_slice(
    jobs: Sequence[JobSpec], params: BenchParams, policies: Sequence[str], running: float
) -> SimCheck:
    """Both simulators on `scaled_slice` of `jobs` under each policy."""
    part, slice_params, tau = scaled_slice(jobs, params, running)
    gaps = []
    for policy in policies:
        cfg = sim_config(policy, slice_params)
        frag = simulate_fragments(part, cfg).jct_summary()["mean"]
        fluid = simulate(part, cfg).jct_summary()["mean"]
        if math.isfinite(frag) and math.isfinite(fluid) and frag > 0:
            gaps.append(PolicyGap(policy, frag, fluid))
    return SimCheck(
        jobs=len(part),
        workers=sum(j.workers for j in part),
        fragments=sum(math.ceil(j.grad_bytes / (4 * params.lanes)) * j.iterations for j in part),
        aggregators=slice_params.aggregators,
        time_scale=tau,
        gaps=tuple(gaps),
    )


def _running(runs: Sequence[PolicyRun]) -> float:
    """The largest, over the policies, mean number of jobs running at once."""
    best = 0.0
    for run in runs:
        if not run.jobs:
            continue
        span = max(j.finish_s for j in run.jobs) - min(j.arrival_s for j in run.jobs)
        if span > 0:
            best = max(best, sum(j.finish_s - j.start_s for j in run.jobs) / span)
    return best


def check_run(runs: Sequence[PolicyRun], parameters: Mapping[str, Any]) -> SimCheck:
    """`check_slice` for a finished ``--sim`` run: its jobs rebuilt from `runs` (the jobs every
    policy finished), its parameters from `parameters` (the report's table; arrivals already
    carry the run's load)."""
    params = BenchParams.from_dict(parameters)
    first = runs[0].jobs if runs else ()
    jobs = [
        JobSpec(
            job_id=o.job_id,
            arrival_s=o.arrival_s,
            workers=o.workers,
            model=o.model,
            grad_bytes=o.grad_bytes,
            iter_time_s=o.compute_s / o.iterations,
            iterations=o.iterations,
        )
        for o in first
    ]
    return check_slice(jobs, params, [r.policy for r in runs], _running(runs))


def render_check(check: SimCheck) -> tuple[list[str], list[str]]:
    """``(warning lines for the top of the report, the section)``; no warning when every gap
    is within `BOUND`."""
    bound = f"{BOUND:.0%}"
    section = [
        "",
        "## Validation: fluid model against the fragment-level model",
        "",
        f"Both simulators on a scaled-down slice of this run's own workload "
        f"(`bench.jct.simcheck`): the {check.jobs} jobs ({check.workers} workers) that arrive "
        f"closest together, each cut to at most {MAX_WINDOWS} windows of fragments per "
        f"iteration (compute cut alike) and {MAX_ITERATIONS} iterations, {check.fragments:,} "
        f"fragments in all; times scaled by {check.time_scale:.3g}; a pool of "
        f"{check.aggregators:,} aggregators (the run's, scaled by the slice's share of the "
        f"jobs running at once); every other parameter as above. Gap = (fluid - fragment) / "
        f"fragment of the mean JCT; the fluid model is held to {bound}.",
        "",
        f"| policy | fragment-level mean JCT (s) | fluid mean JCT (s) | gap | within {bound} |",
        "|---|---:|---:|---:|---|",
    ]
    for g in check.gaps:
        ok = "yes" if abs(g.gap) <= BOUND else "**no**"
        section.append(
            f"| {g.policy} | {g.fragment_s:.6g} | {g.fluid_s:.6g} | {g.gap:+.1%} | {ok} |"
        )
    if not check.gaps:
        section.append("| - | - | - | - | no job of the slice finished |")
    warning: list[str] = []
    worst = check.worst
    if worst is not None and not check.within_bound:
        off = ", ".join(f"{g.policy} {g.gap:+.1%}" for g in check.gaps if abs(g.gap) > BOUND)
        warning = [
            "",
            f"**Warning: on a scaled-down slice of this workload the fluid model's mean JCT is "
            f"more than {bound} off the fragment-level model's ({off}); see \"Validation: "
            'fluid model against the fragment-level model" below.**',
        ]
    return warning, section
