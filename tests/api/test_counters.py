"""Switch counters onto jobs: relative to the reused id's base; starvation for aging."""

from __future__ import annotations

from api.coordinator.counters import (
    OTHER_TENANTS,
    settle_counters,
    tenant_switch_view,
    track_starvation,
    view_job_ids,
)
from api.schemas import FabricSwitchPublic, SwitchCountersPublic, SwitchPublic
from api.store.models import Job


def test_counters_of_a_reused_switch_job_id_start_from_its_base() -> None:
    job = Job(counter_base={"job_preempted": 5, "job_evicted": 2, "job_bypassed": 10})
    job.preemptions_caused = job.preemptions_suffered = job.bypassed = 0
    raw = {"job_preempted": 8, "job_evicted": 2, "job_bypassed": 9}
    assert settle_counters(job, raw)
    assert (job.preemptions_caused, job.preemptions_suffered, job.bypassed) == (3, 0, 0)
    assert not settle_counters(job, raw)


def test_a_bypassed_job_starves_until_it_aggregates_unhindered() -> None:
    starved: dict[int, float] = {}
    owners = {7: 70}
    first = {7: {"job_aggregated": 1, "job_bypassed": 1}}
    track_starvation(starved, first, {}, owners, elapsed_s=0.5)
    second = {7: {"job_aggregated": 1, "job_bypassed": 3}}
    track_starvation(starved, second, first, owners, elapsed_s=0.5)
    assert starved == {70: 1.0}
    third = {7: {"job_aggregated": 4, "job_bypassed": 3}}
    track_starvation(starved, third, second, owners, elapsed_s=0.5)
    assert starved == {}


def test_a_tenant_sees_only_its_jobs_on_every_switch_of_a_fabric() -> None:
    counters = SwitchCountersPublic(
        jobs={"5": {"job_aggregated": 3}, "6": {"job_aggregated": 4}}, drops={"bad_kind": 1}
    )
    one = FabricSwitchPublic(
        name="tor0",
        data="127.0.0.1:9",
        aggregators=8,
        lanes=64,
        runs=[(0, 2, 5, 1), (2, 2, 6, 1)],
        counters=counters,
    )
    view = SwitchPublic(
        aggregators=8, lanes=64, runs=[], counters=SwitchCountersPublic(jobs={}, drops={}),
        switches=[one],
    )  # fmt: skip
    assert view_job_ids(view) == {5, 6}
    mine = tenant_switch_view(view, {5}).switches[0]
    assert mine.runs == [(0, 2, 5, 1), (2, 2, OTHER_TENANTS, 1)]
    assert mine.counters.jobs == {"5": {"job_aggregated": 3}}
    assert mine.counters.drops == {"bad_kind": 1} and mine.name == "tor0"
