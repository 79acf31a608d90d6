"""The fragment-level fabric simulator: in-rack jobs are today's single-switch fragment runs, a
cross-rack job's sums complete at the spine, and the fabric validation families run."""

from __future__ import annotations

import heapq
from dataclasses import replace

import pytest
from p4ctl.rule import Outcome

from scheduler.config import PER_JOB, SimConfig
from scheduler.fabric import Fabric, Rack, Switch, two_level_fabric
from scheduler.fabricvalidate import (
    FABRIC_BOUNDS,
    FABRIC_FAMILIES,
    fabric_cases,
    validate_fabric,
)
from scheduler.fragfabric import _FragmentFabric, simulate_fabric_fragments
from scheduler.fragsim import simulate_fragments
from scheduler.memory import Pool
from scheduler.spec import PolicySpec
from scheduler.validate import cases

from .conftest import spec


def _two_racks(aggregators: int) -> Fabric:
    """A rack of 12 servers and a very large one under a spine, one GPU per server: packed
    placement fills the small rack first, and every job fits in one rack."""
    return Fabric(
        (
            Switch("spine", aggregators),
            Switch("tor0", aggregators, "spine", rack=Rack(servers=12)),
            Switch("tor1", aggregators, "spine", rack=Rack(servers=4096)),
        ),
        64,
        1,
    )


@pytest.mark.parametrize("policy", ["static", "atp", "esa"])
def test_in_rack_jobs_on_two_tors_are_independent_single_switch_fragment_runs(
    policy: str,
) -> None:
    """Exact (every job's admission and finish time, bytes and preemptions): without worker
    skew no draw of the generator depends on how the two racks' events interleave, and each
    ToR sees only its rack's jobs, as one switch would. static with memory to spare: a job
    waiting for memory is admitted by the fabric's placer in arrival order, not by the
    single switch's round (as in ``test_fabricsim``)."""
    [(jobs, base)] = cases("memory", 1, seed=1)
    cfg = replace(base, spec=replace(base.spec, policy=policy), worker_skew_s=0.0)
    aggregators = 1024 if policy == "static" else cfg.pool.aggregators
    cfg = replace(cfg, pool=Pool(aggregators, 64))
    run = simulate_fabric_fragments(jobs, cfg, _two_racks(aggregators))
    by_tor: dict[str, set[int]] = {}
    for job in run.jobs:
        assert job.tree == (job.racks[0][0],)
        by_tor.setdefault(job.racks[0][0], set()).add(job.job_id)
    assert set(by_tor) == {"tor0", "tor1"}
    got = {r.job_id: r for r in run.result.jobs}
    for ids in by_tor.values():
        alone = simulate_fragments([j for j in jobs if j.job_id in ids], cfg)
        assert alone.unfinished == 0
        for r in alone.jobs:
            assert got[r.job_id] == r


@pytest.mark.parametrize("policy", ["static", "atp", "esa"])
def test_a_cross_rack_jobs_sums_complete_at_the_spine(policy: str) -> None:
    """One job over two racks, memory to spare: each ToR completes its rack's local sum of
    every fragment and sends it up; the spine completes every fragment's whole sum; nothing
    goes to the PS; every packet passes the rule's checks."""
    fabric = two_level_fabric(2, servers_per_rack=2, gpus_per_server=1, tor_aggregators=256,
                              spine_aggregators=256)  # fmt: skip
    job = spec(0, workers=4, iterations=3)
    cfg = SimConfig(PolicySpec(policy), Pool(256, 64), ps_bps=25e9, ps_processes=PER_JOB)
    sim = _FragmentFabric([job], cfg, fabric, policy, "spread", cfg.rto_s)
    run = sim.run()
    [info] = run.jobs
    assert info.tree == ("tor0", "tor1", "spine") and dict(info.racks) == {"tor0": 2, "tor1": 2}
    sums = 32 * 3  # fragments x iterations
    for switch in ("tor0", "tor1", "spine"):
        assert sim.outcomes[(switch, Outcome.COMPLETED)] == sums, switch
    assert not any(o in (Outcome.COLLISION, Outcome.FLUSHED) for _, o in sim.outcomes)
    assert sim.dropped == 0
    assert run.result.switch_share() == 1.0 and run.result.unfinished == 0


@pytest.mark.parametrize("policy", ["static", "atp", "esa"])
def test_a_three_level_job_completes_at_every_switch_of_its_tree(policy: str) -> None:
    """One rule at every level: a middle switch has a parent and children (one of them here
    has a single child in the job's tree, and still completes its sum and sends it up)."""
    rack = Rack(servers=2)
    fabric = Fabric(
        (
            Switch("spine", 256),
            Switch("a0", 256, "spine"),
            Switch("a1", 256, "spine"),
            Switch("t0", 256, "a0", rack=rack),
            Switch("t1", 256, "a0", rack=rack),
            Switch("t2", 256, "a1", rack=rack),
        ),
        64,
        1,
    )
    cfg = SimConfig(PolicySpec(policy), Pool(256, 64), ps_bps=25e9, ps_processes=PER_JOB)
    sim = _FragmentFabric([spec(0, workers=6, iterations=3)], cfg, fabric, policy, "spread",
                          cfg.rto_s)  # fmt: skip
    run = sim.run()
    assert set(run.jobs[0].tree) == {"t0", "t1", "t2", "a0", "a1", "spine"}
    for switch in run.jobs[0].tree:
        assert sim.outcomes[(switch, Outcome.COMPLETED)] == 32 * 3, switch
    assert sim.dropped == 0 and run.result.unfinished == 0


