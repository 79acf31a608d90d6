"""`SimConfig.job_setup_s` and `iteration_overhead_s` in both simulators."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.config import SimConfig
from scheduler.fragsim import simulate_fragments
from scheduler.memory import Pool
from scheduler.simulator import simulate
from scheduler.workload import JobSpec

SETUP, OVERHEAD, ITERATIONS = 0.25, 0.01, 6
LONE = (JobSpec(0, 0.0, 2, "probe", 8192, 0.002, ITERATIONS),)


@pytest.mark.parametrize("simulator", [simulate, simulate_fragments])
@pytest.mark.parametrize("policy", ["static", "atp", "esa"])
def test_a_lone_job_takes_its_setup_and_every_iterations_overhead_longer(simulator, policy):
    cfg = SimConfig(policy=policy, pool=Pool(256), window=32, link_bps=1e9)
    bare = simulator(LONE, cfg).jobs[0].jct_s
    slow = simulator(LONE, replace(cfg, job_setup_s=SETUP, iteration_overhead_s=OVERHEAD))
    assert slow.jobs[0].jct_s == pytest.approx(bare + SETUP + ITERATIONS * OVERHEAD, rel=1e-6)


@pytest.mark.parametrize("policy", ["static", "atp", "esa"])
def test_both_simulators_agree_on_contending_jobs_with_overheads(policy: str) -> None:
    jobs = tuple(JobSpec(i, 0.01 * i, 2, f"j{i}", 32768, 0.001, 5) for i in range(4))
    cfg = SimConfig(
        policy=policy,
        pool=Pool(128),
        window=32,
        link_bps=1e9,
        ps_bps=2e9,
        job_setup_s=0.02,
        iteration_overhead_s=0.003,
    )
    fluid = simulate(jobs, cfg).jct_summary()["mean"]
    fragments = simulate_fragments(jobs, cfg).jct_summary()["mean"]
    assert fluid == pytest.approx(fragments, rel=0.1)


@pytest.mark.parametrize("name", ["job_setup_s", "iteration_overhead_s"])
def test_negative_overheads_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match=name):
        SimConfig(**{name: -1.0})
