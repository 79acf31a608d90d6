"""Placement of a job's workers onto racks: named policies and a placer that keeps occupancy.

A job of N GPUs on a fabric of g GPUs per server takes ceil(N / g) servers: N // g whole
(fully free) servers and, when g does not divide N, one more server with N mod g GPUs free.
Jobs share a server GPU by GPU, never beyond its g. A `PlacementPolicy` is pure: from the free
GPUs of every server (and a seeded generator) it picks one job's servers, or None when they
are not free. `Placer` holds the occupancy: `place` reserves (None: the fabric is too full
now, the job waits and the caller places it again after a `free`), `free` gives everything
back and is idempotent; a job wider than the whole fabric raises `PlacementError`. The
policies, by name (`PLACEMENTS`): ``packed`` (fewest racks), ``spread`` (round robin over the
racks from a seeded start) and ``trace`` (the trace's own machine list, which no trace
inasched reads carries: it refuses). Given the same seed and calls, a placer places alike.
`Placer.describe` is the line a report states.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

from scheduler.errors import PlacementError, UnknownName
from scheduler.fabric import Fabric

__all__ = [
    "PLACEMENTS",
    "PackedPlacement",
    "Placement",
    "PlacementPolicy",
    "Placer",
    "Share",
    "SpreadPlacement",
    "TracePlacement",
    "make_placement",
    "placement_names",
]

#: Free GPUs of every server: one tuple per rack (the fabric's ToRs, in order), one int per server.
FreeGpus = Sequence[Sequence[int]]
#: A pick: (rack index, server index, GPUs taken there).
Pick = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class Share:
    """`gpus` GPUs of server `server` (0-based) in the rack under ToR `tor`."""

    tor: str
    server: int
    gpus: int


@dataclass(frozen=True, slots=True)
class Placement:
    """Where job `job_id` runs: its `shares`, one per server, in rack then server order."""

    job_id: int
    shares: tuple[Share, ...]

    @property
    def gpus(self) -> int:
        """GPUs the job holds."""
        return sum(s.gpus for s in self.shares)

    @property
    def tors(self) -> tuple[str, ...]:
        """The ToRs of the job's racks, in fabric order: the leaves of its aggregation tree."""
        return tuple(dict.fromkeys(s.tor for s in self.shares))

    def servers_by_tor(self) -> dict[str, int]:
        """``{tor: servers of the job under it}``: one INA worker per server."""
        counts: dict[str, int] = {}
        for share in self.shares:
            counts[share.tor] = counts.get(share.tor, 0) + 1
        return counts

    def describe(self) -> str:
        """``job 3: 16 GPUs on 2 servers (tor0 x1, tor1 x1)``."""
        racks = ", ".join(f"{tor} x{n}" for tor, n in self.servers_by_tor().items())
        servers = len(self.shares)
        plural = "s" * (servers > 1)
        return f"job {self.job_id}: {self.gpus} GPUs on {servers} server{plural} ({racks})"


def _best_fit(rack: Sequence[int], need: int, taken: set[int]) -> int | None:
    """The server of `rack` with the fewest free GPUs that still has `need` (lowest index on a
    tie), skipping `taken`; a whole server (``need`` = all its GPUs) is the lowest free one."""
    fits = [(free, i) for i, free in enumerate(rack) if free >= need and i not in taken]
    return min(fits)[1] if fits else None


class PlacementPolicy:
    """Picks one job's servers from the free GPUs; pure (its only state is what it is given)."""

    name: ClassVar[str]
    #: What the policy does, in a few words, for `Placer.describe`.
    summary: ClassVar[str]

    def choose(
        self, free: FreeGpus, whole: int, rest: int, gpus_per_server: int, rng: random.Random
    ) -> tuple[Pick, ...] | None:
        """`whole` fully free servers and, if `rest` > 0, one more with `rest` GPUs free; None
        when the fabric has them not."""
        raise NotImplementedError


