"""The one decision applier, on a simulator's job table and an in-memory switch: the
policy-change bug (hashed jobs inside static partitions) and the registry of names."""

from __future__ import annotations

import pytest
from p4ctl.backend import JobInstall
from p4ctl.protocol import Policy as SwitchPolicy
from p4ctl.rule import hashed_index

from scheduler.applier import DecisionApplier, PsRefused, Waiting, switch_rule
from scheduler.errors import IllegalTransition, MemoryConflict, PsUnavailable
from scheduler.jobs import SIMULATED_PS, JobRecord, JobTable
from scheduler.memory import JobState, MemoryMap, Partition, Pool
from scheduler.registry import POLICIES, make_policy, policy_names, priority_names
from scheduler.scheduler import Scheduler
from scheduler.snapshot import Queue
from scheduler.spec import PolicySpec

from .conftest import spec

POOL = Pool(64, lanes=0)


def _table(policy: str) -> JobTable:
    return JobTable(Scheduler(PolicySpec(policy), pool=POOL, seed=1), window=8)


def _state(rec: JobRecord) -> JobState:
    return rec.state  # read anew: the table changes it


def _change_policy(table: JobTable, policy: str) -> None:
    table.scheduler = Scheduler(PolicySpec(policy), pool=POOL, seed=1)


def test_a_policy_change_keeps_hashed_jobs_out_of_static_partitions() -> None:
    table = _table("static")
    first, second = table.add(spec(1)), table.add(spec(2))
    table.decide(0.0)
    assert first.partition == Partition(0, 8) and second.partition == Partition(16, 8)
    _change_policy(table, "atp")
    hashed = table.add(spec(3))
    decisions = table.decide(1.0)
    # Job 1's partition starts at aggregator 0: there is no shared pool below it yet.
    assert hashed.state == JobState.QUEUED
    assert any(isinstance(d, Queue) and d.job_id == 3 for d in decisions)
    table.start(2.0, first)
    table.finish(2.0, first)
    assert _state(hashed) == JobState.ADMITTED and hashed.shared_pool == 16
    assert hashed.hash_seed is not None
    used = {hashed_index(hashed.hash_seed, seq, hashed.shared_pool) for seq in range(1000)}
    assert max(used) < second.partition.base if second.partition else False
    assert table.memory.shared() == {3: 16}


def test_a_static_partition_waits_for_the_shared_pool_in_use() -> None:
    table = _table("esa")
    hashed = table.add(spec(1))
    table.decide(0.0)
    assert hashed.state == JobState.ADMITTED and hashed.shared_pool == POOL.aggregators
    _change_policy(table, "static")
    static = table.add(spec(2))
    table.decide(1.0)
    assert static.state == JobState.QUEUED
    table.start(2.0, hashed)
    table.finish(2.0, hashed)
    assert _state(static) == JobState.ADMITTED and static.partition == Partition(0, 8)


def test_the_memory_map_refuses_a_shared_pool_over_a_partition() -> None:
    memory = MemoryMap(POOL)
    memory.reserve(1, Partition(16, 8))
    memory.reserve_shared(2, 16)
    with pytest.raises(MemoryConflict, match="overlaps job 1"):
        memory.reserve_shared(3, 17)
    with pytest.raises(MemoryConflict, match="shared pool"):
        memory.reserve(4, Partition(0, 4))
    memory.release(2)
    memory.reserve(4, Partition(0, 4))


def test_the_applier_checks_every_transition() -> None:
    table = _table("atp")
    job = table.add(spec(1))
    with pytest.raises(IllegalTransition):
        table.start(0.0, job)  # still queued
    table.decide(0.0)
    sid = job.switch_job_id
    assert sid is not None and sid in table.switch.installed_jobs()
    table.start(1.0, job)
    table.finish(1.0, job)
    assert job.switch_job_id is None and sid not in table.switch.installed_jobs()
    with pytest.raises(IllegalTransition):
        table.applier.transition(table, 1, JobState.CANCELLED, now=2.0)


def test_the_registry_names_every_policy_and_priority() -> None:
    assert policy_names() == ("static", "atp", "esa")
    assert priority_names() == ("fifo", "las", "srtf", "static")
    for name in policy_names():
        assert make_policy(PolicySpec(name)).name == name == POLICIES[name].name  # type: ignore[attr-defined]


def test_a_job_keeps_the_switch_rule_it_was_admitted_under() -> None:
    table = _table("static")
    static = table.add(spec(1))
    table.decide(0.0)
    _change_policy(table, "esa")
    table.add(spec(2))
    table.decide(1.0)  # esa's round: job 2 waits below job 1's partition, job 1 gets a level
    jobs = table.switch.pipeline.jobs  # type: ignore[attr-defined]
    assert static.switch_job_id is not None
    assert jobs[static.switch_job_id].policy == SwitchPolicy.STATIC
    assert [switch_rule(p) for p in ("static", "atp", "esa")] == [
        SwitchPolicy.STATIC,
        SwitchPolicy.ATP,
        SwitchPolicy.ESA,
    ]


class _ReasonsTable(JobTable):
    """A simulator's table that keeps the last reason each queued job was given."""

    reasons: dict[int, Waiting]

    def set_reason(self, job_id: int, why: Waiting) -> bool:
        self.reasons[job_id] = why
        return True


@pytest.mark.parametrize("policy", ["static", "esa"])
def test_a_job_its_ps_does_not_take_stays_queued_holding_nothing(policy: str) -> None:
    table = _ReasonsTable(Scheduler(PolicySpec(policy), pool=POOL, seed=1), window=8)
    table.reasons = {}
    registered: list[int] = []
    refused = PsUnavailable("PS control at 10.77.0.1:9557: [Errno 111] Connection refused")
    away: PsUnavailable | None = refused

    def register_ps(install: JobInstall, window: int) -> None:
        if away is not None:
            raise away
        assert install.job_id not in table.switch.installed_jobs()  # the PS first
        registered.append(install.job_id)

    table.applier = DecisionApplier(
        backend=table.switch, pool=POOL, ps=SIMULATED_PS, register_ps=register_ps
    )
    job = table.add(spec(1))
    table.decide(0.0)
    assert job.state == JobState.QUEUED and job.switch_job_id is None
    assert table.reasons[1] == PsRefused(refused)
    assert str(refused) in table.reasons[1].reason
    assert table.switch.installed_jobs() == set()
    assert table.memory.partitions() == {} and table.memory.shared() == {}
    assert table.applier.ids.owners == {}
    away = None
    table.decide(1.0)
    assert job.state == JobState.ADMITTED and job.switch_job_id is not None
    assert registered == [job.switch_job_id] == sorted(table.switch.installed_jobs())
