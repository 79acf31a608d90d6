"""The SwitchBackend contract, held by both implementations: the in-memory one and the
P4Runtime client against a real soft switch over gRPC, with real UDP traffic."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator

import grpc
import numpy as np
import pytest
from p4.v1 import p4runtime_pb2 as p4rt
from p4.v1 import p4runtime_pb2_grpc
from p4ctl.backend import (
    Endpoint,
    InMemorySwitch,
    JobInstall,
    PortMap,
    SwitchBackend,
    parse_wiring,
)
from p4ctl.client import CLONE_PORT, SwitchClient
from p4ctl.errors import PipelineMismatch, SwitchError, SwitchUnavailable, WriteFailed
from p4ctl.p4info import CLONE_SESSION
from p4ctl.protocol import AggState, Kind, Packet, Policy, decode, encode
from p4ctl.softswitch import SoftSwitch

PS = Endpoint("127.0.0.1", 40999)


@pytest.fixture(params=["in_memory", "p4runtime"])
def backend(request: pytest.FixtureRequest, soft_switch: SoftSwitch) -> Iterator[SwitchBackend]:
    if request.param == "in_memory":
        yield InMemorySwitch(aggregators=soft_switch.aggregators, lanes=soft_switch.lanes)
        return
    client = SwitchClient(
        soft_switch.p4runtime_address, aggregators=soft_switch.aggregators, lanes=soft_switch.lanes
    )
    yield client
    client.close()


def test_backends_satisfy_the_protocol(backend: SwitchBackend) -> None:
    assert isinstance(backend, SwitchBackend)
    assert (backend.aggregators, backend.lanes) == (256, 64)


def test_install_and_remove_are_idempotent(backend: SwitchBackend) -> None:
    job = JobInstall(5, Policy.ESA, 2, ps=PS, priority=3)
    backend.install_job(job)
    backend.install_job(job)
    backend.add_worker(5, 0, Endpoint("127.0.0.1", 41000))
    backend.add_worker(5, 0, Endpoint("127.0.0.1", 41000))
    backend.add_worker(5, 1, Endpoint("127.0.0.1", 41001))
    assert backend.installed_jobs() == {5}
    backend.remove_job(5)
    backend.remove_job(5)
    assert backend.installed_jobs() == set()


def test_worker_of_a_missing_job_is_refused(backend: SwitchBackend) -> None:
    with pytest.raises(WriteFailed, match="not installed"):
        backend.add_worker(9, 0, Endpoint("127.0.0.1", 41000))
    backend.install_job(JobInstall(9, Policy.ATP, 2, ps=PS))
    with pytest.raises(WriteFailed) as refused:
        backend.add_worker(9, 2, Endpoint("127.0.0.1", 41000))
    assert refused.value.errors[0].code == "INVALID_ARGUMENT"


def test_fresh_backend_has_empty_occupancy_and_counters(backend: SwitchBackend) -> None:
    occupancy = backend.occupancy()
    assert occupancy.aggregators == 256 and occupancy.runs() == []
    counters = backend.counters()
    assert counters.jobs == {} and set(counters.drops.values()) == {0}


def test_soft_switch_serves_a_job_installed_by_the_client(
    make_soft_switch: Callable[..., SoftSwitch],
) -> None:
    soft_switch = make_soft_switch(aggregators=256, lanes=64)
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(3)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
            sock.settimeout(10.0)
        ps, workers = socks[0], socks[1:]
        with SwitchClient(soft_switch.p4runtime_address, aggregators=256, lanes=64) as client:
            client.install_job(JobInstall(4, Policy.ESA, 2, ps=Endpoint(*ps.getsockname())))
            for wid, sock in enumerate(workers):
                client.add_worker(4, wid, Endpoint(*sock.getsockname()))
            # Held partial: one contribution in aggregator 7.
            lanes = np.arange(64, dtype=np.int32)
            first = Packet(
                kind=Kind.GRADIENT,
                job=4,
                worker=0,
                fan_in=2,
                agg_index=7,
                seq=1,
                bitmap=1,
                lanes=lanes,
            )
            workers[0].sendto(encode(first), soft_switch.data_address)
            # Completion: both workers get the RESULT, the PS gets the sum.
            second = first.replace(worker=1, bitmap=2)
            workers[1].sendto(encode(second), soft_switch.data_address)
            for sock in workers:
                result = decode(sock.recv(2048), 64)
                assert result.kind == Kind.RESULT and result.bitmap == 3
                assert np.array_equal(result.lanes, 2 * lanes)
            assert decode(ps.recv(2048), 64).kind == Kind.TO_PS
            occupancy = client.occupancy()
            assert occupancy.runs() == [(7, 1, 4, AggState.COMPLETE)]
            assert client.counters().jobs[4]["job_aggregated"] == 2
            assert client.reclaim(4) == 1
            assert client.occupancy().held_by(4) == 0
            client.remove_job(4)
            assert soft_switch.pipeline.endpoints == {} and soft_switch.pipeline.sources == {}
    finally:
        for sock in socks:
            sock.close()


def test_client_resumes_what_a_previous_client_installed(soft_switch: SoftSwitch) -> None:
    address = soft_switch.p4runtime_address
    with SwitchClient(address, aggregators=256, lanes=64) as first:
        first.install_job(JobInstall(2, Policy.ATP, 1, ps=PS))
        first.add_worker(2, 0, Endpoint("127.0.0.1", 41002))
    with SwitchClient(address) as second:  # sizing read back from the switch
        assert (second.aggregators, second.lanes) == (256, 64)
        assert second.installed_jobs() == {2}
        second.remove_job(2)
        assert soft_switch.pipeline.endpoints == {}


def _clone_sessions(address: str) -> list[p4rt.CloneSessionEntry]:
    """Every clone session the switch holds, read over P4Runtime (no election: reads need none)."""
    query = p4rt.Entity()
    query.packet_replication_engine_entry.clone_session_entry.SetInParent()
    with grpc.insecure_channel(address) as channel:
        stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
        replies = stub.Read(p4rt.ReadRequest(device_id=0, entities=[query]), timeout=10)
        entities = [e for reply in replies for e in reply.entities]
    return [e.packet_replication_engine_entry.clone_session_entry for e in entities]


def test_client_installs_the_clone_session_idempotently(soft_switch: SoftSwitch) -> None:
    address = soft_switch.p4runtime_address
    with SwitchClient(address, aggregators=256, lanes=64) as first:
        assert _clone_sessions(address) == []  # installed with the first job, not on connect
        first.install_job(JobInstall(1, Policy.ESA, 2, ps=PS))
        first.install_job(JobInstall(2, Policy.STATIC, 1, 0, 4, ps=PS))
        (session,) = _clone_sessions(address)
        assert session.session_id == CLONE_SESSION
        assert [(r.egress_port, r.instance) for r in session.replicas] == [(CLONE_PORT, 0)]
    # A restarted service finds it installed; its first install_job rewrites it in place.
    with SwitchClient(address) as second:
        second.install_job(JobInstall(3, Policy.ATP, 1, ps=PS))
        assert _clone_sessions(address) == [session]


def test_client_refuses_a_switch_of_another_sizing(soft_switch: SoftSwitch) -> None:
    SwitchClient(soft_switch.p4runtime_address, aggregators=256, lanes=64).close()
    with pytest.raises(PipelineMismatch, match=r"register agg_\w+: running \(\d+, \d+, 256\)"):
        SwitchClient(soft_switch.p4runtime_address, aggregators=128, lanes=64)


def test_switch_refuses_a_p4info_for_another_sizing(soft_switch: SoftSwitch) -> None:
    with pytest.raises(PipelineMismatch, match=r"first difference at p4info\.registers"):
        SwitchClient(soft_switch.p4runtime_address, aggregators=512, lanes=64)


def test_unreachable_switch_raises_switch_unavailable() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{unused.getsockname()[1]}"
    with pytest.raises(SwitchUnavailable, match=address):
        SwitchClient(address)


# ---------------------------------------------------------------------------- wiring


def test_port_map_gives_a_wired_host_its_port_and_others_the_lowest_unwired() -> None:
    ports = PortMap(wiring=parse_wiring("10.77.1.1=1, 10.77.2.1=2"))
    assert ports.assign(("10.77.2.1", 9556)) == (2, True)
    assert ports.assign(("127.0.0.1", 40000)) == (3, True)  # 1 is wired to another host
    assert ports.assign(("10.77.1.1", 40001)) == (1, True)
    assert ports.assign(("10.77.1.1", 40001)) == (1, False)


def test_port_map_refuses_two_endpoints_on_one_wired_port() -> None:
    ports = PortMap(wiring={"10.77.1.1": 1})
    ports.assign(("10.77.1.1", 40001))
    with pytest.raises(SwitchError, match="switch port 1, where host 10.77.1.1 is wired"):
        ports.assign(("10.77.1.1", 40002))


@pytest.mark.parametrize(
    ("text", "why"),
    [("10.77.1.1", "is not HOST=PORT"), ("10.77.1.1=0", "outside 1..510"),
     ("10.77.1.1=1,10.77.1.1=2", "two ports")],
)  # fmt: skip
def test_a_wiring_that_cannot_be_read_says_why(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_wiring(text)


def test_client_writes_each_endpoint_at_the_port_its_host_is_wired_to(
    soft_switch: SoftSwitch,
) -> None:
    wiring = {"127.0.0.1": 7}
    address, aggregators = soft_switch.p4runtime_address, soft_switch.aggregators
    with SwitchClient(address, aggregators=aggregators, lanes=64, wiring=wiring) as client:
        client.install_job(JobInstall(3, Policy.ATP, 1, ps=Endpoint("127.0.0.2", 40999)))
        client.add_worker(3, 0, Endpoint("127.0.0.1", 41003))
        assert soft_switch.pipeline.sources[(3, 0, "127.0.0.1", 41003)] == 7
        assert soft_switch.pipeline.endpoints[7] == ("127.0.0.1", 41003)
        assert soft_switch.pipeline.jobs[3].ps_port == 1
        client.remove_job(3)
