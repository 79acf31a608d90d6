"""Fabric policies: tiered's spill below the spine's memory line and its one fabric-wide rank,
each ablation dropping one idea; the fluid model's PS cost of per-rack partial sums."""

from __future__ import annotations

import math

import pytest

from scheduler.config import PER_JOB, SimConfig
from scheduler.errors import UnknownName
from scheduler.fabric import two_level_fabric
from scheduler.fabricflow import FabricFlow, FabricFluid, no_ina_comm_s
from scheduler.memory import JobState, Pool
from scheduler.registry import (
    FABRIC_POLICIES,
    POLICIES,
    fabric_policy_names,
    make_fabric_policy,
    make_policy,
)
from scheduler.spec import PolicySpec
from scheduler.tiered import AggregateAt, FabricJobView, FabricSnapshot, PerSwitch

from .conftest import view

SPEC = PolicySpec("esa")


def _job(job_id: int, racks: dict[str, int], left: int) -> FabricJobView:
    """A running job with `left` iterations to go (srtf ranks it by that)."""
    fabric = two_level_fabric(4)
    v = view(job_id, JobState.RUNNING, workers=sum(racks.values()), iterations=100,
             iterations_done=100 - left)  # fmt: skip
    return FabricJobView(v, tuple(racks.items()), fabric.tree_of(racks), held=128.0)


def _snapshot(spine: int, *jobs: FabricJobView) -> FabricSnapshot:
    return FabricSnapshot(two_level_fabric(4, spine_aggregators=spine), jobs, 128)


def test_fabric_policies_are_registered_apart_from_the_switch_policies() -> None:
    assert fabric_policy_names() == ("tiered", "tiered-nospill", "tiered-local")
    assert not set(FABRIC_POLICIES) & set(POLICIES)
    assert make_fabric_policy("tiered", SPEC).switch_policy == "esa"
    per_switch = make_fabric_policy("atp", SPEC)
    assert isinstance(per_switch, PerSwitch) and per_switch.switch_policy == "atp"
    with pytest.raises(UnknownName, match="tiered"):
        make_fabric_policy("mina", SPEC)


def test_cross_rack_jobs_below_the_spine_memory_line_aggregate_at_their_tors() -> None:
    jobs = (
        _job(1, {"tor0": 2, "tor1": 2}, left=10),
        _job(2, {"tor0": 1, "tor2": 1, "tor3": 1}, left=90),
        _job(3, {"tor1": 3, "tor2": 1}, left=50),
        _job(4, {"tor3": 8}, left=99),
    )
    out = {a.job_id: a for a in make_fabric_policy("tiered", SPEC).aggregate(_snapshot(256, *jobs))}
    # Two windows of 128 fill the spine: the two shortest cross-rack jobs hold it.
    assert out[1].switches == ("tor0", "tor1", "spine") and out[1].ps_partials == 0
    assert out[3].switches == ("tor1", "tor2", "spine")
    assert out[2].switches == ("tor0", "tor2", "tor3") and out[2].ps_partials == 3
    assert out[4].switches == ("tor3",) and out[4].ps_partials == 0
    # One rank: a level per job, the shortest job highest, the same at every switch.
    assert out[1].level is not None and out[2].level is not None
    assert out[1].level > out[3].level > out[2].level


def test_each_ablation_drops_one_idea() -> None:
    jobs = (_job(1, {"tor0": 2, "tor1": 2}, left=10), _job(2, {"tor2": 1, "tor3": 1}, left=90))
    snap = _snapshot(128, *jobs)
    nospill = make_fabric_policy("tiered-nospill", SPEC).aggregate(snap)
    assert [a.switches[-1] for a in nospill] == ["spine", "spine"]
    assert all(a.level is not None for a in nospill)
    local = make_fabric_policy("tiered-local", SPEC).aggregate(snap)
    assert local[1] == AggregateAt(2, ("tor2", "tor3"), 2, None)
    assert local[0].level is None


def test_a_fabric_policy_is_pure() -> None:
    jobs = tuple(_job(i, {"tor0": 1, f"tor{1 + i % 3}": 1}, left=10 * i) for i in range(1, 8))
    policy = make_fabric_policy("tiered", SPEC)
    snap = _snapshot(512, *jobs)
    assert policy.aggregate(snap) == policy.aggregate(snap)


def _cfg() -> SimConfig:
    return SimConfig(PolicySpec("esa"), Pool(16384, 64), ps_bps=25e9, ps_processes=PER_JOB)


def test_per_rack_partials_cost_the_ps_one_packet_per_rack_not_per_worker() -> None:
    """A job of 16 workers in 2 racks aggregating at its ToRs: its PS adds 2 partial sums per
    fragment, so its allreduce is PS-bound at 2 packets per fragment, far from the 16 of no
    INA at all, and slower than at the spine."""
    cfg, fabric = _cfg(), two_level_fabric(2)
    racks = (("tor0", 8), ("tor1", 8))
    grad = 1 << 22
    frags = math.ceil(grad / cfg.payload_bytes)
    policy = make_policy(PolicySpec("esa"))

    def t_comm(switches: tuple[str, ...], partials: int) -> float:
        flow = FabricFlow(7, racks, switches, partials, grad, 0.01, ())
        return FabricFluid(cfg, fabric, policy).rates([flow])[7].t_comm_s

    at_tors = t_comm(("tor0", "tor1"), 2)
    at_spine = t_comm(("tor0", "tor1", "spine"), 0)
    none = no_ina_comm_s(cfg, fabric, racks, grad)
    assert at_tors >= frags * 2 * cfg.ps_fragment_s
    assert at_tors < frags * 3 * cfg.ps_fragment_s
    assert at_spine < at_tors < none / 4


def test_the_spine_line_counts_what_jobs_hold_on_average() -> None:
    """Four jobs holding 64 aggregators on average fill what two of 128 do; a fifth finds no
    room."""
    jobs = tuple(
        FabricJobView(j.view, j.racks, j.tree, held=64.0)
        for j in (_job(i, {"tor0": 1, "tor1": 1}, left=10 * i) for i in range(1, 6))
    )
    out = make_fabric_policy("tiered", SPEC).aggregate(_snapshot(256, *jobs))
    assert [a.ps_partials for a in out] == [0, 0, 0, 0, 2]


def test_the_first_job_keeps_the_spine_however_small_its_pool() -> None:
    jobs = (_job(1, {"tor0": 1, "tor1": 1}, left=10), _job(2, {"tor2": 1, "tor3": 1}, left=20))
    out = make_fabric_policy("tiered", SPEC).aggregate(_snapshot(16, *jobs))
    assert [a.ps_partials for a in out] == [0, 2]
