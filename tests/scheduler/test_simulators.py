from __future__ import annotations

import random
from dataclasses import replace

import pytest

from scheduler import simulator
from scheduler.config import PER_JOB, SimConfig
from scheduler.fluid import FlowJob, comm_rates
from scheduler.fragsim import simulate_fragments
from scheduler.memory import Pool
from scheduler.registry import ablation_names, make_policy, policy_names
from scheduler.scheduler import too_wide
from scheduler.simulator import simulate
from scheduler.spec import PolicySpec
from scheduler.validate import validate
from scheduler.workload import load_workload, synthetic_jobs

from .conftest import spec

POLICIES = ("static", "atp", "esa")


@pytest.mark.parametrize("policy", POLICIES)
def test_every_job_finishes_and_memory_shares_add_up(policy: str) -> None:
    jobs = load_workload("synthetic-40")
    run = simulate(jobs, SimConfig(spec=PolicySpec(policy), pool=Pool(2048)))
    assert run.unfinished == 0 and len(run.jobs) == 40
    assert all(j.queueing_s >= 0 and j.jct_s > 0 for j in run.jobs)
    for u in run.utilisation:
        assert 0 <= u.live <= 1 and 0 <= u.complete <= 1
        assert u.live + u.complete + u.idle == pytest.approx(1.0)


@pytest.mark.parametrize("sim", [simulate, simulate_fragments])
def test_same_seed_same_results(sim: object) -> None:
    jobs = tuple(spec(i, arrival_s=i * 2e-4, workers=2 + i % 3) for i in range(4))
    cfg = SimConfig(spec=PolicySpec("esa"), pool=Pool(32), window=8, seed=3)
    assert sim(jobs, cfg) == sim(jobs, cfg)  # type: ignore[operator]


def test_static_queues_when_memory_is_full() -> None:
    jobs = tuple(spec(i) for i in range(3))
    run = simulate_fragments(jobs, SimConfig(spec=PolicySpec("static"), pool=Pool(32), window=8))
    assert run.unfinished == 0
    assert sorted(j.queueing_s > 0 for j in run.jobs) == [False, False, True]
    assert all(j.bytes_ps == 0 for j in run.jobs)


def _two_jobs_one_aggregator(policy: str) -> dict[int, tuple[float, float, float]]:
    # Job 1 has less work, so srtf ranks it higher under esa; it also arrives second. A window
    # of 1 keeps a job from colliding with its own next fragment on the single aggregator.
    jobs = (
        spec(0, iterations=40, workers=4, iter_time_s=3e-5),
        spec(1, arrival_s=5e-5, iterations=10, workers=4, iter_time_s=7e-5),
    )
    cfg = SimConfig(spec=PolicySpec(policy), pool=Pool(1), window=1, worker_skew_s=2e-5)
    run = simulate_fragments(jobs, cfg)
    assert run.unfinished == 0
    return {j.job_id: (j.bytes_ps, j.preemptions_suffered, j.preemptions_caused) for j in run.jobs}


def test_esa_higher_priority_job_never_bypasses_and_evicted_sums_reach_their_ps() -> None:
    out = _two_jobs_one_aggregator("esa")
    assert out[1][0] == 0  # the high-priority job finished everything in the switch
    assert out[1][2] > 0 and out[0][1] == out[1][2]  # it preempted job 0 ...
    assert out[0][0] > 0  # ... whose evicted partial sums finished at its PS (it completed)


def test_atp_first_comer_keeps_the_aggregator() -> None:
    out = _two_jobs_one_aggregator("atp")
    assert out[1][0] > 0  # the later job bypasses to its PS
    assert out[0][1] == out[1][2] == 0  # nothing is ever preempted


def test_esa_with_aging_finishes_every_admitted_job() -> None:
    jobs = tuple(spec(i, arrival_s=i * 1e-4, iterations=6 + 4 * i, workers=4) for i in range(6))
    cfg = SimConfig(spec=PolicySpec("esa", aging_s=1e-4), pool=Pool(8), window=4)
    for sim in (simulate, simulate_fragments):
        run = sim(jobs, cfg)
        assert run.unfinished == 0 and len(run.jobs) == 6


def test_aggregate_model_stays_close_to_the_fragment_model() -> None:
    errors = validate(count=2)
    for e in errors:
        bound = 0.01 if e.policy == "static" else 0.35
        assert e.jct_rel_error < bound, e
        assert e.share_abs_error < 0.25, e


def test_atp_never_loads_a_ps_process_beyond_its_capacity() -> None:
    # Windows close the loop: jobs slow down until the PS keeps up, whatever the contention.
    jobs = [FlowJob(i, 8, 64 * 256 * 1000, 1e-3) for i in range(12)]
    for processes in (1, 3, PER_JOB):
        cfg = SimConfig(spec=PolicySpec("atp"), pool=Pool(512), ps_processes=processes)
        rates = comm_rates(cfg, make_policy(PolicySpec("atp")), jobs)
        load: dict[int, float] = {}
        for j in jobs:
            load[cfg.ps_of(j.job_id)] = (
                load.get(cfg.ps_of(j.job_id), 0.0) + rates[j.job_id].ps_critical
            )
        assert all(v * cfg.ps_fragment_s < 1.0 for v in load.values())
        assert all(r.ps_wait_s >= 0 and r.t_comm_s > 0 for r in rates.values())


