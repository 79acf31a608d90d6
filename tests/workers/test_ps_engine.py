"""The parameter server's burst I/O over real UDP sockets: a burst's datagrams are served one by
one by the rules of ``workers.ps``, its replies leave together (as GSO runs, or one datagram
each with GSO off), and nothing a burst reads goes uncounted (too long, or no room)."""

from __future__ import annotations

import socket
import struct
import time
from collections import Counter
from collections.abc import Iterator

import numpy as np
import pytest
from p4ctl.engine import Burst, pack_address
from p4ctl.protocol import HEADER_SIZE, Flag, Kind, Packet, Policy, decode, encode

from tests.conftest import assert_arrival
from workers.ps import ParameterServer

GUARD_S = 30.0
UDP_SEGMENT = getattr(socket, "UDP_SEGMENT", 103)


@pytest.fixture
def switch_sock() -> Iterator[socket.socket]:
    """Stands in for the switch's data socket; room for a burst of replies."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
        s.bind(("127.0.0.1", 0))
        s.settimeout(GUARD_S)
        yield s


@pytest.fixture
def idle_ps() -> Iterator[ParameterServer]:
    """A PS that is not started: the test turns its loop (`_drain`) itself, so what one turn
    reads is deterministic (loopback queues a datagram during sendto)."""
    server = ParameterServer()
    try:
        yield server
    finally:
        server.stop()


def to_ps(job: int, seq: int, bitmap: int, lanes: np.ndarray, fan_in: int = 2) -> bytes:
    return encode(
        Packet(
            kind=Kind.TO_PS,
            job=job,
            fan_in=fan_in,
            seq=seq,
            agg_index=seq % 7,
            bitmap=bitmap,
            lanes=lanes,
            flags=Flag.BYPASSED,
        )
    )


def send_segmented(sock: socket.socket, data: bytes, segment: int, addr: tuple[str, int]) -> None:
    """One send that the kernel cuts into datagrams of `segment` bytes (UDP GSO), as a switch
    on the engine path sends a run; skips the test where the kernel has no GSO."""
    try:
        sock.sendmsg(
            [data], [(socket.IPPROTO_UDP, UDP_SEGMENT, struct.pack("H", segment))], 0, addr
        )
    except OSError as exc:
        pytest.skip(f"no UDP GSO of {len(data) // segment} segments here: {exc}")


def send_short_runs(sock: socket.socket, addr: tuple[str, int]) -> int:
    """32 runs of 60 too-short datagrams (10 bytes); returns how many. One burst reads them
    all (1,920 rows), and a turn of 1,024 leaves 896 in the burst for the next turn."""
    for _ in range(32):
        send_segmented(sock, bytes(10 * 60), 10, addr)
    return 32 * 60


def wait_for(ps: ParameterServer, received: int) -> None:
    deadline = time.monotonic() + GUARD_S
    while ps.counters().received < received:
        assert time.monotonic() < deadline, ps.counters()
        time.sleep(0.01)


@pytest.mark.parametrize("gso", [True, False], ids=["gso-on", "gso-off"])
def test_gso_off_sends_every_reply_as_a_datagram_of_its_own(
    gro_receiver: socket.socket, gso: bool
) -> None:
    # Sums of one-worker jobs: each TO_PS completes, so each gets a PS_RESULT, all to the one
    # switch; a receiver with UDP_GRO sees a GSO run of them as one payload.
    sums = 16
    one = np.arange(64, dtype=np.int32)
    server = ParameterServer(gso=gso)
    try:
        server.register_job(3, 1, switch=gro_receiver.getsockname(), policy=Policy.ATP)
        for seq in range(sums):
            gro_receiver.sendto(to_ps(3, seq, 0b1, one, fan_in=1), server.address)
        wait = time.monotonic() + GUARD_S
        while server.counters().received < sums and time.monotonic() < wait:
            server._drain()
        assert_arrival(gro_receiver, sums, HEADER_SIZE + 4 * 64, gso=gso)
    finally:
        server.stop()


def test_garbage_and_foreign_datagrams_in_one_burst_are_counted_and_valid_ones_served(
    idle_ps: ParameterServer, switch_sock: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    idle_ps.register_job(9, 2, switch=switch_sock.getsockname(), policy=Policy.ATP)
    one = np.arange(64, dtype=np.int32)
    good = to_ps(9, 0, 0b01, one)
    burst = [
        to_ps(9, 0, 0b01, one),
        b"\x01\x02",
        good[:-3],
        to_ps(9, 0, 0b10, 2 * one),  # completes seq 0
        b"\x07" + good[1:],
        good[:1] + b"\x09" + good[2:],
        to_ps(9, 1, 0b10, 5 * one),
        encode(Packet(kind=Kind.GRADIENT, job=9, fan_in=2, bitmap=1, lanes=one)),
        to_ps(9, 1, 0b100, one),
        to_ps(9, 1, 0b01, 4 * one),  # completes seq 1
    ]
    for data in burst:
        switch_sock.sendto(data, idle_ps.address)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as stranger:
        stranger.sendto(to_ps(9, 2, 0b01, one), idle_ps.address)  # not job 9's switch
    reads: list[int] = []
    recv = idle_ps._io.burst.recv

    def counted_recv(sock: socket.socket, *, wait: bool) -> tuple[int, int]:
        count, lost = recv(sock, wait=wait)
        reads.append(count)
        return count, lost

    monkeypatch.setattr(idle_ps._io.burst, "recv", counted_recv)
    idle_ps._drain()
    assert reads == [11, 0]  # all in one burst, then the socket is empty
    results = {r.seq: r for r in (decode(switch_sock.recv(2048)) for _ in range(2))}
    assert {seq: r.kind for seq, r in results.items()} == {0: Kind.PS_RESULT, 1: Kind.PS_RESULT}
    np.testing.assert_array_equal(results[0].lanes, 3 * one)
    np.testing.assert_array_equal(results[1].lanes, 9 * one)
    counters = idle_ps.counters()
    assert counters.received == 11
    assert counters.outcomes == {"added": 2, "completed": 2}
    assert counters.drops == {
        "bad_length": 2,
        "bad_version": 1,
        "bad_kind": 1,
        "not_to_ps": 1,
        "bad_bitmap": 1,
        "foreign_source": 1,
    }


def test_a_burst_of_many_jobs_completes_every_sum_exactly_once(
    switch_sock: socket.socket,
) -> None:
    jobs = {1: (2, 64), 2: (3, 256), 3: (4, 128), 4: (2, 256)}  # job: (fan_in, lanes)
    seqs = 64
    # The switch's side of it: one burst of every contribution, each sequence's workers in a
    # row (equal sizes to one address, so runs leave as GSO sends and may arrive as GRO).
    datagrams = [
        to_ps(job, seq, 1 << w, (w + 1) * np.arange(lanes, dtype=np.int32) + seq, fan_in)
        for seq in range(seqs)
        for job, (fan_in, lanes) in jobs.items()
        for w in range(fan_in)
    ]
    sender = Burst(len(datagrams), HEADER_SIZE + 4 * 256)
    for i, data in enumerate(datagrams):
        sender.rows[i, : len(data)] = np.frombuffer(data, np.uint8)
        sender.sizes[i] = len(data)
    with ParameterServer() as ps:
        for job, (fan_in, _) in jobs.items():
            ps.register_job(job, fan_in, switch=switch_sock.getsockname(), policy=Policy.ATP)
        sender.addrs[:] = pack_address(ps.address)
        assert (
            sender.send(switch_sock, sender.rows, sender.sizes, sender.addrs, len(datagrams)) == 0
        )
        replies = Counter()
        for _ in range(seqs * len(jobs)):
            result = decode(switch_sock.recv(2048))
            fan_in, lanes = jobs[result.job]
            expected = sum(w + 1 for w in range(fan_in)) * np.arange(lanes) + fan_in * result.seq
            np.testing.assert_array_equal(result.lanes, expected)
            assert (result.kind, result.bitmap) == (Kind.PS_RESULT, (1 << fan_in) - 1)
            replies[result.job, result.seq] += 1
        wait_for(ps, len(datagrams))
        counters = ps.counters()
    switch_sock.setblocking(False)
    with pytest.raises(BlockingIOError):  # nothing more came back
        switch_sock.recv(2048)
    assert set(replies.values()) == {1}
    assert set(replies) == {(job, seq) for job in jobs for seq in range(seqs)}
    assert counters.received == len(datagrams)
    assert counters.drops == {}
    assert counters.outcomes == {
        "added": len(datagrams) - seqs * len(jobs),  # each sum: one completes it
        "completed": seqs * len(jobs),
    }


def test_oversize_datagrams_are_dropped_for_the_reason_decode_gives(
    switch_sock: socket.socket,
) -> None:
    lanes = np.arange(256, dtype=np.int32)
    longest = to_ps(5, 0, 0b01, lanes)  # the longest datagram the engine's rows hold whole
    assert len(longest) == HEADER_SIZE + 4 * 256
    server = ParameterServer()
    try:
        server.register_job(5, 2, switch=switch_sock.getsockname())
        switch_sock.sendto(longest + b"\0\0\0\0", server.address)  # 256 lanes announced
        switch_sock.sendto(b"\x07" + longest[1:] + bytes(900), server.address)
        switch_sock.sendto(longest, server.address)
        switch_sock.sendto(to_ps(5, 0, 0b10, lanes), server.address)
        server._drain()
        np.testing.assert_array_equal(decode(switch_sock.recv(2048)).lanes, 2 * lanes)
        counters = server.counters()
        assert counters.received == 4
        assert counters.drops == {"bad_length": 1, "bad_version": 1}
        assert counters.outcomes == {"added": 1, "completed": 1}
    finally:
        server.stop()


def test_well_formed_datagrams_with_more_lanes_than_supported_are_bad_lanes(
    idle_ps: ParameterServer, switch_sock: socket.socket
) -> None:
    # The burst's rows end at 1,024 lanes.
    switch_sock.sendto(to_ps(6, 0, 0b01, np.zeros(1100, np.int32)), idle_ps.address)
    idle_ps._drain()
    counters = idle_ps.counters()
    assert (counters.received, counters.drops, counters.jobs) == (1, {"bad_lanes": 1}, frozenset())


def test_one_turn_serves_at_most_1024_datagrams_and_the_next_turn_the_rest(
    switch_sock: socket.socket,
) -> None:
    server = ParameterServer()
    try:
        sent = send_short_runs(switch_sock, server.address)
        server._drain()
        assert server.counters().received == 1024
        server._drain()  # the rest of the burst read in the first turn
        counters = server.counters()
        assert (counters.received, counters.drops) == (sent, {"bad_length": sent})
    finally:
        server.stop()


def test_rows_left_in_a_burst_are_served_by_the_running_ps(switch_sock: socket.socket) -> None:
    # All queued before the PS starts: after its first turn the socket is empty and 896
    # datagrams wait in the burst's rows.
    ps = ParameterServer()
    sent = send_short_runs(switch_sock, ps.address)
    with ps:
        wait_for(ps, sent)
        assert ps.counters().drops == {"bad_length": sent}


def test_datagrams_a_burst_has_no_room_for_are_counted(
    idle_ps: ParameterServer, switch_sock: socket.socket
) -> None:
    # 64 sends of 128 segments (a kernel's most, more than the engine's own senders use): one
    # receive reads all 8,192, and the burst has 4,096 rows.
    for _ in range(64):
        send_segmented(switch_sock, bytes(10 * 128), 10, idle_ps.address)
    idle_ps._drain()
    counters = idle_ps.counters()
    assert counters.received == 8192 - 4096 + 1024  # a turn serves 1,024 of the rows held
    assert counters.drops == {"bad_length": 1024, "burst_full": 4096}
