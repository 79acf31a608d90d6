"""The client's burst I/O (``workers.burst_io``) over real UDP sockets: exact sums through a
lossy switch, a burst of duplicates and garbage, the retransmission decisions on a stall and
on losses, and single datagrams with GSO off."""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from p4ctl.engine import Burst, pack_address
from p4ctl.protocol import HEADER_SIZE, Flag, Kind, Policy, decode, encode

from tests.conftest import assert_arrival
from workers.burst_io import STAT_NAMES, BurstIO
from workers.client import ClientStats
from workers.options import ClientOptions
from workers.rendezvous import WorkerJoin, parse_join
from workers.transfer import Transfer

LANES = 64
GUARD_S = 10.0


def exact_inputs(n: int, size: int, seed: int) -> list[np.ndarray]:
    """Multiples of 2**-10 in (-1, 1): every step of the fixed-point sum is exact."""
    rng = np.random.default_rng(seed)
    return [(rng.integers(-1000, 1000, size) / 1024).astype(np.float32) for _ in range(n)]


def assert_exact(run_all: Any, clients: list[Any], seed: int) -> None:
    """One allreduce of exact inputs on every client gives every client the exact sum."""
    xs = exact_inputs(len(clients), 20_000, seed)
    exact = np.sum([x.astype(np.float64) for x in xs], axis=0).astype(np.float32)
    for got in run_all(clients, xs, key="grad"):
        assert not isinstance(got, BaseException), repr(got)
        np.testing.assert_array_equal(got, exact)


@pytest.mark.parametrize("policy", [Policy.ATP, Policy.STATIC], ids=["atp", "static"])
def test_sums_are_exact_through_one_percent_loss(
    make_rig: Any, run_all: Any, policy: Policy
) -> None:
    rig = make_rig(aggregators=256, drop_rate=0.01, seed=11)
    static = {"part_size": 16} if policy == Policy.STATIC else {}
    rig.install(4, 3, policy, **static)
    clients = rig.clients(4, 3, policy, **static)
    try:
        for seed in (1, 2):  # the second round uses exponents chosen from the first
            assert_exact(run_all, clients, seed)
    finally:
        for c in clients:
            c.close()
    assert rig.control.counters().drops["injected_loss"] > 0
    assert sum(c.stats().resent for c in clients) > 0


def test_client_stats_fields_are_the_counters_the_io_keeps() -> None:
    assert ClientStats.__slots__ == STAT_NAMES


# ------------------------------------------------------------ a client without its thread


@pytest.fixture
def fake_switch() -> Iterator[socket.socket]:
    """Stands in for the switch: receives the gradients, and the test answers by hand."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        s.setblocking(False)
        yield s


def join_to(switch: socket.socket, window: int) -> WorkerJoin:
    host, port = switch.getsockname()
    return parse_join(
        {
            "job_id": 6,
            "worker_id": 0,
            "fan_in": 1,
            "policy": "atp",
            "switch": {"host": host, "port": port},
            "ps": {"host": host, "port": port},
            "lanes": LANES,
            "window": window,
            "placement": {"kind": "hashed", "seed": 3, "pool": 4096},
        }
    )


def start(
    switch: socket.socket, fragments: int, *, gso: bool = True
) -> tuple[BurstIO, Transfer, socket.socket]:
    """A `BurstIO` on a fresh socket, one transfer of `fragments` in its window, sent."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    options = ClientOptions(timeout_s=30.0, initial_rto_s=5.0, min_rto_s=0.2, max_rto_s=10.0)
    io = BurstIO(join_to(switch, window=fragments), sock, options, gso=gso)
    x = exact_inputs(1, fragments * LANES, seed=5)[0]
    t = Transfer(x, None, LANES, first_seq=0, fan_in=1, previous=None)
    io.accept(t)
    io.send_new()
    return io, t, sock


def sent_to(switch: socket.socket) -> list[bytes]:
    """Every datagram queued at the fake switch (loopback queues during the send)."""
    got = []
    while True:
        try:
            got.append(switch.recv(65536))
        except BlockingIOError:
            return got


