"""The aggregate model's fixed point: found from cold and from a warm start, and stable."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from scheduler.config import PER_JOB, PsProcesses, SimConfig
from scheduler.fluid import CommRate, FlowJob, comm_rates
from scheduler.memory import Pool
from scheduler.registry import make_policy
from scheduler.spec import PolicySpec


def _contended(seed: int, count: int) -> list[FlowJob]:
    rng = random.Random(seed)
    return [
        FlowJob(
            job_id=3 * i,
            workers=rng.randint(1, 16),
            grad_bytes=rng.randint(10_000, 10**9),
            iter_time_s=rng.choice([0.0, 1e-3, 0.1]),
            priority=rng.randint(0, 15),
        )
        for i in range(count)
    ]


def _close(a: CommRate, b: CommRate) -> bool:
    return (
        a.t_comm_s == pytest.approx(b.t_comm_s, rel=5e-2)
        and a.bypass == pytest.approx(b.bypass, abs=1e-3)
        and a.evict == pytest.approx(b.evict, abs=1e-3)
    )


@pytest.mark.parametrize("policy", ["atp", "esa"])
@pytest.mark.parametrize("processes", [1, 3, PER_JOB])
def test_warm_start_from_the_previous_set_reaches_the_cold_answer(
    policy: str, processes: PsProcesses
) -> None:
    # The simulator seeds each solve with the answer for the set before a job joined.
    cfg = SimConfig(spec=PolicySpec(policy), pool=Pool(2048), ps_processes=processes)
    jobs = _contended(seed=7, count=12)
    before = comm_rates(cfg, make_policy(PolicySpec(policy)), jobs[:-1])
    cold = comm_rates(cfg, make_policy(PolicySpec(policy)), jobs)
    warm = comm_rates(cfg, make_policy(PolicySpec(policy)), jobs, start=before)
    assert cold.keys() == warm.keys() == {j.job_id for j in jobs}
    assert all(_close(cold[k], warm[k]) for k in cold)


def test_answer_is_a_fixed_point_where_a_fixed_damping_step_cycles() -> None:
    # Two jobs, a 64-aggregator pool and 10 Gbps PS processes: with a constant step of 1/2
    # the loss shares and the PS delay jump between two states every round and never settle.
    # Fed its own answer, the model must give that answer back.
    cfg = SimConfig(spec=PolicySpec("atp"), pool=Pool(64), ps_processes=PER_JOB, ps_bps=10e9)
    jobs = [FlowJob(0, 7, 683_385_025, 0.001), FlowJob(7, 15, 782_370_515, 0.0)]
    first = comm_rates(cfg, make_policy(PolicySpec("atp")), jobs)
    again = comm_rates(cfg, make_policy(PolicySpec("atp")), jobs, start=first)
    assert all(_close(first[k], again[k]) for k in first)
    assert all(0 < r.bypass < 0.95 for r in first.values())


def test_empty_set_and_static_need_no_iteration() -> None:
    assert comm_rates(SimConfig(), make_policy(PolicySpec("esa")), []) == {}
    alone = comm_rates(SimConfig(), make_policy(PolicySpec("static")), [FlowJob(1, 4, 10**6, 0.01)])
    assert alone[1].bypass == alone[1].evict == 0.0


def test_resumed_solves_settle_where_restarted_full_steps_keep_cycling() -> None:
    # 60 jobs of 16 levels on 2,048 aggregators: restarted from its own shares at full steps,
    # the iteration cycles around the fixed point (t_comm moving by ~2e-3 per solve); resumed
    # (`CommRate.resume`: its damped step sizes too) it carries on and settles.
    cfg = SimConfig(spec=PolicySpec("esa"), pool=Pool(2048), ps_processes=PER_JOB)
    policy = make_policy(PolicySpec("esa"))
    jobs = _contended(seed=3, count=60)
    rates = comm_rates(cfg, policy, jobs)
    for _ in range(20):
        rates = comm_rates(cfg, policy, jobs, start=rates)
    again = comm_rates(cfg, policy, jobs, start=rates)
    assert all(again[k].t_comm_s == pytest.approx(rates[k].t_comm_s, rel=1e-4) for k in rates)
    # The carried state is the iteration's, not part of the answer.
    assert all(r.resume is not None for r in again.values())
    assert replace(again[0], resume=None) == again[0]
