from __future__ import annotations

import pytest

from scheduler.errors import UnknownName
from scheduler.memory import JobState
from scheduler.priority import get_priority, levels

from .conftest import view

RUN = JobState.RUNNING


def test_srtf_gives_the_shortest_remaining_job_the_highest_level() -> None:
    jobs = [view(1, RUN, iterations=100), view(2, RUN, iterations=10)]
    ranked = levels(jobs, get_priority("srtf"), n_levels=16)
    assert ranked[2] > ranked[1]
    assert ranked[2] == 15


def test_las_fifo_and_static_orders() -> None:
    a = view(1, RUN, iterations_done=50, arrival_s=0.0, priority_class=0)
    b = view(2, RUN, iterations_done=5, arrival_s=9.0, priority_class=3)
    assert levels([a, b], get_priority("las"))[2] > levels([a, b], get_priority("las"))[1]
    assert levels([a, b], get_priority("fifo"))[1] > levels([a, b], get_priority("fifo"))[2]
    assert levels([a, b], get_priority("static"))[2] > levels([a, b], get_priority("static"))[1]


def test_aging_lifts_a_starved_job_one_level_per_threshold() -> None:
    jobs = [view(i, RUN, iterations=10 * (i + 1)) for i in range(4)]
    plain = levels(jobs, get_priority("srtf"), n_levels=4, aging_s=10.0)
    starved = [*jobs[:3], view(3, RUN, iterations=40, starved_s=25.0)]
    aged = levels(starved, get_priority("srtf"), n_levels=4, aging_s=10.0)
    assert aged[3] == plain[3] + 2


def test_levels_stay_in_range() -> None:
    jobs = [view(i, RUN, iterations=i + 1, starved_s=1e6) for i in range(40)]
    assert set(levels(jobs, get_priority("srtf"), n_levels=16).values()) <= set(range(16))


def test_unknown_priority_names_the_known_ones() -> None:
    with pytest.raises(UnknownName, match="srtf"):
        get_priority("nope")


def test_a_job_that_overran_its_declaration_ranks_by_attained_service_below_an_honest_one() -> None:
    # The liar declared 1 iteration and the switch counted 200 (its view carries the counted
    # work); the honest job declared 40 and is 5 in.
    liar = view(1, RUN, iterations=1, iterations_done=200, overran_declaration=True)
    honest = view(2, RUN, iterations=40, iterations_done=5)
    ranked = levels([liar, honest], get_priority("srtf"), n_levels=16)
    assert ranked[2] > ranked[1]
    # Not even an honest job with more attained service and much more left ranks below it.
    rich = view(3, RUN, iterations=10_000, iterations_done=300)
    ranked = levels([liar, rich], get_priority("srtf"), n_levels=16)
    assert ranked[3] > ranked[1]
    # Nor one of unknown length, nor one of the same attained service.
    unknown = view(4, RUN, iterations=None, iterations_done=200, arrival_s=99.0)
    same = view(5, RUN, iterations=1000, iterations_done=200, arrival_s=99.0)
    for other in (unknown, same):
        ranked = levels([liar, other], get_priority("srtf"), n_levels=16)
        assert ranked[other.job_id] > ranked[1]


def test_jobs_that_overran_their_declarations_rank_among_themselves_by_attained_service() -> None:
    far = view(1, RUN, iterations=1, iterations_done=500, overran_declaration=True)
    near = view(2, RUN, iterations=1, iterations_done=20, overran_declaration=True)
    honest = view(3, RUN, iterations=10, iterations_done=0)
    ranked = levels([far, near, honest], get_priority("srtf"), n_levels=3)
    assert ranked == {3: 2, 2: 1, 1: 0}
    assert far.remaining_bytes == float("inf")
