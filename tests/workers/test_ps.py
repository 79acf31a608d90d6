"""The parameter server over a real UDP socket: it completes sums, answers resends, and drops
and counts what is malformed or foreign."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import numpy as np
import pytest
from p4ctl.protocol import PS_WORKER_ID, Flag, Kind, Packet, Policy, decode, encode

from workers.ps import ParameterServer

LANES = 64
GUARD_S = 30.0


@pytest.fixture
def ps() -> Iterator[ParameterServer]:
    with ParameterServer(idle_timeout_s=0.3) as server:
        yield server


@pytest.fixture
def switch_sock() -> Iterator[socket.socket]:
    """Stands in for the switch's data socket (the PS answers to whoever it registered)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        s.settimeout(GUARD_S)
        yield s


def to_ps(job: int, seq: int, bitmap: int, lanes: np.ndarray, **kw: object) -> bytes:
    return encode(
        Packet(
            kind=Kind.TO_PS,
            job=job,
            fan_in=2,
            seq=seq,
            agg_index=5,
            bitmap=bitmap,
            lanes=lanes,
            **kw,
        )
    )  # type: ignore[arg-type]


def wait_for(ps: ParameterServer, count: int) -> None:
    deadline = time.monotonic() + GUARD_S
    while ps.counters().received < count:
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_bypassed_contributions_complete_and_resends_are_answered(
    ps: ParameterServer, switch_sock: socket.socket
) -> None:
    ps.register_job(9, 2, switch=switch_sock.getsockname(), policy=Policy.ATP)
    one = np.arange(LANES, dtype=np.int32)
    switch_sock.sendto(to_ps(9, 0, 0b01, one, flags=Flag.BYPASSED), ps.address)
    switch_sock.sendto(to_ps(9, 0, 0b01, one, flags=Flag.BYPASSED | Flag.RESEND), ps.address)
    switch_sock.sendto(to_ps(9, 0, 0b10, 2 * one, flags=Flag.BYPASSED), ps.address)
    result = decode(switch_sock.recv(2048))
    assert (result.kind, result.worker, result.seq, result.agg_index) == (
        Kind.PS_RESULT,
        PS_WORKER_ID,
        0,
        5,
    )
    np.testing.assert_array_equal(result.lanes, 3 * one)  # worker 0 counted once
    switch_sock.sendto(to_ps(9, 0, 0b10, 2 * one, flags=Flag.RESEND), ps.address)
    again = decode(switch_sock.recv(2048))
    np.testing.assert_array_equal(again.lanes, 3 * one)
    wait_for(ps, 4)
    assert ps.counters().outcomes == {"added": 1, "duplicate": 1, "completed": 1, "answered": 1}


def test_esa_copies_wait_until_the_critical_packets_are_served(
    switch_sock: socket.socket,
) -> None:
    # A PS that is not started, served one step at a time, so the order is deterministic:
    # loopback delivers each datagram into the PS's socket buffer during sendto.
    server = ParameterServer()
    try:
        server.register_job(4, 2, switch=switch_sock.getsockname(), policy=Policy.ESA)
        one = np.ones(LANES, dtype=np.int32)
        for seq in range(3):
            switch_sock.sendto(to_ps(4, seq, 0b11, 2 * one, flags=Flag.COMPLETE), server.address)
        switch_sock.sendto(to_ps(4, 7, 0b01, one, flags=Flag.BYPASSED), server.address)
        switch_sock.sendto(to_ps(4, 7, 0b10, one, flags=Flag.BYPASSED), server.address)
        server._drain()  # what the socket holds: the bypassed pair is answered, copies wait
        result = decode(switch_sock.recv(2048))
        assert (result.kind, result.seq) == (Kind.PS_RESULT, 7)
        counters = server.counters()
        assert counters.copies_queued == 3
        assert counters.outcomes == {"added": 1, "completed": 1}
        server._store_copies(64)  # the socket is empty: now the copies
        counters = server.counters()
        assert counters.copies_queued == 0
        assert counters.outcomes == {"added": 1, "completed": 1, "stored": 3}
        switch_sock.sendto(to_ps(4, 1, 0b10, one, flags=Flag.RESEND), server.address)
        server._drain()  # a resend of a stored copy is answered from it
        np.testing.assert_array_equal(decode(switch_sock.recv(2048)).lanes, 2 * one)
    finally:
        server.stop()


