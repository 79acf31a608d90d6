"""A --sim report's own validation: the slice, the gaps, and the warning on top."""

from __future__ import annotations

import math

import pytest

from bench.jct.params import BenchParams
from bench.jct.report import render_report
from bench.jct.results import summarise
from bench.jct.sim import run_policy
from bench.jct.simcheck import (
    MAX_ITERATIONS,
    MAX_WINDOWS,
    SLICE_JOBS,
    PolicyGap,
    SimCheck,
    check_run,
    render_check,
    scaled_slice,
)
from scheduler.memory import COPIES_PER_SLOT, partition_slots
from scheduler.validate import BOUND
from scheduler.workload import load_workload

TITLE = "## Validation: fluid model against the fragment-level model"


def test_the_slice_is_small_keeps_each_jobs_duty_and_scales_the_pool() -> None:
    jobs = load_workload("synthetic-50")
    params = BenchParams()
    part, sliced, tau = scaled_slice(jobs, params, running=20.0)
    assert len(part) == SLICE_JOBS
    assert 0 < tau < 1
    by_model = {j.model: j for j in jobs}
    for j in part:
        frags = math.ceil(j.grad_bytes / (4 * params.lanes))
        assert frags <= MAX_WINDOWS * params.sim.window and j.iterations <= MAX_ITERATIONS
        # Gradient and compute are cut by the same factor: the job communicates the same
        # share of its time as the whole one did.
        whole = by_model[j.model]
        assert j.iter_time_s / j.grad_bytes == pytest.approx(
            whole.iter_time_s / whole.grad_bytes, rel=0.02
        )
    # The pool shrinks with the slice's share of the jobs running at once, never below one
    # static partition; everything but the pool, aging and load is the run's.
    assert sliced.aggregators == round(params.aggregators * SLICE_JOBS / 20.0)
    assert sliced.aggregators >= COPIES_PER_SLOT * partition_slots(params.sim.window)
    assert sliced.sim.spec.aging_s == pytest.approx(params.sim.spec.aging_s * tau)
    assert (sliced.sim.window, sliced.ps_gbps, sliced.ps_processes) == (
        params.sim.window,
        params.ps_gbps,
        params.ps_processes,
    )


def _check(*gaps: float) -> SimCheck:
    return SimCheck(
        jobs=8,
        workers=32,
        fragments=4096,
        aggregators=1024,
        time_scale=1e-3,
        gaps=tuple(
            PolicyGap(p, 1.0, 1.0 + g)
            for p, g in zip(("static", "atp", "esa")[: len(gaps)], gaps, strict=True)
        ),
    )


def test_a_gap_past_the_bound_is_flagged_at_the_top() -> None:
    warning, section = render_check(_check(0.0, 2 * BOUND, -0.01))
    assert any("Warning" in line and "atp +10.0%" in line for line in warning)
    assert "esa" not in "".join(warning)
    assert TITLE in section
    assert any(line.startswith("| atp |") and "**no**" in line for line in section)


def test_gaps_within_the_bound_raise_no_warning() -> None:
    warning, section = render_check(_check(0.01, -BOUND / 2, 0.0))
    assert warning == []
    rows = [line for line in section if line.startswith("| ") and "yes" in line]
    assert len(rows) == 3


def test_a_sim_report_runs_its_own_validation_and_states_it() -> None:
    jobs = load_workload("synthetic-12")
    params = BenchParams(aggregators=2048)
    runs = [run_policy(jobs, policy, params) for policy in ("atp", "esa")]
    parameters = {"workload": "synthetic-12", "backend": "sim", **params.as_dict()}
    check = check_run(runs, parameters)
    assert [g.policy for g in check.gaps] == ["atp", "esa"]
    assert all(g.fragment_s > 0 and g.fluid_s > 0 for g in check.gaps)
    report = render_report(
        command="test",
        workload="synthetic-12",
        backend="sim",
        n_jobs=len(jobs),
        parameters=parameters,
        extra_sources={},
        summaries={r.policy: summarise(r) for r in runs},
        ratios={},
        runs=runs,
        ideal_avg=None,
        check=check,
    )
    assert TITLE in report
    for g in check.gaps:
        assert f"| {g.policy} | {g.fragment_s:.6g} | {g.fluid_s:.6g} | {g.gap:+.1%} |" in report
    top = report.split("## Results")[0]
    assert ("Warning" in top) == (not check.within_bound)


def test_a_report_with_a_gap_past_the_bound_says_so_before_the_results() -> None:
    jobs = load_workload("synthetic-12")
    runs = [run_policy(jobs, "atp", BenchParams())]
    report = render_report(
        command="test",
        workload="w",
        backend="sim",
        n_jobs=len(jobs),
        parameters=BenchParams().as_dict(),
        extra_sources={},
        summaries={r.policy: summarise(r) for r in runs},
        ratios={},
        runs=runs,
        ideal_avg=None,
        check=_check(0.0, -0.08),
    )
    top, rest = report.split("## Results")
    assert "Warning" in top and "atp -8.0%" in top
    assert TITLE in rest


def test_an_emu_report_has_no_simulator_validation() -> None:
    jobs = load_workload("synthetic-12")
    runs = [run_policy(jobs, "static", BenchParams())]
    report = render_report(
        command="test",
        workload="w",
        backend="emu",
        n_jobs=len(jobs),
        parameters=BenchParams().as_dict(),
        extra_sources={},
        summaries={r.policy: summarise(r) for r in runs},
        ratios={},
        runs=runs,
        ideal_avg=None,
    )
    assert TITLE not in report
