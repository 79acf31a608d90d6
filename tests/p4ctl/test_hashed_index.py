"""The shared-pool placement of atp/esa fragments (``p4ctl.rule.hashed_index``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from p4ctl.rule import hashed_index


@given(seed=st.integers(0, 2**32 - 1), pool=st.integers(1, 5000), start=st.integers(0, 10**6))
def test_pool_consecutive_fragments_use_distinct_aggregators(seed: int, pool: int, start: int):
    span = min(pool, 300)
    indices = [hashed_index(seed, seq, pool) for seq in range(start, start + span)]
    assert all(0 <= i < pool for i in indices)
    assert len(set(indices)) == span


def test_a_whole_pool_is_a_permutation() -> None:
    for pool in (1, 2, 255, 256, 20_000):
        assert sorted(hashed_index(7, seq, pool) for seq in range(pool)) == list(range(pool))


def test_jobs_with_different_seeds_collide_as_random_placements_do() -> None:
    # Two jobs' windows of W fragments over N aggregators share about W*W/N of them.
    pool, window, trials = 256, 32, 400
    shared = 0
    for t in range(trials):
        a = {hashed_index(2 * t, seq, pool) for seq in range(window)}
        b = {hashed_index(2 * t + 1, seq, pool) for seq in range(window)}
        shared += len(a & b)
    mean = shared / trials
    assert 0.5 * window * window / pool < mean < 1.5 * window * window / pool
