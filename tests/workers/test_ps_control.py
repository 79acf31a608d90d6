"""The PS's control channel over real TCP and UDP: only a request signed with the shared secret,
and fresh, registers or removes a job; a refused or malformed one changes nothing; and
``inasched ps --control-port`` serves it as a process of its own."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import numpy as np
import pytest
from p4ctl.protocol import Flag, Kind, Packet, encode

from cli.ps import SECRET_ENV
from workers.ps import ParameterServer
from workers.ps_control import MAX_SKEW_S, ControlError, PsControlServer, RemotePs, _mac

SECRET = b"a-secret-of-the-service-0123"
LANES = 64
GUARD_S = 30.0


@pytest.fixture
def ps() -> Iterator[ParameterServer]:
    with ParameterServer() as server:
        yield server


@pytest.fixture
def control(ps: ParameterServer) -> Iterator[PsControlServer]:
    server = PsControlServer(ps, SECRET).start()
    yield server
    server.stop()


@pytest.fixture
def switch_sock() -> Iterator[socket.socket]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        s.settimeout(GUARD_S)
        yield s


def whole_sum(job: int, seq: int) -> bytes:
    """A complete atp sum of 2 workers, as the switch sends it to the PS."""
    lanes = np.arange(LANES, dtype=np.int32)
    return encode(Packet(Kind.TO_PS, job, 0, 2, 5, seq, Flag.COMPLETE, 0, 0, 0b11, lanes))


def wait_received(ps: ParameterServer, count: int) -> None:
    deadline = time.monotonic() + GUARD_S
    while ps.counters().received < count:
        assert time.monotonic() < deadline
        time.sleep(0.01)


def raw_call(address: tuple[str, int], line: bytes) -> dict[str, object]:
    with socket.create_connection(address, timeout=GUARD_S) as sock:
        sock.sendall(line)
        reply = json.loads(sock.makefile("rb").readline())
    assert isinstance(reply, dict)
    return reply


def test_a_registered_job_is_served_from_its_switch_only(
    ps: ParameterServer, control: PsControlServer, switch_sock: socket.socket
) -> None:
    remote = RemotePs(control.address, SECRET)
    remote.register_job(7, 2, switch=switch_sock.getsockname(), window=16, policy="atp")
    switch_sock.sendto(whole_sum(7, 0), ps.address)
    reply = switch_sock.recv(65536)
    assert reply[1] == Kind.PS_RESULT  # answered to the registered switch
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as other:
        other.sendto(whole_sum(7, 1), ps.address)  # the same job, another source
        wait_received(ps, 2)
    counters = remote.counters()
    assert counters.outcomes == {"completed": 1}
    assert counters.drops == {"foreign_source": 1}
    remote.remove_job(7)
    switch_sock.sendto(whole_sum(7, 2), ps.address)
    wait_received(ps, 3)
    assert ps.counters().drops == {"foreign_source": 1, "unknown_job": 1}


def test_a_spill_job_registered_remotely_gets_its_results_at_each_tor(
    ps: ParameterServer, control: PsControlServer, switch_sock: socket.socket
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tor_b:
        tor_b.bind(("127.0.0.1", 0))
        tor_b.settimeout(GUARD_S)
        RemotePs(control.address, SECRET).register_job(
            7, 2, switch=switch_sock.getsockname(), children=(tor_b.getsockname(),), spill=True
        )
        switch_sock.sendto(whole_sum(7, 0), ps.address)
        for tor in (switch_sock, tor_b):
            assert tor.recv(65536)[1] == Kind.PS_RESULT
    assert ps._jobs[7].spill


def test_a_new_job_under_a_switch_job_id_gets_nothing_the_ps_kept_for_an_older_one(
    ps: ParameterServer, control: PsControlServer, switch_sock: socket.socket
) -> None:
    """The older job's removal never reached the PS (it was away): a registration again by a
    new term keeps what the PS holds, one of a new job (``fresh``) starts from nothing."""
    remote = RemotePs(control.address, SECRET)
    register = {"switch": switch_sock.getsockname(), "window": 16, "policy": "atp"}
    remote.register_job(7, 2, **register)
    switch_sock.sendto(whole_sum(7, 0), ps.address)
    assert switch_sock.recv(65536)[1] == Kind.PS_RESULT
    assert remote.counters().jobs == {7}  # it keeps the result, for a resend
    remote.register_job(7, 2, **register)
    assert remote.counters().jobs == {7}
    remote.register_job(7, 2, fresh=True, **register)
    assert remote.counters().jobs == set()


def test_a_request_under_another_secret_changes_nothing(
    ps: ParameterServer, control: PsControlServer, switch_sock: socket.socket
) -> None:
    intruder = RemotePs(control.address, b"not-the-secret-of-this-ps")
    with pytest.raises(ControlError, match="bad MAC"):
        intruder.register_job(7, 2, switch=switch_sock.getsockname())
    switch_sock.sendto(whole_sum(7, 0), ps.address)
    wait_received(ps, 1)
    assert ps.counters().drops == {"unknown_job": 1}


def test_a_replayed_request_is_refused(ps: ParameterServer, control: PsControlServer) -> None:
    body = {"op": "register", "job": 3, "fan_in": 2, "switch": ["127.0.0.1", 9]}
    body["at"] = time.time() - MAX_SKEW_S - 5  # recorded a while ago, correctly signed
    line = json.dumps({"body": body, "mac": _mac(SECRET, body)}).encode() + b"\n"
    reply = raw_call(control.address, line)
    assert reply["ok"] is False and "off" in str(reply["error"])
    assert ps._jobs == {}


@pytest.mark.parametrize(
    "line",
    [
        b"\n",
        b"not json\n",
        b"\xff\xfe\n",
        b"[1, 2]\n",
        b'{"body": {"op": "register"}}\n',
        b"x" * 70000 + b"\n",
    ],
    ids=["empty", "text", "bad-utf8", "list", "no-mac", "too-long"],
)
def test_malformed_requests_are_refused_and_the_channel_keeps_serving(
    ps: ParameterServer, control: PsControlServer, line: bytes
) -> None:
    reply = raw_call(control.address, line)
    assert reply["ok"] is False and reply["error"]
    RemotePs(control.address, SECRET).register_job(1, 2, switch=("127.0.0.1", 9))
    assert set(ps._jobs) == {1}


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"op": "register", "job": 5000, "fan_in": 2, "switch": ["127.0.0.1", 9]}, "range"),
        ({"op": "register", "job": 1, "fan_in": "2", "switch": ["127.0.0.1", 9]}, "integer"),
        ({"op": "register", "job": 1, "fan_in": 2, "switch": "127.0.0.1:9"}, "HOST, PORT"),
        ({"op": "register", "job": 1, "fan_in": 2, "switch": ["127.0.0.1", 0]}, "port"),
        ({"op": "register", "job": 1, "fan_in": 2, "switch": ["no.such.host.", 9]}, ""),
        ({"op": "register", "job": 1, "fan_in": 2, "switch": ["h", 9], "policy": 3}, "policy"),
        ({"op": "register", "job": 1, "fan_in": 2, "switch": ["h", 9], "spill": 1}, "spill"),
        ({"op": "shutdown"}, "unknown op"),
    ],
)
def test_signed_but_invalid_requests_are_refused(
    ps: ParameterServer, control: PsControlServer, fields: dict[str, object], error: str
) -> None:
    body = {**fields, "at": time.time()}
    line = json.dumps({"body": body, "mac": _mac(SECRET, body)}).encode() + b"\n"
    reply = raw_call(control.address, line)
    assert reply["ok"] is False and error in str(reply["error"])
    assert ps._jobs == {}


def test_a_ps_that_is_not_there_is_a_control_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = s.getsockname()  # bound, not listening: connections are refused
        with pytest.raises(ControlError, match="PS control at"):
            RemotePs(address, SECRET, timeout_s=2).remove_job(1)


def free_port(kind: int) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_inasched_ps_serves_the_control_channel(switch_sock: socket.socket) -> None:
    udp, tcp = free_port(socket.SOCK_DGRAM), free_port(socket.SOCK_STREAM)
    env = {**os.environ, SECRET_ENV: SECRET.decode()}
    argv = [sys.executable, "-m", "cli.ps", "--port", str(udp), "--control-port", str(tcp)]
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE)
    try:
        remote = RemotePs(("127.0.0.1", tcp), SECRET)
        deadline = time.monotonic() + GUARD_S
        while True:
            try:
                remote.register_job(9, 2, switch=switch_sock.getsockname(), policy="atp")
                break
            except ControlError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        switch_sock.sendto(whole_sum(9, 0), ("127.0.0.1", udp))
        assert switch_sock.recv(65536)[1] == Kind.PS_RESULT
        assert remote.counters().outcomes == {"completed": 1}
    finally:
        proc.terminate()
        proc.wait(GUARD_S)
    assert proc.returncode == 0


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--control-port", "1"], {}, "at least 16 characters"),
        (["--control-port", "1"], {SECRET_ENV: "short"}, "at least 16 characters"),
        (["--job", "1:2"], {}, "--job needs --switch"),
    ],
)
def test_inasched_ps_refuses_a_missing_secret_or_switch(
    args: list[str], env: dict[str, str], message: str
) -> None:
    clean = {k: v for k, v in os.environ.items() if k != SECRET_ENV}
    done = subprocess.run(
        [sys.executable, "-m", "cli.ps", *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=GUARD_S,
    )
    assert done.returncode == 2 and message in done.stderr
