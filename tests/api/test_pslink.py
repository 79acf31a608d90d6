"""`PsLink` against a real PS over its control channel (real TCP, real UDP), on a clock the
test moves: an outage is one episode with one log line at each end, calls fail at once between
retries, retries grow apart up to `RETRY_MAX_S`, and a restored job's registration is owed and
made once the PS answers."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator

import numpy as np
import pytest
from p4ctl.backend import Endpoint
from p4ctl.protocol import Flag, Kind, Packet, encode

from api.coordinator.pslink import RETRY_MAX_S, RETRY_S, PsLink
from scheduler.errors import PsUnavailable
from tests.api.conftest import free_port
from workers.ps import ParameterServer
from workers.ps_control import PsControlServer, RemotePs

SECRET = b"a-secret-of-the-link-test-0123"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def switch() -> Iterator[socket.socket]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        s.settimeout(30.0)
        yield s


@pytest.fixture
def ps() -> Iterator[ParameterServer]:
    with ParameterServer() as server:
        yield server


def whole_sum(job: int) -> bytes:
    """A complete sum of 2 workers, as the switch sends it to the PS."""
    lanes = np.arange(64, dtype=np.int32)
    return encode(Packet(Kind.TO_PS, job, 0, 2, 5, 0, Flag.COMPLETE, 0, 0, 0b11, lanes))


def test_an_outage_is_one_episode_and_a_restored_job_is_registered_once_the_ps_answers(
    ps: ParameterServer, switch: socket.socket, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="api.coordinator.pslink")
    port = free_port(socket.SOCK_STREAM)  # nothing listens there yet
    clock = Clock()
    host, switch_port = switch.getsockname()
    link = PsLink(
        RemotePs(("127.0.0.1", port), SECRET), switch=Endpoint(host, switch_port), clock=clock
    )
    with pytest.raises(PsUnavailable, match="Connection refused"):
        link.register(1, 2, window=8, policy="atp")
    link.restore(7, 2, window=8, policy="atp")  # a running job: owed, never raised
    link.remove(3)  # never raises
    assert link.away is not None and "Connection refused" in link.away
    waits = []
    for _ in range(6):
        assert not link.due()
        start = clock.now
        while not link.due():
            clock.now += 0.5
        waits.append(clock.now - start)
        with pytest.raises(PsUnavailable):
            link.register(1, 2, window=8, policy="atp")  # one more call that fails
    assert waits[0] == pytest.approx(RETRY_S, abs=0.5)
    assert waits[-1] == pytest.approx(RETRY_MAX_S, abs=0.5)
    assert waits == sorted(waits)
    assert link.away_s() > 0
    control = PsControlServer(ps, SECRET, port=port).start()
    try:
        clock.now += RETRY_MAX_S
        assert link.due()  # the owed registration is made here
        assert link.away is None and link.away_s() == 0
        switch.sendto(whole_sum(7), ps.address)
        assert switch.recv(65536)[1] == Kind.PS_RESULT  # the PS serves the restored job
        link.register(1, 2, window=8, policy="atp")
    finally:
        control.stop()
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages
    assert "does not take jobs" in messages[0] and f"127.0.0.1:{port}" in messages[0]
    # The first call and one per retry (the owed registration); the others failed at once.
    assert "takes jobs again" in messages[1] and "(7 calls failed meanwhile)" in messages[1]


def test_a_routed_job_is_answered_at_the_top_of_its_tree_and_heard_from_below(
    ps: ParameterServer,
) -> None:
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(3)]
    root, top, below = sockets
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
            s.settimeout(30.0)
        link = PsLink(ps, switch=Endpoint(*root.getsockname()))
        link.register(4, 2, window=8, policy="atp")
        link.route(
            4, switch=Endpoint(*top.getsockname()), children=(Endpoint(*below.getsockname()),)
        )
        below.sendto(whole_sum(4), ps.address)
        assert top.recv(65536)[1] == Kind.PS_RESULT  # heard from below, answered at the top
        root.sendto(whole_sum(4), ps.address)  # the fabric's root is not in this job's tree
        top.sendto(whole_sum(4), ps.address)  # a resend: answered from the kept result
        assert top.recv(65536)[1] == Kind.PS_RESULT
        assert ps.counters().drops.get("foreign_source") == 1
    finally:
        for s in sockets:
            s.close()