def answer(gradient: bytes, kind: Kind = Kind.RESULT, **changes: Any) -> bytes:
    """The switch's sum for a one-worker job: the gradient itself, as a result."""
    pkt = decode(gradient, lanes=LANES)
    return encode(pkt.replace(kind=kind, flags=pkt.flags | Flag.COMPLETE, **changes))


def send_burst(switch: socket.socket, to: tuple[str, int], datagrams: list[bytes]) -> None:
    """All of `datagrams` in one sendmmsg (same-size neighbours merged by GSO)."""
    stride = max(len(d) for d in datagrams)
    burst = Burst(len(datagrams), stride)
    for i, d in enumerate(datagrams):
        burst.rows[i, : len(d)] = np.frombuffer(d, np.uint8)
        burst.sizes[i] = len(d)
    burst.addrs[:] = pack_address(to)
    assert burst.send(switch, burst.rows, burst.sizes, burst.addrs, len(datagrams)) == 0


def test_a_burst_of_duplicates_and_garbage_takes_each_sum_once(
    fake_switch: socket.socket,
) -> None:
    io, t, sock = start(fake_switch, fragments=8)
    try:
        gradients = sent_to(fake_switch)
        assert [decode(g, lanes=LANES).seq for g in gradients] == list(range(8))
        r = [answer(g) for g in gradients]
        foreign = [
            b"\x01" * 10,  # too short
            bytes([2]) + r[1][1:],  # another protocol version
            answer(gradients[1], job=7),  # another job
            answer(gradients[1], seq=100),  # a fragment this worker never sent
            gradients[1],  # a gradient, not a sum
            r[1][:HEADER_SIZE] + bytes(4 * LANES),  # twice the lanes the header says
        ]
        foreign[-1] = foreign[-1][:18] + (2 * LANES).to_bytes(2, "big") + foreign[-1][20:]
        first = [r[0], r[0], *foreign, answer(gradients[3], Kind.PS_RESULT), r[1], r[3]]
        # Fragment 2 is missing, so 3's duplicate is still in the window; r[4] .. r[7] are
        # equal-size neighbours that leave as one GSO message.
        second = [r[3], r[2], *r[4:], r[7]]
        for burst, taken in ((first, 3), (second, 5)):
            send_burst(fake_switch, sock.getsockname(), burst)
            assert select.select([sock], [], [], GUARD_S)[0]
            before = ClientStats(**io.counts)
            io.receive()  # one burst takes it all
            stats = ClientStats(**io.counts)
            assert stats.results_switch + stats.results_ps - taken == (
                before.results_switch + before.results_ps
            )
            assert stats.ignored - before.ignored == len(burst) - taken
        assert (stats.results_switch, stats.results_ps) == (7, 1)
        assert stats.bytes_switch == 7 * 4 * LANES and stats.bytes_ps == 4 * LANES
        assert t.finished.is_set() and io.oldest_inflight() is None
        np.testing.assert_array_equal(t.result(), exact_inputs(1, 8 * LANES, seed=5)[0])
    finally:
        sock.close()


def resends(switch: socket.socket) -> list[tuple[int, bool]]:
    """``(seq, RESEND flag)`` of each datagram the fake switch got since the last call."""
    pkts = [decode(d, lanes=LANES) for d in sent_to(switch)]
    return [(p.seq, bool(p.flags & Flag.RESEND)) for p in pkts]


def stall(switch: socket.socket) -> list[Any]:
    """What the client sends and decides while nothing at all comes back."""
    io, _, sock = start(switch, fragments=16)
    try:
        sent_to(switch)
        start_s = time.monotonic()
        trace: list[Any] = []
        for later in (10, 20):  # only the oldest probes, backed off; the rest are held
            io.on_timers(start_s + later)
            trace.append(resends(switch))
        trace.append(io.oldest_inflight())
        error = io.expired(start_s + 60)
        trace.append(str(error))
        return trace
    finally:
        sock.close()