@pytest.mark.parametrize("sim", [simulate, simulate_fragments])
def test_more_ps_processes_never_slow_atp_down(sim: object) -> None:
    jobs = tuple(spec(i, arrival_s=i * 1e-5, workers=4, iterations=4) for i in range(4))
    shared, own = (
        sim(jobs, SimConfig(spec=PolicySpec("atp"), pool=Pool(256), window=8, ps_processes=p))  # type: ignore[operator]
        for p in (1, PER_JOB)
    )
    assert shared.unfinished == own.unfinished == 0
    assert own.jct_summary()["mean"] <= shared.jct_summary()["mean"] * 1.001


def test_progress_mark_resets_the_aging_clock() -> None:
    from scheduler.jobs import JobTable
    from scheduler.scheduler import Scheduler

    table = JobTable(Scheduler(PolicySpec("esa", aging_s=1.0)), window=8)
    recs = [table.add(spec(i, iterations=10 * (i + 1))) for i in range(2)]
    table.decide(0.0)
    base = {r.spec.job_id: r.priority for r in recs}
    low = min(recs, key=lambda r: r.priority)
    low.starved_s = 100.0  # far past every aging threshold: it climbs to the top
    table.decide(1.0)
    assert low.priority == 15 and low.priority > base[low.spec.job_id]
    table.progress_mark(low)  # it made progress: back to the level its rank gives it
    table.decide(2.0)
    assert low.starved_s == 0 and low.priority == base[low.spec.job_id]


def test_a_job_at_the_top_level_ages_without_events() -> None:
    # Aging lifts a job one level per crossing up to the top; past it a crossing changes no
    # level, so it is no decision point (fragsim decides the same way).
    from scheduler.fluid import CommRate
    from scheduler.jobs import JobTable
    from scheduler.scheduler import Scheduler

    cfg = SimConfig(spec=PolicySpec("esa", aging_s=1.0))
    table = JobTable(Scheduler(cfg.spec), window=8)
    top, below = (table.add(spec(i, iterations=10**6)) for i in range(2))
    top.priority, below.priority = cfg.spec.levels - 1, cfg.spec.levels - 2
    starving = CommRate(0.01, bypass=0.5, evict=0.0, caused=0.0, duty=0.5, held=1.0,
                        held_complete=0.0)  # fmt: skip
    rates = {top.spec.job_id: starving, below.spec.job_id: starving}
    policy = make_policy(cfg.spec)
    for active, ages in (([top], False), ([below], True)):
        steady = simulator._Steady(cfg, policy, active, rates)
        t = steady.time_to_event(active, steady.next_marks(active))
        # 1 s of aging at 0.25 starved s per s: 4 s; the next progress mark is far later.
        assert (t == pytest.approx(4.0)) is ages


@pytest.mark.parametrize("policy", ["static", "atp", "esa-nopreempt"])
@pytest.mark.parametrize("aggregators", [256, 2048])
def test_a_policy_that_does_not_preempt_needs_no_round_at_a_progress_mark(
    policy: str, aggregators: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The simulator skips those rounds where ranks are not read; deciding at every event
    # instead must give the same run, to the byte, with memory scarce (jobs queue) or not.
    jobs = [replace(j, arrival_s=j.arrival_s / 8) for j in load_workload("synthetic-40")]
    cfg = SimConfig(spec=PolicySpec(policy), pool=Pool(aggregators))
    skipping = simulate(jobs, cfg)
    monkeypatch.setattr(simulator, "_reranks", lambda policy: True)
    assert simulate(jobs, cfg) == skipping


@pytest.mark.parametrize("sim", [simulate, simulate_fragments])
@pytest.mark.parametrize("policy", policy_names() + ablation_names())
def test_a_job_wider_than_the_switch_bitmap_is_refused_and_the_others_run(
    sim: object, policy: str
) -> None:
    # A Philly job of 64 GPUs, one worker per GPU, between two jobs one switch can serve.
    jobs = (spec(0), spec(1, arrival_s=1e-4, workers=64), spec(2, arrival_s=2e-4, workers=32))
    cfg = SimConfig(spec=PolicySpec(policy), pool=Pool(64), window=8)
    run = sim(jobs, cfg)  # type: ignore[operator]
    assert [j.job_id for j in run.jobs] == [0, 2]
    assert run.unfinished == 1
    assert run.refused == ((1, too_wide(64)),)
    assert too_wide(32) is None and "bitmap is 32 bits wide" in str(too_wide(64))


@pytest.mark.parametrize("policy", ["static", "esa", "esa-norelease"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_round_a_finish_ran_stands_for_its_event(
    policy: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A finish decides at once; the event's own round is skipped when no job changed since.
    # Running that round anyway must give the same run, to the byte, on random workloads.
    rng = random.Random(seed)
    jobs = [
        replace(j, arrival_s=j.arrival_s * rng.uniform(0.05, 0.3))
        for j in synthetic_jobs(30, seed=seed, load=rng.uniform(0.5, 4))
    ]
    cfg = SimConfig(spec=PolicySpec(policy), pool=Pool(rng.choice((256, 1024, 4096))), seed=seed)
    skipping = simulate(jobs, cfg)
    monkeypatch.setattr(simulator, "_decided", lambda fresh: False)
    assert simulate(jobs, cfg) == skipping
