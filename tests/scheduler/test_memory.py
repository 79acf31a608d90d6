from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.errors import IllegalTransition, MemoryConflict
from scheduler.memory import (
    JobState,
    MemoryMap,
    Partition,
    Pool,
    check_transition,
    first_fit,
    partition_slots,
)


def test_partition_covers_two_copies_per_slot() -> None:
    assert Partition(10, 4).end == 18
    assert Partition(0, 4).overlaps(Partition(7, 1))
    assert not Partition(0, 4).overlaps(Partition(8, 1))


def test_first_fit_finds_the_lowest_hole() -> None:
    taken = [Partition(0, 2), Partition(8, 2)]
    assert first_fit(Pool(16), taken, 2) == Partition(4, 2)
    assert first_fit(Pool(16), taken, 4) is None


@pytest.mark.parametrize(("window", "slots"), [(1, 1), (2, 2), (3, 4), (100, 128), (128, 128)])
def test_partition_slots_round_a_window_up_to_a_power_of_two(window: int, slots: int) -> None:
    assert partition_slots(window) == slots


def test_first_fit_and_reserve_refuse_a_partition_the_switch_cannot_check() -> None:
    with pytest.raises(ValueError, match="power-of-two"):
        first_fit(Pool(16), [], 3)
    with pytest.raises(MemoryConflict, match="not a power of two"):
        MemoryMap(Pool(16)).reserve(1, Partition(0, 3))
    with pytest.raises(ValueError, match="at least one"):
        partition_slots(0)


def test_reserve_refuses_overlap_and_release_is_idempotent() -> None:
    mem = MemoryMap(Pool(16))
    mem.reserve(1, Partition(0, 4))
    with pytest.raises(MemoryConflict):
        mem.reserve(2, Partition(6, 2))
    with pytest.raises(MemoryConflict):
        mem.reserve(3, Partition(12, 4))
    assert mem.release(1) == Partition(0, 4)
    assert mem.release(1) is None


def test_illegal_transition_is_a_typed_error() -> None:
    assert check_transition(1, JobState.QUEUED, JobState.ADMITTED) is JobState.ADMITTED
    with pytest.raises(IllegalTransition) as err:
        check_transition(1, JobState.FINISHED, JobState.CANCELLED)
    assert (err.value.old, err.value.new) == ("finished", "cancelled")


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 9), st.integers(1, 12)), max_size=60))
def test_partitions_never_overlap_and_capacity_is_never_exceeded(
    ops: list[tuple[bool, int, int]],
) -> None:
    pool = Pool(64)
    mem = MemoryMap(pool)
    for reserve, job, window in ops:
        if reserve and job not in mem.partitions():
            others = [p for j, p in mem.partitions().items() if j != job]
            part = first_fit(pool, others, partition_slots(window))
            if part is not None:
                mem.reserve(job, part)
        else:
            mem.release(job)
        parts = list(mem.partitions().values())
        assert mem.used() <= pool.aggregators
        assert all(p.end <= pool.aggregators for p in parts)
        for i, a in enumerate(parts):
            assert not any(a.overlaps(b) for b in parts[i + 1 :])
