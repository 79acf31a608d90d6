"""The ablations of esa (`scheduler.ablations`): real policies behind the registry, run by both
simulators, holding the invariants every policy holds."""

from __future__ import annotations

import random

import pytest

from scheduler.config import PER_JOB, SimConfig
from scheduler.fluid import FlowJob, comm_rates
from scheduler.fragsim import simulate_fragments
from scheduler.memory import Pool
from scheduler.registry import ablation_names, make_policy, policy_names
from scheduler.simulator import simulate
from scheduler.spec import PolicySpec
from scheduler.validate import validate
from scheduler.workload import JobSpec

from .conftest import spec

ABLATIONS = ("esa-norelease", "esa-nopreempt")


def test_ablations_are_registered_apart_from_the_service_policies() -> None:
    assert ablation_names() == ABLATIONS
    assert not set(ablation_names()) & set(policy_names())
    traits = {n: make_policy(PolicySpec(n)) for n in (*policy_names(), *ablation_names())}
    assert {n: (p.early_release, p.preempts) for n, p in traits.items() if p.shared} == {
        "atp": (False, False),
        "esa-nopreempt": (True, False),
        "esa-norelease": (False, True),
        "esa": (True, True),
    }
    assert {n: p.switch_rule() for n, p in traits.items()} == {
        "static": "static",
        "atp": "atp",
        "esa": "esa",
        "esa-norelease": "atp",
        "esa-nopreempt": "esa",
    }


def _contending(seed: int, count: int = 10) -> tuple[JobSpec, ...]:
    rng = random.Random(seed)
    return tuple(
        spec(
            i,
            arrival_s=round(rng.uniform(0, 2e-4), 7),
            workers=rng.choice((2, 4, 8)),
            grad_bytes=256 * rng.randint(32, 96),
            iter_time_s=rng.uniform(1e-5, 6e-5),
            iterations=rng.randint(4, 8),
        )
        for i in range(count)
    )


@pytest.mark.parametrize("policy", ABLATIONS)
@pytest.mark.parametrize("sim", [simulate, simulate_fragments])
def test_every_job_finishes_and_no_gradient_byte_is_lost(policy: str, sim: object) -> None:
    # A pool of 32 under ten jobs of window 16: memory binds, so fragments collide and, where
    # the policy preempts, partial sums are evicted; each must still reach its job's PS.
    jobs = _contending(seed=5)
    cfg = SimConfig(
        spec=PolicySpec(policy), pool=Pool(32), window=16, ps_processes=PER_JOB, ps_bps=25e9
    )
    run = sim(jobs, cfg)  # type: ignore[operator]
    assert run.unfinished == 0 and len(run.jobs) == len(jobs)
    by_id = {j.job_id: j for j in jobs}
    for result in run.jobs:
        job = by_id[result.job_id]
        total = job.iterations * job.grad_bytes
        assert result.bytes_switch + result.bytes_ps == pytest.approx(total)
    for u in run.utilisation:
        assert 0 <= u.live <= 1 and 0 <= u.complete <= 1
        assert u.live + u.complete + u.idle == pytest.approx(1.0)
    suffered = sum(j.preemptions_suffered for j in run.jobs)
    caused = sum(j.preemptions_caused for j in run.jobs)
    assert suffered == pytest.approx(caused)
    assert (suffered > 0) == make_policy(PolicySpec(policy)).preempts


@pytest.mark.parametrize("policy", [*ABLATIONS, "atp", "esa"])
def test_fluid_model_never_holds_more_aggregators_than_exist(policy: str) -> None:
    cfg = SimConfig(pool=Pool(64), window=16, ps_processes=PER_JOB, ps_bps=25e9)
    jobs = [FlowJob(i, 4, 256 * 4096, 1e-5, priority=i % 4) for i in range(24)]
    rates = comm_rates(cfg, make_policy(PolicySpec(policy)), jobs)
    held = sum(r.duty * (r.held + r.held_complete) for r in rates.values())
    assert 0 < held <= cfg.pool.aggregators
    assert all(0 <= r.bypass + r.evict <= 1 for r in rates.values())
    traits = make_policy(PolicySpec(policy))
    assert any(r.evict > 0 for r in rates.values()) == traits.preempts
    # A complete sum waits for the PS only without early release; with it, the PS gets copies.
    assert any(r.held_complete > 0 for r in rates.values()) == (not traits.early_release)
    assert any(r.ps_copies > 0 for r in rates.values()) == traits.early_release


def _two_jobs_one_aggregator(policy: str) -> dict[int, tuple[float, float, float]]:
    # As tests/scheduler/test_simulators: job 1 has less work, so srtf ranks it higher.
    jobs = (
        spec(0, iterations=40, workers=4, iter_time_s=3e-5),
        spec(1, arrival_s=5e-5, iterations=10, workers=4, iter_time_s=7e-5),
    )
    cfg = SimConfig(spec=PolicySpec(policy), pool=Pool(1), window=1, worker_skew_s=2e-5)
    run = simulate_fragments(jobs, cfg)
    assert run.unfinished == 0
    return {j.job_id: (j.bytes_ps, j.preemptions_suffered, j.preemptions_caused) for j in run.jobs}


def test_norelease_preempts_on_the_atp_rule() -> None:
    out = _two_jobs_one_aggregator("esa-norelease")
    assert out[1][2] > 0 and out[0][1] == out[1][2]  # the high-priority job preempts job 0
    assert out[1][1] == 0  # and is never preempted itself
    # Job 0's complete sums hold the aggregator until the PS result, which esa would not let
    # them: the preempting job still bypasses some of its fragments.
    assert out[1][0] > _two_jobs_one_aggregator("esa")[1][0] == 0


def test_nopreempt_never_preempts_but_releases_early() -> None:
    out = _two_jobs_one_aggregator("esa-nopreempt")
    assert out[0][1] == out[1][2] == 0
    atp = _two_jobs_one_aggregator("atp")
    # Freed at completion, the aggregator is there for the other job more often than atp's.
    assert out[0][0] + out[1][0] < atp[0][0] + atp[1][0]


def test_the_two_simulators_agree_on_the_ablations() -> None:
    # The bound the shared policies are held to on the same cases (test_simulators).
    for e in validate(ABLATIONS, count=2):
        assert e.jct_rel_error < 0.35, e
        assert e.share_abs_error < 0.25, e
