"""`api.outage.Outage`: episodes start at the first failure, end at the first success."""

from __future__ import annotations

from api.outage import Outage


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_episode_runs_from_the_first_failure_to_the_first_success() -> None:
    clock = Clock()
    outage = Outage(clock)
    assert outage.end() is None and outage.away_s() == 0.0 and outage.since is None
    assert outage.fail() is True
    clock.now += 3
    assert outage.fail() is False
    assert outage.away_s() == 3.0 and outage.since is not None
    clock.now += 4
    assert outage.end() == (7.0, 2)
    assert outage.end() is None and outage.away_s() == 0.0 and outage.since is None


def test_a_failure_of_another_kind_starts_a_new_episode() -> None:
    clock = Clock()
    outage = Outage(clock)
    outage.fail()
    clock.now += 5
    assert outage.fail(new=True) is True
    clock.now += 1
    assert outage.end() == (1.0, 1)
