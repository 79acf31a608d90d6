"""Placing jobs' servers onto racks: the policies on hand-checked cases, and the placer's
invariants (no server over its GPUs, free gives everything back) on any sequence."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from scheduler.errors import PlacementError, UnknownName
from scheduler.fabric import Fabric, two_level_fabric
from scheduler.placement import (
    PackedPlacement,
    Placement,
    Placer,
    Share,
    SpreadPlacement,
    placement_names,
)


def _small(racks: int = 3) -> Fabric:
    """`racks` racks of 2 servers of 4 GPUs."""
    return two_level_fabric(racks, servers_per_rack=2, gpus_per_server=4)


def _servers(placement: Placement | None) -> list[tuple[str, int, int]]:
    assert placement is not None
    return [(s.tor, s.server, s.gpus) for s in placement.shares]


def test_the_policies_are_named() -> None:
    assert placement_names() == ["packed", "spread", "trace"]
    with pytest.raises(UnknownName, match="unknown placement 'tight'; known: packed, spread"):
        Placer(_small(), "tight")


def test_trace_refuses_since_the_trace_has_no_machine_list() -> None:
    with pytest.raises(PlacementError, match="no machine column") as err:
        Placer(_small(), "trace")
    assert "use 'packed' or 'spread'" in str(err.value)


def test_packed_fills_the_best_fitting_rack_then_the_fullest_free_racks() -> None:
    placer = Placer(_small(), "packed")
    assert _servers(placer.place(1, 8)) == [("tor0", 0, 4), ("tor0", 1, 4)]
    assert _servers(placer.place(2, 2)) == [("tor1", 0, 2)]
    # tor1 has 6 GPUs free, tor2 8: the job of 2 goes beside job 2, on the same server.
    assert _servers(placer.place(3, 2)) == [("tor1", 0, 2)]
    # Three whole servers: no rack has them; tor2's two, then tor1's one.
    assert _servers(placer.place(4, 12)) == [("tor1", 1, 4), ("tor2", 0, 4), ("tor2", 1, 4)]
    assert placer.free_gpus == 0
    assert placer.place(5, 1) is None  # full: the job waits
    placer.free(2)
    assert _servers(placer.place(5, 1)) == [("tor1", 0, 1)]


def test_packed_puts_the_rest_in_a_rack_the_job_already_uses_when_it_can() -> None:
    placer = Placer(_small(2), "packed")
    placer.place(1, 2)  # tor0 server 0 keeps 2 free
    # 10 GPUs: two whole servers (only tor1 has two) and 2 more, on tor0's half-free server.
    assert _servers(placer.place(2, 10)) == [("tor0", 0, 2), ("tor1", 0, 4), ("tor1", 1, 4)]
    assert placer.place(3, 10) is None


def test_packed_trades_a_rack_for_one_with_room_for_the_rest() -> None:
    # Three racks of two whole free servers; only the third has a half-used one. 17 GPUs of
    # 4 per server: four whole servers and one GPU. The first two racks hold the four but not
    # the one; the first and the third hold both.
    free = ((4, 4, 0), (4, 4, 0), (4, 4, 2))
    picks = PackedPlacement().choose(free, 4, 1, 4, random.Random(0))
    assert picks == ((0, 0, 4), (0, 1, 4), (2, 0, 4), (2, 1, 4), (2, 2, 1))
    assert PackedPlacement().choose(free, 6, 1, 4, random.Random(0)) == (
        (0, 0, 4),
        (0, 1, 4),
        (1, 0, 4),
        (1, 1, 4),
        (2, 0, 4),
        (2, 1, 4),
        (2, 2, 1),
    )
    assert PackedPlacement().choose(free, 6, 3, 4, random.Random(0)) is None


def test_spread_deals_servers_round_robin_from_a_seeded_start() -> None:
    start = random.Random(7).randrange(3)
    placer = Placer(_small(), "spread", seed=7)
    placement = placer.place(1, 12)
    tors = [f"tor{(start + i) % 3}" for i in range(3)]
    assert _servers(placement) == sorted((tor, 0, 4) for tor in tors)
    assert placement is not None and placement.servers_by_tor() == dict.fromkeys(
        ["tor0", "tor1", "tor2"], 1
    )


def test_spread_skips_a_full_rack() -> None:
    fabric = two_level_fabric(3, servers_per_rack=1, gpus_per_server=4)
    for seed in range(6):
        placer = Placer(fabric, "spread", seed=seed)
        (full,) = placer.place(1, 4).tors  # type: ignore[union-attr]
        second = placer.place(2, 8)
        assert second is not None
        assert sorted(second.tors) == sorted({"tor0", "tor1", "tor2"} - {full})


def test_the_same_seed_and_calls_place_alike() -> None:
    def run(seed: int) -> list[tuple[Share, ...]]:
        placer = Placer(two_level_fabric(4), "spread", seed=seed)
        out = []
        for job, gpus in enumerate([8, 16, 4, 32, 2, 8, 64]):
            placement = placer.place(job, gpus)
            out.append(placement.shares if placement else ())
        return out

    assert run(3) == run(3)
    assert any(run(3) != run(seed) for seed in range(4, 10))


def test_a_job_is_its_gpus_on_ceil_n_over_g_servers() -> None:
    placer = Placer(two_level_fabric(4), "packed")
    for job, gpus in enumerate([2, 4, 8, 16, 32, 12]):
        placement = placer.place(job, gpus)
        assert placement is not None and placement.gpus == gpus
        assert len(placement.shares) == -(-gpus // 8)
    assert placer.placements[5].describe() == "job 5: 12 GPUs on 2 servers (tor1 x2)"


def test_wrong_requests_are_errors_and_free_is_idempotent() -> None:
    placer = Placer(_small(), "packed")
    placer.place(1, 4)
    with pytest.raises(PlacementError, match="job 1 is placed already"):
        placer.place(1, 4)
    with pytest.raises(PlacementError, match=r"job 2: 25 GPUs; this fabric has 1..24 \(6 servers"):
        placer.place(2, 25)
    with pytest.raises(PlacementError, match="job 3: 0 GPUs"):
        placer.place(3, 0)
    placer.free(1)
    placer.free(1)
    placer.free(99)
    assert placer.free_gpus == 24 and not placer.placements


def test_describe_is_one_line_naming_policy_and_seed() -> None:
    line = Placer(_small(), "spread", seed=5).describe()
    assert line == "placement spread (round robin over the racks from a seeded start), seed 5"


def _feasible(free: dict[tuple[str, int], int], gpus: int, g: int) -> bool:
    whole, rest = divmod(gpus, g)
    full = sum(1 for f in free.values() if f == g)
    if full < whole:
        return False
    return not rest or full > whole or any(rest <= f < g for f in free.values())


def _fewest_racks(
    fabric: Fabric, free: dict[tuple[str, int], int], gpus: int, g: int
) -> int | None:
    """The fewest racks whose free servers hold the job, by trying every set of racks."""
    tors = [t.name for t in fabric.tors]
    for m in range(1, len(tors) + 1):
        for racks in itertools.combinations(tors, m):
            if _feasible({k: v for k, v in free.items() if k[0] in racks}, gpus, g):
                return m
    return None


@settings(max_examples=300, deadline=None)
@given(
    racks=st.integers(1, 5),
    servers=st.integers(1, 4),
    g=st.sampled_from([1, 2, 4, 8]),
    policy=st.sampled_from(["packed", "spread"]),
    seed=st.integers(0, 3),
    ops=st.lists(st.tuples(st.booleans(), st.integers(0, 7), st.integers(1, 40)), max_size=40),
)
def test_no_server_holds_more_than_it_has_and_free_gives_all_back(
    racks: int,
    servers: int,
    g: int,
    policy: str,
    seed: int,
    ops: list[tuple[bool, int, int]],
) -> None:
    fabric = two_level_fabric(racks, servers_per_rack=servers, gpus_per_server=g)
    placer = Placer(fabric, policy, seed=seed)
    for place, job, want in ops:
        gpus = min(want, fabric.gpus)
        if place and job not in placer.placements:
            before = placer.free_by_server()
            placement = placer.place(job, gpus)
            # None exactly when the servers are not free; packed uses one rack if one can.
            assert (placement is None) == (not _feasible(before, gpus, g))
            if placement is not None:
                assert placement.gpus == gpus and len(placement.shares) == -(-gpus // g)
                assert sum(s.gpus < g for s in placement.shares) <= 1
                if policy == "packed":
                    assert len(placement.tors) == _fewest_racks(fabric, before, gpus, g)
        else:
            placer.free(job)
        free = placer.free_by_server()
        assert all(0 <= f <= g for f in free.values())
        held = sum(p.gpus for p in placer.placements.values())
        assert held + placer.free_gpus == fabric.gpus
        for p in placer.placements.values():
            assert len({(s.tor, s.server) for s in p.shares}) == len(p.shares)
    for job in list(placer.placements):
        placer.free(job)
    assert set(placer.free_by_server().values()) == {g}


@st.composite
def _free_gpus(draw: st.DrawFn) -> tuple[tuple[tuple[int, ...], ...], int]:
    g = draw(st.sampled_from([1, 2, 4, 8]))
    racks = draw(st.integers(1, 5))
    # Mostly whole free or full servers, as a busy fabric has, some half used.
    server = st.one_of(st.just(g), st.just(0), st.integers(0, g))
    free = tuple(tuple(draw(st.lists(server, min_size=1, max_size=4))) for _ in range(racks))
    return free, g


@settings(max_examples=400, deadline=None)
@given(state=_free_gpus(), whole=st.integers(0, 8), part=st.integers(0, 7), seed=st.integers(0, 3))
def test_a_policy_picks_free_servers_of_the_job_s_shape_whenever_there_are(
    state: tuple[tuple[tuple[int, ...], ...], int], whole: int, part: int, seed: int
) -> None:
    free, g = state
    rest = part % g
    gpus = whole * g + rest
    assume(gpus > 0)
    as_map = {(f"tor{r}", i): f for r, rack in enumerate(free) for i, f in enumerate(rack)}
    fabric = two_level_fabric(len(free), gpus_per_server=g)
    for policy in (PackedPlacement(), SpreadPlacement()):
        picks = policy.choose(free, whole, rest, g, random.Random(seed))
        assert (picks is None) == (not _feasible(as_map, gpus, g))
        if picks is None:
            continue
        assert sorted(n for _, _, n in picks) == sorted([g] * whole + ([rest] if rest else []))
        assert len({(r, i) for r, i, _ in picks}) == len(picks)
        assert all(n <= free[r][i] for r, i, n in picks)
        if isinstance(policy, PackedPlacement):
            racks = len({r for r, _, _ in picks})
            assert racks == _fewest_racks(fabric, as_map, gpus, g)