def test_a_cross_rack_job_takes_longer_than_one_in_a_rack() -> None:
    """The spine adds a level to every fragment's round trip."""
    cfg = SimConfig(PolicySpec("esa"), Pool(256, 64), ps_bps=25e9, ps_processes=PER_JOB)
    fabric = two_level_fabric(2, servers_per_rack=4, gpus_per_server=1, tor_aggregators=256,
                              spine_aggregators=256)  # fmt: skip
    job = spec(0, workers=4, iterations=3)
    packed = simulate_fabric_fragments([job], cfg, fabric, placement="packed")
    spread = simulate_fabric_fragments([job], cfg, fabric, placement="spread")
    assert len(packed.jobs[0].tree) == 1 and len(spread.jobs[0].tree) == 3
    assert spread.result.jobs[0].jct_s > packed.result.jobs[0].jct_s


def test_an_oversubscribed_uplink_slows_a_cross_rack_job() -> None:
    cfg = SimConfig(PolicySpec("static"), Pool(256, 64), window=64)
    jobs = [spec(0, workers=4, iterations=3, grad_bytes=128 * 256, iter_time_s=1e-6)]

    def jct(over: float) -> float:
        fabric = two_level_fabric(2, servers_per_rack=2, gpus_per_server=1,
                                  tor_aggregators=256, spine_aggregators=256,
                                  oversubscription=over)  # fmt: skip
        return simulate_fabric_fragments(jobs, cfg, fabric, placement="spread").result.jobs[0].jct_s

    assert jct(32.0) > 1.5 * jct(1.0)


def test_tiered_spills_a_job_to_its_tors_with_the_ps_as_parent_and_every_job_finishes() -> None:
    """PROTOCOL.md 7.8 in the simulator: with 32 aggregators on the spine, tiered moves a
    cross-rack job off the spine; its ToRs then send their sums to the PS as UP, and the
    PS's results reach every ToR (else the job's workers never finish)."""
    case = fabric_cases("spine-memory", 2, seed=0)[1]
    cfg = replace(case.cfg, spec=replace(case.cfg.spec, policy="esa"))
    sim = _FragmentFabric(case.jobs, cfg, case.fabric, "tiered", case.placement, cfg.rto_s)
    run = sim.run()
    assert len(run.jobs) == len(case.jobs)  # every job finished
    spilled = {s for s, n in sim.spilled.items() if n > 0}
    assert spilled and all(case.fabric.switch(s).parent is not None for s in spilled), spilled


def test_one_fabric_rank_is_esa_where_every_job_meets_the_same_rivals_everywhere() -> None:
    """Each switch ranks its jobs in the fabric's order, and with fewer jobs than levels every
    rank has a level of its own, so each preemption goes the same way under the fabric's one
    level (``tiered-nospill``) as under each switch's own (``esa``): the same run, exactly."""
    [case] = fabric_cases("spine-memory", 1)
    runs = {
        policy: simulate_fabric_fragments(case.jobs, case.cfg, case.fabric, policy=policy,
                                          placement=case.placement)
        for policy in ("esa", "tiered-nospill")
    }  # fmt: skip
    assert len(case.jobs) <= case.cfg.spec.levels
    assert all(len(j.racks) > 1 for j in runs["esa"].jobs)
    assert runs["esa"].result.jobs == runs["tiered-nospill"].result.jobs


@pytest.mark.parametrize("family", ["spine-memory", "tor-memory"])
def test_the_fluid_fabric_model_holds_its_bound_where_memory_binds(family: str) -> None:
    errors = validate_fabric(count=2, family=family)
    assert {e.policy for e in errors} == {"static", "atp", "esa"}
    worst = max(errors, key=lambda e: e.jct_rel_error)
    assert worst.jct_rel_error <= FABRIC_BOUNDS[family], worst


def test_the_families_run_and_print_their_table(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.fabricvalidate import main

    main(["--cases", "1", "--families", ",".join(FABRIC_FAMILIES)])
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    table = [r for r in rows if r and r[0] in FABRIC_FAMILIES and len(r) == 11]
    assert {(r[0], r[1]) for r in table} == {
        (f, p) for f in FABRIC_FAMILIES for p in ("static", "atp", "esa")
    }
    assert all(r[-1] in ("yes", "NO") and r[-3] in ("yes", "NO") for r in table)


def test_an_unknown_family_is_named() -> None:
    with pytest.raises(ValueError, match="unknown fabric validation family 'x'"):
        validate_fabric(family="x")


@pytest.mark.parametrize("family", ["light", "memory"])
def test_static_jobs_across_racks_under_loss_finish(family: str) -> None:
    """A lost fragment's slot is not reused before its result is in (PROTOCOL.md section 3):
    past a lost fragment the window slides on, and fragment + part_size would overwrite the
    lost one's copy, whose resend every switch would drop as stale for ever. The event budget
    stops a run that never ends (a healthy one takes at most a few 10^5 events)."""
    fabric = two_level_fabric(2, servers_per_rack=16, gpus_per_server=1, tor_aggregators=4096,
                              spine_aggregators=4096)  # fmt: skip
    for jobs, base in cases(family, 2):
        cfg = replace(base, spec=replace(base.spec, policy="static"), loss_rate=0.01)
        sim = _FragmentFabric(jobs, cfg, fabric, "static", "spread", cfg.rto_s)
        while sim.heap and sim.events < 400_000:
            t, _, action = heapq.heappop(sim.heap)
            sim.clock.advance_to(t)
            sim.events += 1
            action()
        assert not sim.heap, f"still running after {sim.events} events"