def test_esa_copies_are_stored_by_the_serving_thread(
    ps: ParameterServer, switch_sock: socket.socket
) -> None:
    ps.register_job(4, 2, switch=switch_sock.getsockname(), policy=Policy.ESA)
    for seq in range(200):
        lanes = np.full(LANES, seq, dtype=np.int32)
        switch_sock.sendto(to_ps(4, seq, 0b11, lanes, flags=Flag.COMPLETE), ps.address)
    deadline = time.monotonic() + GUARD_S
    while ps.counters().outcomes.get("stored", 0) < 200:
        assert time.monotonic() < deadline, ps.counters()
        time.sleep(0.01)
    assert ps.counters().copies_queued == 0


def test_malformed_and_foreign_packets_are_dropped_and_counted(
    ps: ParameterServer, switch_sock: socket.socket
) -> None:
    ps.register_job(9, 2, switch=switch_sock.getsockname())
    lanes = np.zeros(LANES, np.int32)
    good = to_ps(9, 0, 0b01, lanes)
    sent = {
        "bad_length": [b"\x01\x02", good[:-3]],
        "bad_version": [b"\x07" + good[1:]],
        "bad_kind": [good[:1] + b"\x09" + good[2:]],
        "not_to_ps": [encode(Packet(kind=Kind.GRADIENT, job=9, fan_in=2, bitmap=1, lanes=lanes))],
        "bad_fan_in": [encode(Packet(kind=Kind.TO_PS, job=9, fan_in=3, bitmap=1, lanes=lanes))],
        "bad_bitmap": [to_ps(9, 0, 0b100, lanes), to_ps(9, 0, 0, lanes)],
    }
    for datagrams in sent.values():
        for data in datagrams:
            switch_sock.sendto(data, ps.address)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as stranger:
        stranger.sendto(good, ps.address)  # a TO_PS for job 9, but not from job 9's switch
    wait_for(ps, 9)
    counters = ps.counters()
    expected = {reason: len(datagrams) for reason, datagrams in sent.items()}
    assert counters.drops == {**expected, "foreign_source": 1}
    assert counters.outcomes == {}
    assert 9 not in counters.jobs  # nothing was accepted, so nothing is kept


def test_a_packet_never_makes_the_ps_serve_a_job(
    ps: ParameterServer, switch_sock: socket.socket
) -> None:
    # Well formed, whole (both workers' bits), complete: still nobody registered job 4.
    pkt = to_ps(4, 0, 0b11, np.zeros(LANES, np.int32), flags=Flag.COMPLETE)
    switch_sock.sendto(pkt, ps.address)
    wait_for(ps, 1)
    counters = ps.counters()
    assert (counters.drops, counters.outcomes, counters.jobs) == ({"unknown_job": 1}, {}, set())
    switch_sock.settimeout(0.3)
    with pytest.raises(TimeoutError):
        switch_sock.recv(65536)  # and nothing is answered


def test_registered_job_state_is_freed_when_idle(
    ps: ParameterServer, switch_sock: socket.socket
) -> None:
    ps.register_job(3, 2, switch=switch_sock.getsockname())
    switch_sock.sendto(to_ps(3, 0, 1, np.zeros(LANES, np.int32)), ps.address)
    wait_for(ps, 1)
    assert 3 in ps.counters().jobs
    deadline = time.monotonic() + GUARD_S
    while 3 in ps.counters().jobs:
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_remove_job_forgets_it(ps: ParameterServer, switch_sock: socket.socket) -> None:
    ps.register_job(2, 2, switch=switch_sock.getsockname())
    switch_sock.sendto(to_ps(2, 0, 1, np.zeros(LANES, np.int32)), ps.address)
    wait_for(ps, 1)
    ps.remove_job(2)
    assert 2 not in ps.counters().jobs


