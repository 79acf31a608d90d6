"""Validation of the fluid fabric simulator (`scheduler.fabricsim`) against the fragment-level
one (`scheduler.fragfabric`) on small cases where a fabric binds: same jobs, config, fabric
and placement, both simulators, under each switch policy on every switch.

`FABRIC_FAMILIES` draws seeded cases, each binding at one place of a two-level fabric (one GPU
per server, so each worker is a server): the spine's pool (every job spread across racks, the
spine holding a fraction of their windows while the ToRs hold them all), the ToRs' pools (jobs
packed into racks, the spine large) and the ToR uplinks (jobs spread, pools large, uplinks
oversubscribed 16-32:1 so that an uplink is slower than a job's window-paced rate).
`validate_fabric` reports `scheduler.validate.CaseError`s, the fragment-level model as reference.

`FABRIC_BOUNDS` states the bound each family is held to (``tests/scheduler/
test_fragfabric.py`` runs them), and where it is above `scheduler.validate.BOUND`, what the
fluid model misses. ``python -m bench.fabricvalidate`` prints the table.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import cast

from scheduler.config import PER_JOB, PsProcesses, SimConfig
from scheduler.fabric import Fabric, two_level_fabric
from scheduler.fabricsim import simulate_fabric
from scheduler.fragfabric import simulate_fabric_fragments
from scheduler.memory import Pool
from scheduler.registry import policy_names
from scheduler.validate import BOUND, CaseError
from scheduler.workload import JobSpec

__all__ = [
    "FABRIC_BOUNDS",
    "FABRIC_FAMILIES",
    "FabricCase",
    "fabric_cases",
    "validate_fabric",
]

#: The bound the fluid model's mean-JCT error is held to on each family (every case, every
#: policy; `scheduler.validate.BOUND` is the goal). ``python -m bench.fabricvalidate --cases
#: 8`` on seed 0: spine-memory within 0.038, tor-memory within 0.023; on "oversubscribed"
#: static is within 0.069 (slow), esa fast by up to 0.14 and atp by 0.25. The round trip
#: through a spine (its ToR passed twice, each uplink once each way), the uplink bound's tail
#: and the other crossing jobs' windows queued at a shared uplink (`scheduler.fabricflow`)
#: are counted; what it misses there is how that queue grows and drains with atp's
#: collisions and esa's preemptions, which one steady state per switch does not follow.
FABRIC_BOUNDS: dict[str, float] = {
    "spine-memory": BOUND,
    "tor-memory": BOUND,
    "oversubscribed": 0.30,
}

_PER_JOB = cast(PsProcesses, PER_JOB)
_LANES = 64


@dataclass(frozen=True, slots=True)
class FabricCase:
    """One validation case: jobs, config (policy filled in by `validate_fabric`), fabric and
    placement policy."""

    jobs: tuple[JobSpec, ...]
    cfg: SimConfig
    fabric: Fabric
    placement: str


def _jobs(rng: random.Random, count: int, widths: tuple[int, ...]) -> tuple[JobSpec, ...]:
    """`count` jobs arriving within 200 us that communicate much of the time (compute 10-60
    us against 32-128 fragments per iteration) for 3-6 iterations: few, as the
    fragment-level model is slow."""
    return tuple(
        JobSpec(
            job_id=i,
            arrival_s=round(rng.uniform(0, 2e-4), 7),
            workers=rng.choice(widths),
            model="small",
            grad_bytes=256 * rng.randint(32, 128),
            iter_time_s=rng.uniform(1e-5, 6e-5),
            iterations=rng.randint(3, 6),
        )
        for i in range(count)
    )


def _cfg(rng: random.Random) -> SimConfig:
    # Window 16 and per-job PS processes at 25 Gbps: `scheduler.validate`'s memory families.
    return SimConfig(
        pool=Pool(256, _LANES),
        window=16,
        seed=rng.randrange(99),
        ps_processes=_PER_JOB,
        ps_bps=25e9,
    )


def _spine_memory(rng: random.Random) -> FabricCase:
    """The spine binds: 3 racks of 6 servers, ToRs of 256 aggregators, a spine of 32; 5-6
    jobs of 2-3 workers spread over the racks (every job crosses them): the combined windows
    2.5-3x the spine's pool, at most half of a ToR's."""
    fabric = two_level_fabric(3, servers_per_rack=6, gpus_per_server=1, tor_aggregators=256,
                              spine_aggregators=32, lanes=_LANES)  # fmt: skip
    return FabricCase(_jobs(rng, rng.randint(5, 6), (2, 3)), _cfg(rng), fabric, "spread")


def _tor_memory(rng: random.Random) -> FabricCase:
    """The ToRs bind: 2 racks of 12 servers, ToRs of 32 aggregators (one static partition of
    window 16), a spine of 256; 7-9 jobs of 2-4 workers packed into the racks (a job crosses
    them only when one cannot hold it): a rack's jobs' combined windows 2-3x its ToR's pool."""
    fabric = two_level_fabric(2, servers_per_rack=12, gpus_per_server=1, tor_aggregators=32,
                              spine_aggregators=256, lanes=_LANES)  # fmt: skip
    return FabricCase(_jobs(rng, rng.randint(7, 9), (2, 3, 4)), _cfg(rng), fabric, "packed")


