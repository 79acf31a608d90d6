"""The fabric simulator: where it reduces to today's single-switch simulator, it equals it;
placement, trees, refusals, the uplink and PS bounds, and the analytic times of Mina's score."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.config import PER_JOB, SimConfig
from scheduler.fabric import Fabric, Rack, Switch, two_level_fabric
from scheduler.fabricflow import fan_in, switch_config
from scheduler.fabricsim import simulate_fabric
from scheduler.memory import Pool
from scheduler.scheduler import too_wide
from scheduler.simulator import simulate
from scheduler.spec import PolicySpec
from scheduler.workload import JobSpec, load_workload

from .conftest import spec


def _jobs(count: int = 16) -> list[JobSpec]:
    return list(load_workload("synthetic-50")[:count])


def _one_tor(aggregators: int) -> Fabric:
    """One ToR, one GPU per server and more servers than any run needs: no job waits for
    GPUs and each GPU is one worker, as in the single-switch simulator."""
    return Fabric((Switch("tor0", aggregators, rack=Rack(servers=4096)),), 64, 1)


@pytest.mark.parametrize("policy", ["static", "atp", "esa"])
def test_one_tor_fabric_is_the_single_switch_simulator(policy: str) -> None:
    cfg = SimConfig(PolicySpec(policy), Pool(1024, 64), job_setup_s=0.5)
    single = simulate(_jobs(), cfg)
    fabric = simulate_fabric(_jobs(), cfg, _one_tor(1024))
    assert fabric.result.jobs == single.jobs
    assert fabric.result.utilisation == single.utilisation
    assert fabric.result.refused == single.refused


def test_one_tor_fabric_refuses_what_the_single_switch_refuses() -> None:
    jobs = [spec(0, workers=40), spec(1, workers=4)]
    cfg = SimConfig(PolicySpec("esa"), Pool(1024, 64))
    single = simulate(jobs, cfg)
    fabric = simulate_fabric(jobs, cfg, _one_tor(1024))
    assert fabric.result.refused == single.refused == ((0, too_wide(40)),)
    assert fabric.result.jobs == single.jobs


def _two_racks(aggregators: int) -> Fabric:
    """A small rack and a very large one under a spine: packed placement fills the small
    one first and every job fits in one rack."""
    rack0, rack1 = Rack(servers=40), Rack(servers=4096)
    return Fabric(
        (
            Switch("spine", aggregators),
            Switch("tor0", aggregators, "spine", rack=rack0),
            Switch("tor1", aggregators, "spine", rack=rack1),
        ),
        64,
        1,
    )


@pytest.mark.parametrize(
    ("policy", "aggregators", "tolerance"),
    # static with memory that never binds (a job waiting for memory at one rack may be
    # placed on the other later, which independent runs cannot do); esa re-ranks by whole
    # iterations done, the integer part of a float sum taken over different event slices.
    [("static", 16384, 1e-12), ("atp", 1024, 1e-12), ("esa", 1024, 1e-3)],
)
def test_in_rack_jobs_on_two_tors_are_independent_single_switch_runs(
    policy: str, aggregators: int, tolerance: float
) -> None:
    jobs = _jobs(24)
    cfg = SimConfig(PolicySpec(policy), Pool(aggregators, 64))
    run = simulate_fabric(jobs, cfg, _two_racks(aggregators))
    by_tor: dict[str, set[int]] = {}
    for job in run.jobs:
        assert job.tree == (job.racks[0][0],)
        by_tor.setdefault(job.racks[0][0], set()).add(job.job_id)
    assert set(by_tor) == {"tor0", "tor1"}
    got = {r.job_id: r for r in run.result.jobs}
    for ids in by_tor.values():
        alone = simulate([j for j in jobs if j.job_id in ids], cfg)
        for r in alone.jobs:
            assert got[r.job_id].admitted_s == r.admitted_s
            assert got[r.job_id].jct_s == pytest.approx(r.jct_s, rel=tolerance)


def _cfg(policy: str = "esa", aggregators: int = 16384) -> SimConfig:
    return SimConfig(PolicySpec(policy), Pool(aggregators, 64), ps_bps=25e9, ps_processes=PER_JOB)


def test_a_job_spans_racks_only_when_one_cannot_hold_it() -> None:
    fabric = two_level_fabric(2)  # 8 servers x 8 GPUs per rack
    jobs = [spec(0, workers=64), spec(1, workers=16, arrival_s=0.0), spec(2, workers=96)]
    run = simulate_fabric(jobs, _cfg(), fabric)
    trees = {j.job_id: j for j in run.jobs}
    assert trees[0].hosts == 8 and trees[0].tree == (trees[0].racks[0][0],)
    assert trees[2].hosts == 12 and trees[2].tree == ("tor0", "tor1", "spine")
    assert run.result.unfinished == 0


def test_a_job_wider_than_one_bitmap_or_than_the_fabric_is_refused_in_words() -> None:
    jobs = [spec(0, workers=33), spec(1, workers=32)]
    run = simulate_fabric(jobs, _cfg(), two_level_fabric(8, gpus_per_server=1))
    assert dict(run.result.refused) == {0: too_wide(33)}
    assert [r.job_id for r in run.result.jobs] == [1]
    # 200 GPUs on 8-GPU servers: 25 workers, within one bitmap, but the fabric has 128.
    run = simulate_fabric([spec(0, workers=200)], _cfg(), two_level_fabric(2))
    assert "this fabric has 1..128" in dict(run.result.refused)[0]


def test_every_job_takes_at_least_its_exclusive_ina_time() -> None:
    """The bound T >= T_ina: with exclusive INA at every switch of its tree (each alone in a
    private partition, each uplink its own) no policy's contention makes a job faster; on
    ToRs of 512 aggregators and a spine of 16, where the spine binds (tiered spills)."""
    jobs = [replace(j, workers=j.workers * 8) for j in _jobs(20)]
    fabric = two_level_fabric(4, tor_aggregators=512, spine_aggregators=16)
    for policy in ("atp", "esa", "tiered"):
        run = simulate_fabric(jobs, _cfg(aggregators=512), fabric, policy=policy,
                              placement="spread")  # fmt: skip
        times = {r.job_id: r.finished_s - r.admitted_s for r in run.result.jobs}
        assert any(len(j.racks) > 1 for j in run.jobs)
        if policy == "tiered":
            assert any(j.below_top_s > 0 for j in run.jobs)
        for job in run.jobs:
            assert times[job.job_id] >= job.t_ina_s * (1 - 1e-9), (policy, job)
            assert job.t_none_s > job.t_ina_s


def test_an_oversubscribed_uplink_slows_cross_rack_jobs_only() -> None:
    jobs = [spec(i, workers=16, grad_bytes=1 << 22, iterations=50) for i in range(4)]
    jobs += [spec(9, workers=8, grad_bytes=1 << 22, iterations=50)]
    fast = simulate_fabric(jobs, _cfg(), two_level_fabric(4), placement="spread")
    slow = simulate_fabric(
        jobs, _cfg(), two_level_fabric(4, oversubscription=64.0), placement="spread"
    )
    cross = {j.job_id for j in fast.jobs if len(j.racks) > 1}
    assert cross and 9 not in cross
    before = {r.job_id: r.jct_s for r in fast.result.jobs}
    after = {r.job_id: r.jct_s for r in slow.result.jobs}
    for job_id in cross:
        assert after[job_id] > before[job_id] * 1.5
    assert after[9] == pytest.approx(before[9], rel=1e-9)


def test_jobs_wait_for_gpus_and_start_when_they_free() -> None:
    fabric = two_level_fabric(1, servers_per_rack=2)  # 16 GPUs
    jobs = [spec(0, workers=16, iterations=100), spec(1, workers=8)]
    run = simulate_fabric(jobs, _cfg(), fabric)
    done = {r.job_id: r for r in run.result.jobs}
    assert done[1].admitted_s == pytest.approx(done[0].finished_s)
    assert done[1].queueing_s > 0


def test_a_run_is_deterministic_for_a_seed() -> None:
    jobs = [replace(j, workers=j.workers * 8) for j in _jobs(12)]
    runs = [
        simulate_fabric(
            jobs, _cfg(aggregators=512), two_level_fabric(4), policy="tiered", placement="spread"
        )  # fmt: skip
        for _ in range(2)
    ]
    assert runs[0] == runs[1]


def test_a_switch_sees_its_fan_in_and_the_round_trip_up_to_it() -> None:
    fabric = two_level_fabric(4)
    racks = (("tor0", 3), ("tor2", 1))
    assert [fan_in(fabric, racks, s) for s in ("tor0", "tor1", "tor2", "spine")] == [3, 0, 1, 2]
    cfg = _cfg()
    # Up and down one more link, through the spine and past the ToR again, serialised each
    # way at the ToR's uplink rate.
    gbps = fabric.uplink_gbps("tor0")
    assert gbps is not None
    serial = cfg.fragment_s * cfg.link_bps / (gbps * 1e9)
    hop = 2 * cfg.link_latency_s + 2 * cfg.switch_latency_s + 2 * serial
    assert switch_config(cfg, fabric, "tor0").rtt_s == cfg.rtt_s
    assert switch_config(cfg, fabric, "spine").rtt_s == pytest.approx(cfg.rtt_s + hop)
    assert switch_config(cfg, fabric, "spine").pool.aggregators == fabric.root.aggregators
