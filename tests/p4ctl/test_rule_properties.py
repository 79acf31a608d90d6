"""Exactly once (p4/PROTOCOL.md section 5), on random interleavings of several jobs' fragments
with esa preemption, network duplicates, resends, losses and priority changes.

Network duplicates follow their original. A copy delivered after its aggregator was freed or
reused is indistinguishable from a first send and is aggregated again (the switch keeps no
history); the protocol relies on a first send crossing the network once.

Worker ``w`` contributes lane 0 = ``1 << w``, so every sum's lane 0 must equal its bitmap. The
PS keeps the multi-contribution sums that leave the switch (complete, evicted, flushed) and the
single bypassed contributions, ignoring a single whose bit a sum already has.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from p4ctl.protocol import PS_WORKER_ID, AggState, Flag, Kind, Packet, Policy
from p4ctl.rule import JobConfig, Registers, ToPort, check, process

POOL = 4
LANES = 2


@dataclass(frozen=True)
class Scenario:
    jobs: dict[int, JobConfig]
    index: dict[tuple[int, int], int]  # (job, seq) -> aggregator
    events: list[tuple[str, int, int, int, bool]]  # (what, job, seq, worker|level, lost)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    n_jobs = draw(st.integers(2, 3))
    jobs, index = {}, {}
    for job in range(1, n_jobs + 1):
        policy = draw(st.sampled_from([Policy.ATP, Policy.ESA]))
        jobs[job] = JobConfig(
            job,
            policy,
            draw(st.integers(1, 3)),
            mcast_group=job,
            ps_port=100 + job,
            priority=draw(st.integers(0, 3)),
        )
        for seq in range(draw(st.integers(1, 3))):
            index[(job, seq)] = draw(st.integers(0, POOL - 1))
    firsts = [("first", j, s, w) for (j, s) in index for w in range(jobs[j].fan_in)]
    order = draw(st.permutations(firsts))
    extras = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["resend", "ps_result", "priority"]),
                st.sampled_from(sorted(index)),
                st.integers(0, 3),
                st.integers(0, 10_000),
            ),
            max_size=25,
        )
    )
    events = [(*first, draw(st.booleans()) and draw(st.booleans())) for first in order]
    for what, (job, seq), arg, at in extras:
        lost = draw(st.booleans()) and draw(st.booleans())
        events.insert(at % (len(events) + 1), (what, job, seq, arg, lost))
    with_copies = []
    for event in events:
        with_copies.append(event)
        if event[0] == "first" and draw(st.integers(0, 4)) == 0:
            # The network duplicates a datagram on the way: the copy follows the original.
            with_copies.append(("duplicate", *event[1:4], False))
    events = with_copies
    return Scenario(jobs, index, events)


@dataclass
class PS:
    sums: dict[tuple[int, int], list[int]] = field(default_factory=lambda: defaultdict(list))
    singles: dict[tuple[int, int], int] = field(default_factory=lambda: defaultdict(int))

    def has_all(self, key: tuple[int, int], fan_in: int) -> bool:
        bits = self.singles[key]
        for bitmap in self.sums[key]:
            bits |= bitmap
        return bits == (1 << fan_in) - 1


def _gradient(sc: Scenario, job: int, seq: int, worker: int, flags: Flag) -> Packet:
    lanes = np.zeros(LANES, dtype=np.int32)
    lanes[0] = 1 << worker
    return Packet(
        kind=Kind.GRADIENT,
        job=job,
        worker=worker,
        fan_in=sc.jobs[job].fan_in,
        agg_index=sc.index[(job, seq)],
        seq=seq,
        flags=flags,
        bitmap=1 << worker,
        lanes=lanes,
    )


@settings(max_examples=200, deadline=None, database=None)
@given(scenarios())
def test_every_contribution_is_counted_exactly_once(sc: Scenario) -> None:
    regs = Registers(POOL, LANES)
    jobs = dict(sc.jobs)
    ps = PS()
    delivered: dict[tuple[int, int], int] = defaultdict(int)
    sent_first: set[tuple[int, int, int]] = set()
    for what, job, seq, arg, lost in sc.events:
        key = (job, seq)
        worker = arg % sc.jobs[job].fan_in
        if what == "priority":
            # A MODIFY of the job's table entry, as the scheduler writes it.
            jobs[job] = replace(jobs[job], priority=arg)
            continue
        if what == "ps_result":
            if not ps.has_all(key, sc.jobs[job].fan_in) or lost:
                continue  # the PS answers only once it has every contribution
            pkt = Packet(
                kind=Kind.PS_RESULT,
                job=job,
                worker=PS_WORKER_ID,
                seq=seq,
                agg_index=sc.index[key],
                bitmap=(1 << sc.jobs[job].fan_in) - 1,
                lanes=np.zeros(LANES, dtype=np.int32),
            )
        elif what == "first":
            sent_first.add((job, seq, worker))
            pkt = _gradient(sc, job, seq, worker, Flag.NONE)
        elif (job, seq, worker) not in sent_first:
            continue  # a worker resends, and the network duplicates, only what was sent
        else:
            pkt = _gradient(sc, job, seq, worker, Flag.RESEND if what == "resend" else Flag.NONE)
        if lost:
            continue
        assert check(pkt, sc.jobs[job], POOL) is None
        if pkt.kind == Kind.GRADIENT:
            delivered[key] |= pkt.bitmap
        verdict = process(regs, pkt, jobs, 0)
        for out in verdict.outputs:
            if not isinstance(out, ToPort) or out.packet.kind != Kind.TO_PS:
                continue
            sent = out.packet
            assert out.port == sc.jobs[sent.job].ps_port, "a sum reaches its own job's PS"
            assert int(sent.lanes[0]) == sent.bitmap, "lanes hold exactly the bitmap's workers"
            if sent.flags & Flag.BYPASSED:
                assert bin(sent.bitmap).count("1") == 1
                ps.singles[(sent.job, sent.seq)] |= sent.bitmap
            else:
                ps.sums[(sent.job, sent.seq)].append(sent.bitmap)
        _check_exactly_once(regs, ps, delivered)


def _check_exactly_once(regs: Registers, ps: PS, delivered: dict[tuple[int, int], int]) -> None:
    in_switch: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i in range(regs.aggregators):
        if regs.agg_state[i] == AggState.PARTIAL:
            in_switch[(regs.agg_job[i], regs.agg_seq[i])].append(regs.agg_bitmap[i])
            assert int(regs.agg_lanes[i][0]) == regs.agg_bitmap[i]
    for key, bits in delivered.items():
        seen = 0
        for bitmap in ps.sums[key] + in_switch[key]:
            assert seen & bitmap == 0, f"{key}: bits {seen & bitmap:#x} counted twice"
            seen |= bitmap
        accounted = seen | ps.singles[key]
        assert accounted == bits, f"{key}: delivered {bits:#x}, accounted {accounted:#x}"


@given(
    owners=st.lists(st.tuples(st.integers(0, 3), st.sampled_from(list(AggState))), max_size=40),
    job=st.integers(0, 3),
    arrays=st.booleans(),
)
def test_reclaiming_a_job_frees_exactly_the_aggregators_it_holds(
    owners: list[tuple[int, AggState]], job: int, arrays: bool
) -> None:
    regs = Registers(max(len(owners), 1), LANES, arrays=arrays)
    for i, (owner, state) in enumerate(owners):
        regs.agg_job[i], regs.agg_state[i] = owner, state
    held = [i for i, (owner, state) in enumerate(owners) if owner == job and state != AggState.FREE]
    assert regs.reclaim_job(job) == len(held)
    states = [int(v) for v in regs.agg_state]
    for i, (_, state) in enumerate(owners):
        assert states[i] == (AggState.FREE if i in held else state)
    assert regs.reclaim_job(job) == 0