def _take(
    free: FreeGpus, racks: Sequence[int], whole: int, rest: int, g: int
) -> tuple[Pick, ...] | None:
    """Whole servers from `racks` in that order (lowest free index first), then the rest on
    the best-fitting server of the racks used, else of the other `racks`; None if they run
    out."""
    picks: list[Pick] = []
    taken: dict[int, set[int]] = {r: set() for r in racks}
    used: list[int] = []
    for r in racks:
        for i, gpus in enumerate(free[r]):
            if len(picks) == whole:
                break
            if gpus == g:
                picks.append((r, i, g))
                taken[r].add(i)
                if r not in used:
                    used.append(r)
    if len(picks) < whole:
        return None
    if rest:
        others = [r for r in racks if r not in used]
        for group in (used, others):
            fits = [
                (free[r][s], k, r, s)
                for k, r in enumerate(group)
                if (s := _best_fit(free[r], rest, taken[r])) is not None
            ]
            if fits:
                _, _, r, s = min(fits)
                picks.append((r, s, rest))
                break
        else:
            return None
    return tuple(picks)


class PackedPlacement(PlacementPolicy):
    """Fewest racks: the single rack that holds the job with the fewest GPUs left free
    (lowest index on a tie); else the fewest racks whose whole free servers cover the job's
    and that have room for its rest, the racks with most whole free servers first."""

    name = "packed"
    summary = "fewest racks: the best-fitting single rack, else those with most free servers first"

    def choose(
        self, free: FreeGpus, whole: int, rest: int, gpus_per_server: int, rng: random.Random
    ) -> tuple[Pick, ...] | None:
        g = gpus_per_server
        alone = [
            (sum(rack), r, picks)
            for r, rack in enumerate(free)
            if (picks := _take(free, [r], whole, rest, g)) is not None
        ]
        if alone:
            return min(alone, key=lambda a: a[:2])[2]
        full = [list(rack).count(g) for rack in free]
        # A rack that can take the rest on a server some job already uses.
        part = [any(rest <= f < g for f in rack) for rack in free] if rest else [False] * len(free)
        order = sorted(range(len(free)), key=lambda r: (-full[r], r))
        for m in range(2, len(free) + 1):
            # The m racks of most whole servers hold the most; if they leave no room for the
            # rest, one of them may give way to a rack that has it.
            top = order[:m]
            held = sum(full[r] for r in top)
            if held >= whole and (not rest or held > whole or any(part[r] for r in top)):
                return _take(free, top, whole, rest, g)
            for extra in (r for r in order[m:] if part[r]):
                racks = [*order[: m - 1], extra]
                if sum(full[r] for r in racks) >= whole:
                    return _take(free, racks, whole, rest, g)
        return None


class SpreadPlacement(PlacementPolicy):
    """Round robin over the racks: the job's first server in a rack drawn from the seeded
    generator, each next one in the next rack that has room (whole servers first, then the
    rest on the best-fitting server of its rack)."""

    name = "spread"
    summary = "round robin over the racks from a seeded start"

    def choose(
        self, free: FreeGpus, whole: int, rest: int, gpus_per_server: int, rng: random.Random
    ) -> tuple[Pick, ...] | None:
        racks = len(free)
        at = rng.randrange(racks)
        taken: dict[int, set[int]] = {r: set() for r in range(racks)}
        picks: list[Pick] = []
        for need in [gpus_per_server] * whole + ([rest] if rest else []):
            for step in range(racks):
                r = (at + step) % racks
                i = _best_fit(free[r], need, taken[r])
                if i is not None:
                    picks.append((r, i, need))
                    taken[r].add(i)
                    at = r + 1
                    break
            else:
                return None
        return tuple(picks)


class TracePlacement(PlacementPolicy):
    """The placement the trace's own machine list implies. No trace inasched reads carries
    one, so making it raises `PlacementError` saying why."""

    name = "trace"
    summary = "the trace's own machine list"

    def __init__(self) -> None:
        raise PlacementError(
            "placement 'trace' needs each job's machines, and the trace carries none: "
            "scheduler/data/jobs_philly.csv (like Pollux's philly.csv it comes from) has no "
            "machine column, and Philly's raw cluster_job_log, which lists each attempt's "
            "machines, does not say which rack a machine is in; use 'packed' or 'spread'"
        )