def lose_three(switch: socket.socket) -> list[Any]:
    """What the client sends and decides when fragments 0, 5 and 11 get no result."""
    io, _, sock = start(switch, fragments=16)
    try:
        gradients = sent_to(switch)
        start_s = time.monotonic()
        for g in gradients:
            if decode(g, lanes=LANES).seq not in (0, 5, 11):
                switch.sendto(answer(g), sock.getsockname())
        while select.select([sock], [], [], 0.2)[0]:
            io.receive()
        trace: list[Any] = [io.oldest_inflight()]
        # 0 and 5 are overtaken by 8 results or more, 11 is not: fast retransmit of 0 and 5,
        # long before their first timeout (ClientOptions in `start`: 5 s).
        io.on_timers(start_s + 1.0)
        trace.append(resends(switch))
        io.on_timers(start_s + 100)  # results flowed since: every timed-out fragment goes
        trace.append(resends(switch))
        trace.append({k: v for k, v in io.counts.items()})
        return trace
    finally:
        sock.close()


def test_a_stalled_client_probes_with_the_oldest_fragment_only(
    fake_switch: socket.socket,
) -> None:
    stalled = stall(fake_switch)
    assert stalled[:3] == [[(0, True)], [(0, True)], (0, 2)]
    assert "no result for fragment 0" in stalled[3]


def test_overtaken_fragments_are_resent_fast_and_the_rest_at_their_timeout(
    fake_switch: socket.socket,
) -> None:
    lossy = lose_three(fake_switch)
    assert lossy[:3] == [(0, 0), [(0, True), (5, True)], [(0, True), (5, True), (11, True)]]
    assert lossy[3]["fast_resent"] == 2 and lossy[3]["resent"] == 5


@pytest.mark.parametrize("gso", [True, False], ids=["gso-on", "gso-off"])
def test_gso_off_sends_every_fragment_as_a_datagram_of_its_own(
    gro_receiver: socket.socket, gso: bool
) -> None:
    # A receiver with UDP_GRO on loopback sees a GSO run as one payload, as a switch behind a
    # veth or TAP would (BMv2 then drops it as BAD_LENGTH); with GSO off, one fragment each.
    fragments, row = 16, HEADER_SIZE + 4 * LANES
    _, _, sock = start(gro_receiver, fragments, gso=gso)
    try:
        assert_arrival(gro_receiver, fragments, row, gso=gso)
    finally:
        sock.close()


def test_an_allreduce_through_switch_and_ps_is_exact_with_gso_off_everywhere(
    make_rig: Any, run_all: Any
) -> None:
    rig = make_rig(aggregators=256, gso=False, ps_gso=False)
    rig.install(4, 3, Policy.ATP)
    clients = rig.clients(4, 3, Policy.ATP, gso=False)
    try:
        assert_exact(run_all, clients, seed=3)
    finally:
        for c in clients:
            c.close()


def test_a_static_worker_sends_seq_only_after_the_result_of_seq_minus_part_size(
    fake_switch: socket.socket,
) -> None:
    # p4/PROTOCOL.md section 3: seq takes the slot and copy of seq - 2 * part_size; while
    # seq - part_size has no result, sending seq would let a later one overwrite a lost copy.
    host, port = fake_switch.getsockname()
    static = parse_join(
        {
            "job_id": 6, "worker_id": 0, "fan_in": 1, "policy": "static",
            "switch": {"host": host, "port": port}, "ps": {"host": host, "port": port},
            "lanes": LANES, "window": 8,  # wider than the partition: the partition binds
            "placement": {"kind": "static", "part_base": 0, "part_size": 4},
        }
    )  # fmt: skip
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    options = ClientOptions(timeout_s=30.0, initial_rto_s=5.0, min_rto_s=0.2, max_rto_s=10.0)
    try:
        io = BurstIO(static, sock, options)
        io.accept(Transfer(exact_inputs(1, 12 * LANES, 5)[0], None, LANES, 0, 1, None))
        io.send_new()
        first = sent_to(fake_switch)
        assert [decode(g, lanes=LANES).seq for g in first] == [0, 1, 2, 3]
        for g in first[1:]:  # fragment 0 is lost
            fake_switch.sendto(answer(g), sock.getsockname())
        while select.select([sock], [], [], 0.2)[0]:
            io.receive()
        io.send_new()
        assert sent_to(fake_switch) == []  # 4 would need 0's result
        fake_switch.sendto(answer(first[0]), sock.getsockname())
        assert select.select([sock], [], [], GUARD_S)[0]
        io.receive()
        io.send_new()
        assert [decode(g, lanes=LANES).seq for g in sent_to(fake_switch)] == [4, 5, 6, 7]
    finally:
        sock.close()
