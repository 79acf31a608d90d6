"""Exactly once across levels (p4/PROTOCOL.md section 7): two ToRs under a spine, a
three-level tree (one rule at every level), and two ToRs whose parent is the PS (a spill, 7.8:
no spine; the PS sends every result to each ToR of the job), with the PS's real ledger
(`workers.accumulator.JobLedger`), random delivery order, loss on every hop in both directions,
network duplicates, resends, esa preemption and priority changes.

Worker ``w`` contributes lane 0 = ``1 << w`` and lane 1 = 1, so a packet counts each of its
bitmap's workers exactly once iff lane 0 equals its bitmap and lane 1 its popcount: checked on
every packet any switch sends, and on every result a worker takes. After the random phase the
network stops losing and every worker that lacks a result resends until all have one.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from p4ctl.protocol import PS_WORKER_ID, AggState, Flag, Kind, Packet, Policy
from p4ctl.rule import JobConfig, Registers, ToGroup, check, hashed_index, process, static_index

from workers.accumulator import JobLedger

LANES = 2
SHARED_POOL = 4  # small: jobs collide and preempt each other at both levels
PART_SIZE = 2
UP, PS_PORT = 1, 2  # a switch's port toward its parent, every switch's port toward the PS
CHILD_PORT = {name: 10 + i for i, name in enumerate("ABCM")}  # a parent's port toward a child
Racks = dict[int, tuple[int, dict[str, tuple[int, ...]]]]
# (switch -> parent, jobs: (fan_in, {ToR: its workers})). In each, job 3 stays in rack A.
TOPOLOGIES: dict[str, tuple[dict[str, str | None], Racks]] = {
    "two_levels": (
        {"S": None, "A": "S", "B": "S"},
        {
            1: (4, {"A": (0, 1), "B": (2, 3)}),
            2: (3, {"A": (0,), "B": (1, 2)}),
            3: (2, {"A": (0, 1)}),
        },
    ),
    # The rule is the same at every level: a middle switch has a parent and children.
    "three_levels": (
        {"S": None, "M": "S", "A": "M", "B": "M", "C": "S"},
        {
            1: (5, {"A": (0, 1), "B": (2, 3), "C": (4,)}),
            2: (3, {"A": (0,), "B": (1, 2)}),
            3: (2, {"A": (0, 1)}),
        },
    ),
    # No spine: a cross-rack job's ToRs have the PS as their parent (up_port = ps_port).
    "spill": (
        {"A": None, "B": None},
        {
            1: (4, {"A": (0, 1), "B": (2, 3)}),
            2: (3, {"A": (0,), "B": (1, 2)}),
            3: (2, {"A": (0, 1)}),
        },
    ),
}


def _port(job: int, worker: int) -> int:
    return 100 + 10 * job + worker


def _mask(workers: tuple[int, ...]) -> int:
    return sum(1 << w for w in workers)


@dataclass
class Switch:
    name: str
    regs: Registers
    jobs: dict[int, JobConfig]
    groups: dict[int, tuple[int, ...]]


@dataclass
class Fabric:
    policy: Policy
    parents: dict[str, str | None]
    racks: Racks
    roots: dict[int, str | None]  # None: a spill job, whose results go to each of its ToRs
    switches: dict[str, Switch]
    seqs: dict[int, int]
    ledgers: dict[int, JobLedger]
    # In flight: (to, sender port there, packet); to is a switch name, "ps" or (job, worker).
    flight: list[tuple[object, int, Packet]] = field(default_factory=list)
    results: dict[tuple[int, int, int], Packet] = field(default_factory=dict)
    sent: set[tuple[int, int, int]] = field(default_factory=set)
    copies_lost: set[tuple[int, int]] = field(default_factory=set)


def _path(parents: dict[str, str | None], switch: str) -> list[str]:
    """`switch` and its ancestors, bottom up."""
    path = [switch]
    while (up := parents[path[-1]]) is not None:
        path.append(up)
    return path


def _fabric(topology: str, policy: Policy, priorities: dict[int, int]) -> Fabric:
    parents, racks = TOPOLOGIES[topology]
    pool = 3 * 2 * PART_SIZE if policy == Policy.STATIC else SHARED_POOL
    switches = {n: Switch(n, Registers(pool, LANES), {}, {}) for n in parents}
    roots = {}
    for job, (fan_in, tors) in racks.items():
        paths = [_path(parents, tor) for tor in tors]
        # The lowest common switch; None: the ToRs spill to the PS, their parent.
        root = next((x for x in paths[0] if all(x in p for p in paths)), None)
        roots[job] = root
        base = (job - 1) * 2 * PART_SIZE
        common = dict(policy=policy, fan_in=fan_in, part_size=PART_SIZE, ps_port=PS_PORT)
        common |= dict(mcast_group=job, priority=priorities[job])
        tree = {x for p in paths for x in (p if root is None else p[: p.index(root) + 1])}
        for x in tree:
            below = [t for t, p in zip(tors, paths, strict=True) if x in p]
            mask = sum(_mask(tors[t]) for t in below)
            # Some switches number their static partitions from the other end: bases differ.
            flipped = x in ("B", "S")
            switches[x].jobs[job] = JobConfig(
                job,
                part_base=pool - 2 * PART_SIZE - base if flipped else base,
                up_port=None if x == root else UP if root is not None else PS_PORT,
                local_mask=0 if x == root else mask,
                **common,  # type: ignore[arg-type]
            )
            children = sorted(c for c in tree if parents[c] == x)
            ports = [_port(job, w) for w in tors.get(x, ())]
            switches[x].groups[job] = (*ports, *(CHILD_PORT[c] for c in children))
    seqs = {job: 2 for job in racks}
    ledgers = {job: JobLedger(job, n, 1024, policy, 8192) for job, (n, _) in racks.items()}
    return Fabric(policy, parents, racks, roots, switches, seqs, ledgers)


def _tor_of(fab: Fabric, job: int, worker: int) -> str:
    return next(t for t, ws in fab.racks[job][1].items() if worker in ws)


def _gradient(fab: Fabric, job: int, seq: int, worker: int, resend: bool) -> Packet:
    cfg = fab.switches[_tor_of(fab, job, worker)].jobs[job]
    if fab.policy == Policy.STATIC:
        index, shadow = static_index(cfg, seq)
    else:
        index, shadow = hashed_index(job, seq, SHARED_POOL), 0
    return Packet(
        kind=Kind.GRADIENT,
        job=job,
        worker=worker,
        fan_in=cfg.fan_in,
        agg_index=index,
        seq=seq,
        flags=Flag.RESEND if resend else Flag.NONE,
        shadow=shadow,
        bitmap=1 << worker,
        lanes=np.array([1 << worker, 1], np.int32),
    )


def _send(fab: Fabric, job: int, seq: int, worker: int, resend: bool) -> None:
    fab.sent.add((job, seq, worker))
    pkt = _gradient(fab, job, seq, worker, resend)
    fab.flight.append((_tor_of(fab, job, worker), _port(job, worker), pkt))


def _exact(pkt: Packet) -> None:
    assert int(pkt.lanes[0]) == pkt.bitmap, f"{pkt}: lanes are not exactly its bitmap's workers"
    assert int(pkt.lanes[1]) == pkt.bitmap.bit_count(), f"{pkt}: a worker counted twice"


def _route(fab: Fabric, sw: Switch, port: int, pkt: Packet) -> None:
    """Put what `sw` sent out of `port` in flight toward the node behind that port."""
    _exact(pkt)
    if port == PS_PORT:
        spill = fab.roots[pkt.job] is None
        assert pkt.kind == Kind.TO_PS or (spill and pkt.kind == Kind.UP), pkt
        fab.flight.append(("ps", 0, pkt))
    elif port == UP:
        assert pkt.kind == Kind.UP
        fab.flight.append((fab.parents[sw.name], CHILD_PORT[sw.name], pkt))
    elif port in CHILD_PORT.values():
        child = next(c for c, p in CHILD_PORT.items() if p == port)
        fab.flight.append((child, UP, pkt))
    else:
        job, worker = divmod(port - 100, 10)
        fab.flight.append(((job, worker), 0, pkt))


def _deliver(fab: Fabric, to: object, sender_port: int, pkt: Packet) -> None:
    if to == "ps":
        accepted = fab.ledgers[pkt.job].accept(pkt)
        if accepted.reply is not None:
            # The PS answers to the job's root, which sends it down through every level, or
            # (spill) to each of its ToRs.
            root = fab.roots[pkt.job]
            for to in fab.racks[pkt.job][1] if root is None else (root,):
                fab.flight.append((to, PS_PORT, accepted.reply))
        return
    if isinstance(to, tuple):
        job, worker = to
        assert pkt.kind in (Kind.RESULT, Kind.PS_RESULT)
        assert pkt.bitmap == (1 << fab.racks[job][0]) - 1
        _exact(pkt)
        fab.results[(job, pkt.seq, worker)] = pkt
        return
    sw = fab.switches[str(to)]
    assert check(pkt, sw.jobs.get(pkt.job), sw.regs.aggregators) is None, pkt
    verdict = process(sw.regs, pkt, sw.jobs, sender_port)
    for out in verdict.outputs:
        ports = sw.groups[out.group] if isinstance(out, ToGroup) else (out.port,)
        for port in ports:
            _route(fab, sw, port, out.packet)


def _lost_copy(fab: Fabric, pkt: Packet) -> None:
    """An esa completion copy lost on its way to the PS: the PS cannot answer resends for that
    sequence if some worker missed the multicast (as at one level, PROTOCOL.md section 5)."""
    full = (1 << fab.racks[pkt.job][0]) - 1
    if pkt.kind == Kind.TO_PS and pkt.flags & Flag.COMPLETE and pkt.bitmap == full:
        fab.copies_lost.add((pkt.job, pkt.seq))


events = st.lists(
    st.tuples(
        st.sampled_from(["first"] * 4 + ["deliver"] * 10 + ["resend", "priority", "duplicate"]),
        st.integers(0, 10_000),
        st.integers(0, 9),
    ),
    min_size=10,
    max_size=120,
)


@pytest.mark.parametrize("topology", sorted(TOPOLOGIES))
@settings(max_examples=300, deadline=None, database=None)
@given(
    policy=st.sampled_from(list(Policy)),
    priorities=st.fixed_dictionaries({j: st.integers(0, 3) for j in (1, 2, 3)}),
    script=events,
)
def test_levels_count_every_contribution_once_and_finish(
    topology: str, policy: Policy, priorities: dict[int, int], script: list[tuple[str, int, int]]
) -> None:
    fab = _fabric(topology, policy, priorities)
    racks = fab.racks
    firsts = [
        (j, s, w) for j, (n, _) in racks.items() for s in range(fab.seqs[j]) for w in range(n)
    ]
    unsent = list(firsts)
    for what, pick, arg in script:
        if what == "first" and unsent:
            _send(fab, *unsent.pop(pick % len(unsent)), resend=False)
        elif what == "resend" and fab.sent:
            job, seq, worker = sorted(fab.sent)[pick % len(fab.sent)]
            if (job, seq, worker) not in fab.results:
                _send(fab, job, seq, worker, resend=True)
        elif what == "priority" and policy == Policy.ESA:
            job = 1 + pick % len(racks)
            for sw in fab.switches.values():
                if job in sw.jobs:
                    sw.jobs[job] = replace(sw.jobs[job], priority=arg % 4)
        elif what in ("deliver", "duplicate") and fab.flight:
            to, port, pkt = fab.flight.pop(pick % len(fab.flight))
            if what == "duplicate":
                # The network duplicates a datagram: both copies arrive, one after the other.
                _deliver(fab, to, port, pkt)
            if arg < 2:  # lost on its hop, whichever hop that is
                _lost_copy(fab, pkt)
                continue
            _deliver(fab, to, port, pkt)
    for first in unsent:
        _send(fab, *first, resend=False)
    # The network heals: deliver everything, then every worker without a result resends.
    for _ in range(6):
        while fab.flight:
            _deliver(fab, *fab.flight.pop(0))
        missing = [f for f in firsts if f not in fab.results]
        if not missing:
            break
        for job, seq, worker in missing:
            _send(fab, job, seq, worker, resend=True)
    stuck = {(j, s) for j, s, w in firsts if (j, s, w) not in fab.results}
    assert stuck <= fab.copies_lost, f"no result for {sorted(stuck - fab.copies_lost)}"


def test_a_cross_rack_job_aggregates_at_both_levels_without_the_ps() -> None:
    for policy in Policy:
        fab = _fabric("two_levels", policy, {1: 0, 2: 0, 3: 0})
        for worker in range(4):
            _send(fab, 1, 0, worker, resend=False)
        outcomes: dict[str, list[str]] = defaultdict(list)
        while fab.flight:
            to, port, pkt = fab.flight.pop(0)
            if isinstance(to, str):
                outcomes[to].append(pkt.kind.name)
            _deliver(fab, to, port, pkt)
        assert all((1, 0, w) in fab.results for w in range(4)), policy
        assert outcomes["S"][:2] == ["UP", "UP"], (policy, outcomes)
        # atp finishes at the PS (its PS_RESULT comes down both levels); static and esa never
        # need it for the sum.
        via_ps = {p.kind for p in fab.results.values()} == {Kind.PS_RESULT}
        assert via_ps == (policy == Policy.ATP), policy
        assert all(p.worker == PS_WORKER_ID for p in fab.results.values() if via_ps)


def test_a_spill_job_aggregates_in_each_rack_and_the_ps_adds_the_racks() -> None:
    for policy in Policy:
        fab = _fabric("spill", policy, {1: 0, 2: 0, 3: 0})
        for worker in range(4):
            _send(fab, 1, 0, worker, resend=False)
        to_ps: list[Packet] = []
        while fab.flight:
            to, port, pkt = fab.flight.pop(0)
            if to == "ps":
                to_ps.append(pkt)
            _deliver(fab, to, port, pkt)
        assert all((1, 0, w) in fab.results for w in range(4)), policy
        # One partial per rack, each the rack's complete local sum, and nothing else.
        assert sorted(p.bitmap for p in to_ps) == [0b0011, 0b1100], (policy, to_ps)
        assert all(p.kind == Kind.UP and p.flags & Flag.COMPLETE for p in to_ps), policy
        assert {p.kind for p in fab.results.values()} == {Kind.PS_RESULT}, policy
        # The PS_RESULT frees each ToR's aggregator (static keeps its slots, as at one level).
        if policy != Policy.STATIC:
            for sw in fab.switches.values():
                held = [i for i in sw.regs.owned_by(1) if sw.regs.agg_state[i] != AggState.FREE]
                assert not held, (policy, sw.name)
