from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scheduler
from scheduler.errors import UnknownName
from scheduler.memory import JobState, MemoryMap, Pool
from scheduler.scheduler import Scheduler
from scheduler.snapshot import Admit, Queue, Reclaim, Reject, SetPriority
from scheduler.spec import PolicySpec

from .conftest import view

RUN = JobState.RUNNING


def test_public_names_are_sorted() -> None:
    assert scheduler.__all__ == sorted(scheduler.__all__)
    for name in scheduler.__all__:
        assert hasattr(scheduler, name)


def test_static_queues_fifo_and_backfills_a_job_that_fits() -> None:
    s = Scheduler(PolicySpec("static"), pool=Pool(64))
    jobs = [view(1, window=16), view(2, window=24), view(3, window=8)]
    decisions = s.decide(s.snapshot(0.0, jobs))
    assert isinstance(decisions[0], Admit) and decisions[0].partition is not None
    assert isinstance(decisions[1], Queue)
    assert isinstance(decisions[2], Admit)  # backfilled past job 2


def test_static_rejects_a_window_larger_than_the_pool() -> None:
    s = Scheduler(PolicySpec("static"), pool=Pool(16))
    (decision,) = s.decide(s.snapshot(0.0, [view(1, window=9)]))
    assert isinstance(decision, Reject) and "smaller window" in decision.reason


def test_static_rounds_a_window_up_to_a_power_of_two_partition() -> None:
    s = Scheduler(PolicySpec("static"), pool=Pool(512))
    (admit,) = s.decide(s.snapshot(0.0, [view(1, window=100)]))
    assert isinstance(admit, Admit) and admit.partition is not None
    assert (admit.partition.base, admit.partition.slots) == (0, 128)


def test_static_rejection_names_the_rounded_partition_and_a_window_that_fits() -> None:
    # 9 slots would fit 18 aggregators, but the switch needs 16 slots (32 aggregators).
    s = Scheduler(PolicySpec("static"), pool=Pool(18))
    (decision,) = s.decide(s.snapshot(0.0, [view(1, window=9)]))
    assert isinstance(decision, Reject)
    assert "16 slots" in decision.reason and "at most 8" in decision.reason


def test_shared_policies_admit_everyone_with_a_seeded_hash() -> None:
    for name in ("atp", "esa"):
        s = Scheduler(PolicySpec(name), pool=Pool(8), seed=7)
        decisions = s.decide(s.snapshot(0.0, [view(i) for i in range(20)]))
        admits = [d for d in decisions if isinstance(d, Admit)]
        assert len(admits) == 20
        assert admits == [
            d
            for d in s.decide(s.snapshot(5.0, [view(i) for i in range(20)]))
            if isinstance(d, Admit)
        ]
        assert len({a.hash_seed for a in admits}) == 20


def test_esa_sets_priorities_and_only_changes() -> None:
    s = Scheduler(PolicySpec("esa", "srtf"))
    jobs = [view(1, RUN, iterations=100, priority=0), view(2, RUN, iterations=10, priority=15)]
    decisions = s.decide(s.snapshot(0.0, jobs))
    assert decisions == (SetPriority(1, 7),)


def test_atp_sets_no_priorities() -> None:
    s = Scheduler(PolicySpec("atp"))
    decisions = s.decide(s.snapshot(0.0, [view(1), view(2, RUN, hash_seed=3)]))
    assert not any(isinstance(d, SetPriority) for d in decisions)


def test_a_terminal_job_holding_memory_is_reclaimed() -> None:
    s = Scheduler(PolicySpec("static"), pool=Pool(64))
    part = s.decide(s.snapshot(0.0, [view(1, window=4)]))[0]
    assert isinstance(part, Admit)
    done = view(1, JobState.FINISHED, window=4, partition=part.partition)
    assert s.decide(s.snapshot(1.0, [done])) == (Reclaim(1, part.partition),)


def test_unknown_policy_names_the_known_ones() -> None:
    with pytest.raises(UnknownName, match="atp, esa, esa-nopreempt, esa-norelease, static"):
        Scheduler(PolicySpec("swapped"))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 20), st.booleans()), min_size=1, max_size=30))
def test_static_partitions_are_powers_of_two_that_never_overlap_or_exceed_the_pool(
    arrivals: list[tuple[int, bool]],
) -> None:
    s = Scheduler(PolicySpec("static"), pool=Pool(96))
    mem = MemoryMap(s.pool)
    jobs = {}
    for i, (window, finish_one) in enumerate(arrivals):
        jobs[i] = view(i, window=window)
        if finish_one:
            running = [j for j in jobs.values() if j.state == RUN]
            if running:
                jobs[running[0].job_id] = replace(running[0], state=JobState.FINISHED)
        for d in s.decide(s.snapshot(float(i), jobs.values())):
            job = jobs[d.job_id]
            if isinstance(d, Admit):
                assert d.partition is not None
                slots = d.partition.slots
                assert slots & (slots - 1) == 0 and slots >= job.window
                mem.reserve(d.job_id, d.partition)  # raises on any overlap or overflow
                jobs[d.job_id] = replace(job, state=RUN, partition=d.partition)
            elif isinstance(d, Reclaim):
                mem.release(d.job_id)
                jobs[d.job_id] = replace(job, partition=None)
        assert mem.used() <= s.pool.aggregators