#: Placement policy name -> class.
PLACEMENTS: Mapping[str, type[PlacementPolicy]] = MappingProxyType(
    {cls.name: cls for cls in (PackedPlacement, SpreadPlacement, TracePlacement)}
)


def placement_names() -> list[str]:
    """The placement policies' names, sorted."""
    return sorted(PLACEMENTS)


def make_placement(name: str) -> PlacementPolicy:
    """The placement policy called `name`; raises `UnknownName` or, for one that cannot run
    on what inasched reads, `PlacementError`."""
    cls = PLACEMENTS.get(name)
    if cls is None:
        raise UnknownName(f"unknown placement {name!r}; known: {', '.join(placement_names())}")
    return cls()


class Placer:
    """The servers' occupancy on `fabric` and the placement policy that fills it.

    ``place(job_id, gpus)`` -> `Placement` or None (no room now); ``free(job_id)`` gives the
    job's GPUs back (idempotent)."""

    def __init__(self, fabric: Fabric, policy: str = "packed", *, seed: int = 0) -> None:
        self.fabric = fabric
        self.policy = make_placement(policy)
        self.seed = seed
        self._rng = random.Random(seed)
        self._tors = tuple(t.name for t in fabric.tors)
        g = fabric.gpus_per_server
        self._free = [[g] * t.rack.servers for t in fabric.tors if t.rack is not None]
        self._placed: dict[int, Placement] = {}

    def describe(self) -> str:
        """One line for a report: the policy, what it does, the seed."""
        return f"placement {self.policy.name} ({self.policy.summary}), seed {self.seed}"

    @property
    def placements(self) -> Mapping[int, Placement]:
        """The jobs placed now, by job id."""
        return MappingProxyType(self._placed)

    @property
    def free_gpus(self) -> int:
        """GPUs no job holds."""
        return sum(map(sum, self._free))

    def free_by_server(self) -> dict[tuple[str, int], int]:
        """``{(tor, server): free GPUs}`` of every server."""
        return {
            (tor, i): gpus
            for tor, rack in zip(self._tors, self._free, strict=True)
            for i, gpus in enumerate(rack)
        }

    def place(self, job_id: int, gpus: int) -> Placement | None:
        """Reserve `gpus` GPUs for `job_id` as the policy picks; None when they are not free
        now (the job waits). Raises `PlacementError` for a job already placed, or one of
        fewer than 1 or more GPUs than the fabric has."""
        if job_id in self._placed:
            raise PlacementError(f"job {job_id} is placed already; free it first")
        total = self.fabric.gpus
        if isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= total:
            raise PlacementError(
                f"job {job_id}: {gpus!r} GPUs; this fabric has 1..{total:,} "
                f"({self.fabric.servers} servers x {self.fabric.gpus_per_server} GPUs)"
            )
        whole, rest = divmod(gpus, self.fabric.gpus_per_server)
        view = tuple(tuple(rack) for rack in self._free)
        picks = self.policy.choose(view, whole, rest, self.fabric.gpus_per_server, self._rng)
        if picks is None:
            return None
        for r, i, n in picks:
            if self._free[r][i] < n:
                raise PlacementError(
                    f"placement {self.policy.name} took {n} GPUs of {self._tors[r]} server "
                    f"{i}, which has {self._free[r][i]} free"
                )
        for r, i, n in picks:
            self._free[r][i] -= n
        shares = tuple(Share(self._tors[r], i, n) for r, i, n in sorted(picks))
        self._placed[job_id] = placement = Placement(job_id, shares)
        return placement

    def free(self, job_id: int) -> None:
        """Give back every GPU `job_id` holds; a job not placed (or freed already) is a no-op."""
        placement = self._placed.pop(job_id, None)
        if placement is None:
            return
        index = {tor: r for r, tor in enumerate(self._tors)}
        for share in placement.shares:
            self._free[index[share.tor]][share.server] += share.gpus