def test_a_two_level_job_is_finished_from_its_tors_and_its_spine_and_answered_at_the_spine(
    ps: ParameterServer, switch_sock: socket.socket
) -> None:
    # p4/PROTOCOL.md 7.2: results go to the root (the spine); the ToRs' packets count too.
    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tor,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as stranger,
    ):
        tor.bind(("127.0.0.1", 0))
        ps.register_job(
            4, 4, switch=switch_sock.getsockname(), policy=Policy.ESA, children=(tor.getsockname(),)
        )

        def part(seq: int, bitmap: int, **kw: object) -> bytes:
            lanes = np.full(LANES, bitmap, np.int32)
            return encode(Packet(Kind.TO_PS, 4, 0, 4, 5, seq, bitmap=bitmap, lanes=lanes, **kw))  # type: ignore[arg-type]

        # A rack's partial sum evicted at the spine, the other rack's workers' resends from
        # their ToR (one of them also flushed inside a sum), and a stranger's forgery.
        stranger.sendto(part(0, 0b0100, flags=Flag.BYPASSED), ps.address)
        switch_sock.sendto(part(0, 0b0011, flags=Flag.EVICTED), ps.address)
        tor.sendto(part(0, 0b0100, flags=Flag.BYPASSED | Flag.RESEND), ps.address)
        tor.sendto(part(0, 0b1100, flags=Flag.FLUSHED), ps.address)
        tor.sendto(part(0, 0b1000, flags=Flag.BYPASSED | Flag.RESEND), ps.address)
        result = decode(switch_sock.recv(2048))
        assert (result.kind, result.bitmap) == (Kind.PS_RESULT, 0b1111)
        np.testing.assert_array_equal(result.lanes, np.full(LANES, 0b1111))  # each rack once
        # A resend that reaches the PS from a ToR is answered, down from the spine.
        tor.sendto(part(0, 0b0001, flags=Flag.BYPASSED | Flag.RESEND), ps.address)
        again = decode(switch_sock.recv(2048))
        np.testing.assert_array_equal(again.lanes, result.lanes)
        wait_for(ps, 6)
        assert ps.counters().drops == {"foreign_source": 1}


def test_a_spill_job_adds_its_racks_and_answers_each_tor(
    ps: ParameterServer, switch_sock: socket.socket
) -> None:
    # p4/PROTOCOL.md 7.8: no spine; each ToR's parent is the PS, its sums come as UP, and
    # every result (and every answer to a resend) goes to each ToR of the job.
    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tor_b,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as other,
    ):
        tor_b.bind(("127.0.0.1", 0))
        tor_b.settimeout(GUARD_S)
        other.bind(("127.0.0.1", 0))
        tor_a = switch_sock
        ps.register_job(
            6, 4, switch=tor_a.getsockname(), policy=Policy.ATP,
            children=(tor_b.getsockname(),), spill=True,
        )  # fmt: skip
        ps.register_job(7, 4, switch=other.getsockname(), policy=Policy.ATP)

        def up(job: int, seq: int, bitmap: int, flags: Flag = Flag.COMPLETE) -> bytes:
            lanes = np.full(LANES, bitmap, np.int32)
            pkt = Packet(Kind.UP, job, PS_WORKER_ID, 4, 5, seq, flags, bitmap=bitmap, lanes=lanes)
            data: bytes = encode(pkt)
            return data

        tor_a.sendto(up(6, 0, 0b0011), ps.address)
        tor_b.sendto(up(6, 0, 0b1100), ps.address)
        for tor in (tor_a, tor_b):
            result = decode(tor.recv(2048))
            assert (result.kind, result.bitmap) == (Kind.PS_RESULT, 0b1111)
            np.testing.assert_array_equal(result.lanes, np.full(LANES, 0b1111))  # each rack once
        # A worker's resend (static asks its parent: UP, RESEND) is answered to each ToR too.
        tor_b.sendto(up(6, 0, 0b0100, Flag.RESEND), ps.address)
        for tor in (tor_a, tor_b):
            assert decode(tor.recv(2048)).seq == 0
        # A job that is not a spill takes no UP: only a spill job's parent is the PS.
        other.sendto(up(7, 0, 0b1111), ps.address)
        wait_for(ps, 4)
    counters = ps.counters()
    assert counters.outcomes == {"added": 1, "completed": 1, "answered": 1}
    assert counters.drops == {"not_to_ps": 1}
