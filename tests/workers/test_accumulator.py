"""The PS's exactly-once bookkeeping, without sockets."""

from __future__ import annotations

import numpy as np
from p4ctl.protocol import Flag, Kind, Packet, Policy

from workers.accumulator import FragmentSum, JobLedger, Part, Taken

LANES = 4


def part(bitmap: int, value: int) -> Part:
    return Part(bitmap, 0, np.full(LANES, value * bitmap.bit_count(), np.int32))


def test_a_single_already_inside_a_sum_is_not_counted_again() -> None:
    frag = FragmentSum(3)
    assert frag.add(part(0b001, 1)) is Taken.ADDED
    assert frag.add(part(0b001, 1)) is Taken.DUPLICATE
    assert frag.add(part(0b011, 1)) is Taken.ADDED
    assert not frag.complete()
    frag.add(part(0b100, 1))
    assert frag.complete()
    assert frag.total()[1].tolist() == [3] * LANES


def test_overlapping_sums_are_combined_through_an_exact_cover() -> None:
    frag = FragmentSum(4)
    frag.add(part(0b0011, 1))  # flushed partial {0, 1}
    frag.add(part(0b0110, 1))  # a resend of 1 joined a new partial with 2
    frag.add(part(0b1000, 1))
    assert not frag.complete()  # {0,1} + {1,2} would count worker 1 twice
    frag.add(part(0b0100, 1))
    assert frag.complete()
    assert frag.total()[1].tolist() == [4] * LANES


def test_mixed_raw_and_fixed_parts_sum_in_float() -> None:
    frag = FragmentSum(2)
    frag.add(Part(0b01, None, np.full(LANES, 1e6, np.float32)))
    frag.add(Part(0b10, 0, np.full(LANES, 2**28, np.int32)))  # 0.5 at S = 29
    exponent, lanes = frag.total()
    assert exponent is None and lanes.tolist() == [1e6 + 0.5] * LANES


def to_ps(seq: int, bitmap: int, flags: Flag = Flag.NONE) -> Packet:
    return Packet(
        kind=Kind.TO_PS,
        job=1,
        fan_in=2,
        seq=seq,
        bitmap=bitmap,
        flags=flags,
        lanes=np.ones(LANES, np.int32),
    )


def test_results_are_kept_for_resends_until_every_worker_moved_past() -> None:
    ledger = JobLedger(1, 2, window=4, policy=Policy.ATP, max_results=100)
    assert ledger.accept(to_ps(0, 0b11, Flag.COMPLETE)).outcome == "completed"
    assert ledger.accept(to_ps(0, 0b01, Flag.RESEND)).outcome == "answered"
    ledger.accept(to_ps(3, 0b11, Flag.COMPLETE))
    assert 0 in ledger.results  # a worker at seq 3 may still lack seq 0's result (W = 4)
    ledger.accept(to_ps(4, 0b11, Flag.COMPLETE))
    assert 0 not in ledger.results and ledger.forgotten == 0
    assert ledger.accept(to_ps(0, 0b01, Flag.RESEND)).outcome == "stale"


def test_esa_sum_completed_in_the_switch_is_stored_not_multicast_again() -> None:
    ledger = JobLedger(1, 2, window=4, policy=Policy.ESA, max_results=100)
    assert ledger.accept(to_ps(0, 0b11, Flag.COMPLETE)).outcome == "stored"
    assert ledger.accept(to_ps(0, 0b10, Flag.RESEND)).reply is not None


def test_esa_copy_that_completes_a_resent_sum_answers_the_resender() -> None:
    # The PS stores esa's copies when it has nothing else to do, so a worker's resend can
    # reach it first: the copy then completes that open sum, and the resender gets the result.
    ledger = JobLedger(1, 2, window=4, policy=Policy.ESA, max_results=100)
    assert ledger.accept(to_ps(0, 0b10, Flag.RESEND)).outcome == "added"
    copy = ledger.accept(to_ps(0, 0b11, Flag.COMPLETE))
    assert copy.outcome == "completed"
    assert copy.reply is not None and copy.reply.kind == Kind.PS_RESULT
    np.testing.assert_array_equal(copy.reply.lanes, np.ones(LANES))  # the copy's sum


def test_results_past_the_cap_are_dropped_oldest_first() -> None:
    ledger = JobLedger(1, 2, window=1000, policy=None, max_results=2)
    for seq in range(3):
        ledger.accept(to_ps(seq, 0b11, Flag.COMPLETE))
    assert list(ledger.results) == [1, 2]


def test_open_sums_are_capped() -> None:
    ledger = JobLedger(1, 2, window=1000, policy=None, max_results=2)
    outcomes = [ledger.accept(to_ps(seq, 0b01)).outcome for seq in range(3)]
    assert outcomes == ["added", "added", "overflow"]