def _oversubscribed(rng: random.Random) -> FabricCase:
    """The uplinks bind: 2 racks of 4 servers at 100 Gbps, uplinks oversubscribed 16:1 or
    32:1 (25 or 12.5 Gbps), pools of 256 everywhere, window 64 (a job alone paces about 25
    Gbps over a two-level round trip of 5.5 us); 2-4 jobs of 2-4 workers spread over the
    racks, each rack's partial sums crossing its uplink."""
    over = rng.choice((16.0, 32.0))
    fabric = two_level_fabric(2, servers_per_rack=4, gpus_per_server=1, tor_aggregators=256,
                              spine_aggregators=256, oversubscription=over,
                              lanes=_LANES)  # fmt: skip
    jobs = _jobs(rng, rng.randint(2, 4), (2, 3, 4))
    return FabricCase(jobs, replace(_cfg(rng), window=64), fabric, "spread")


#: Seeded case families: name -> (what binds, one case from an rng).
FABRIC_FAMILIES: dict[str, tuple[str, Callable[[random.Random], FabricCase]]] = {
    "spine-memory": ("spine pool 32, ToRs 256, every job across 3 racks", _spine_memory),
    "tor-memory": ("ToR pools 32, spine 256, jobs packed into 2 racks", _tor_memory),
    "oversubscribed": (
        "uplinks 16:1 or 32:1, pools 256, window 64, jobs across 2 racks",
        _oversubscribed,
    ),
}


def fabric_cases(family: str, count: int = 4, seed: int = 0) -> list[FabricCase]:
    """`count` seeded cases of `family` (a `FABRIC_FAMILIES` key; ValueError naming them)."""
    if family not in FABRIC_FAMILIES:
        known = ", ".join(FABRIC_FAMILIES)
        raise ValueError(f"unknown fabric validation family {family!r}; known: {known}")
    rng = random.Random(f"fabric/{family}/{seed}")
    return [FABRIC_FAMILIES[family][1](rng) for _ in range(count)]


def validate_fabric(
    policies: tuple[str, ...] | None = None,
    count: int = 4,
    seed: int = 0,
    family: str = "spine-memory",
) -> list[CaseError]:
    """Both fabric simulators on `fabric_cases(family, count, seed)` under each of
    `policies` (default: the registered switch policies, `scheduler.registry.policy_names`;
    of the fabric policies, those that keep every job on its tree, see
    `scheduler.fragfabric`), one fragment-level run each (another seed would place the jobs
    elsewhere: the placer draws from the config's seed too)."""
    out = []
    for policy in policy_names() if policies is None else policies:
        for i, case in enumerate(fabric_cases(family, count, seed)):
            jobs, cfg, fabric, placed = case.jobs, case.cfg, case.fabric, case.placement
            frag = simulate_fabric_fragments(jobs, cfg, fabric, policy=policy, placement=placed)
            fluid = simulate_fabric(jobs, cfg, fabric, policy=policy, placement=placed)
            out.append(
                CaseError(
                    policy,
                    i,
                    frag.result.jct_summary()["mean"],
                    fluid.result.jct_summary()["mean"],
                    frag.result.switch_share(),
                    fluid.result.switch_share(),
                    family,
                )
            )
    return out
