"""The P4Runtime client against a soft switch that answers as BMv2's ``simple_switch_grpc``
does: RegisterEntry refused with UNIMPLEMENTED in PI's words, optionally BMv2's Thrift runtime
for registers, and a P4Info taken without a device config and then every read failing."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import grpc
import numpy as np
import pytest
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2 as p4rt
from p4ctl.backend import Endpoint, JobInstall
from p4ctl.client import SwitchClient
from p4ctl.client_codec import P4Names
from p4ctl.errors import PipelineMismatch, WriteFailed
from p4ctl.p4info import Sizing, build_p4info
from p4ctl.protocol import AggState, Kind, Packet, Policy, encode
from p4ctl.register_access import PI_READS_REFUSED, PI_WRITES_REFUSED
from p4ctl.softswitch import SoftSwitch

AGGREGATORS, LANES = 64, 64
PS_A = Endpoint("127.0.0.1", 40901)
PS_B = Endpoint("127.0.0.1", 40902)
WAIT_S = 10.0  # a safety net for a datagram in flight, never a measurement


@pytest.fixture
def refusing() -> Iterator[SoftSwitch]:
    with SoftSwitch(aggregators=AGGREGATORS, lanes=LANES, serve_registers=False) as switch:
        yield switch


@pytest.fixture
def client(refusing: SoftSwitch) -> Iterator[SwitchClient]:
    with SwitchClient(refusing.p4runtime_address, aggregators=AGGREGATORS, lanes=LANES) as c:
        yield c


def _job_installed_nowhere(switch: SoftSwitch, job: int) -> None:
    pipe = switch.pipeline
    assert job not in pipe.jobs
    assert not [k for k in pipe.sources if k[0] == job]
    assert job + 1 not in pipe.groups


def test_the_switch_refuses_registers_exactly_as_pi_does(refusing: SoftSwitch) -> None:
    info = build_p4info(Sizing(AGGREGATORS, LANES))
    names = P4Names(info)
    with SwitchClient(refusing.p4runtime_address, aggregators=AGGREGATORS, lanes=LANES) as c:
        stub, election = c.shell.stub, c.shell.election_id
        query = p4rt.Entity()
        query.register_entry.register_id = names.register_id["agg_job"]
        with pytest.raises(grpc.RpcError) as read:
            list(stub.Read(p4rt.ReadRequest(device_id=0, entities=[query])))
        assert (read.value.code(), read.value.details()) == (
            grpc.StatusCode.UNIMPLEMENTED,
            PI_READS_REFUSED,
        )
        request = p4rt.WriteRequest(device_id=0)
        request.election_id.high, request.election_id.low = election
        request.updates.add(type=p4rt.Update.MODIFY, entity=names.register_entry("agg_job", 1, 2))
        with pytest.raises(grpc.RpcError) as write:
            stub.Write(request)
        assert write.value.code() == grpc.StatusCode.UNKNOWN
        trailer = dict(write.value.trailing_metadata())["grpc-status-details-bin"]
        (detail,) = status_pb2.Status.FromString(trailer).details
        error = p4rt.Error()
        detail.Unpack(error)
        assert (error.canonical_code, error.message) == (code_pb2.UNIMPLEMENTED, PI_WRITES_REFUSED)
    assert refusing.pipeline.registers.agg_job[1] == 0


def test_install_priority_change_and_remove_need_no_register(
    refusing: SoftSwitch, client: SwitchClient
) -> None:
    assert client.registers is None
    assert PI_READS_REFUSED in client.registers_unavailable
    client.install_job(JobInstall(5, Policy.ESA, 2, ps=PS_A, priority=2))
    client.add_worker(5, 0, Endpoint("127.0.0.1", 41001))
    client.add_worker(5, 1, Endpoint("127.0.0.1", 41002))
    assert refusing.pipeline.jobs[5].priority == 2
    client.set_priority(5, 7)
    assert refusing.pipeline.jobs[5].priority == 7
    assert client.installed_jobs() == {5}
    occupancy = client.occupancy()
    assert occupancy.runs() == [] and PI_READS_REFUSED in occupancy.unavailable
    assert client.reclaim(5) == 0
    client.remove_job(5)
    assert client.installed_jobs() == set()
    _job_installed_nowhere(refusing, 5)
    assert refusing.pipeline.endpoints == {}


def test_a_reconnected_client_changes_the_priority_the_switch_holds(refusing: SoftSwitch) -> None:
    address = refusing.p4runtime_address
    with SwitchClient(address, aggregators=AGGREGATORS, lanes=LANES) as first:
        first.install_job(JobInstall(3, Policy.ESA, 1, ps=PS_A, priority=1))
    with SwitchClient(address, election_id=(0, 2)) as second:
        second.set_priority(3, 4)
    assert refusing.pipeline.jobs[3].priority == 4
    assert refusing.pipeline.jobs[3].fan_in == 1


def test_a_refused_install_leaves_no_part_of_the_job(
    refusing: SoftSwitch, client: SwitchClient
) -> None:
    # The partition ends past the pool: the switch refuses the job table entry, the last write.
    too_far = JobInstall(6, Policy.STATIC, 2, part_base=AGGREGATORS - 8, part_size=8, ps=PS_A)
    with pytest.raises(WriteFailed, match="does not fit"):
        client.install_job(too_far)
    _job_installed_nowhere(refusing, 6)
    assert refusing.pipeline.endpoints == {}
    with pytest.raises(WriteFailed, match="not installed"):
        client.add_worker(6, 0, Endpoint("127.0.0.1", 41001))
    assert client.installed_jobs() == set()


def test_a_refused_reinstall_leaves_the_job_as_it_was(
    refusing: SoftSwitch, client: SwitchClient
) -> None:
    client.install_job(JobInstall(6, Policy.STATIC, 2, part_base=0, part_size=8, ps=PS_A))
    before = (
        refusing.pipeline.jobs[6],
        dict(refusing.pipeline.sources),
        dict(refusing.pipeline.endpoints),
    )
    moved = JobInstall(6, Policy.STATIC, 2, part_base=AGGREGATORS - 8, part_size=8, ps=PS_B)
    with pytest.raises(WriteFailed):
        client.install_job(moved)
    after = (
        refusing.pipeline.jobs[6],
        dict(refusing.pipeline.sources),
        dict(refusing.pipeline.endpoints),
    )
    assert after == before
    client.add_worker(6, 0, Endpoint("127.0.0.1", 41001))
    assert refusing.pipeline.groups[7]


def _claim_one_aggregator(switch: SoftSwitch, client: SwitchClient, job: int, index: int) -> None:
    """A worker's first fragment over UDP, so the switch itself claims aggregator `index`."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as worker:
        worker.bind(("127.0.0.1", 0))
        client.install_job(JobInstall(job, Policy.ATP, 2, ps=PS_A))
        client.add_worker(job, 0, Endpoint(*worker.getsockname()))
        pkt = Packet(
            kind=Kind.GRADIENT,
            job=job,
            worker=0,
            fan_in=2,
            agg_index=index,
            bitmap=1,
            lanes=np.ones(LANES, np.int32),
        )
        worker.sendto(encode(pkt), switch.data_address)
        deadline = time.monotonic() + WAIT_S
        while switch.pipeline.registers.agg_state[index] != AggState.PARTIAL:
            assert time.monotonic() < deadline, "the fragment never reached the switch"
            time.sleep(0.01)


def test_occupancy_and_reclaim_over_the_thrift_runtime() -> None:
    pytest.importorskip("bm_runtime.standard")
    with (
        SoftSwitch(
            aggregators=AGGREGATORS, lanes=LANES, serve_registers=False, thrift=("127.0.0.1", 0)
        ) as switch,
        SwitchClient(
            switch.p4runtime_address,
            aggregators=AGGREGATORS,
            lanes=LANES,
            register_thrift=switch.thrift_address,
        ) as client,
    ):
        assert client.registers is not None and client.registers_unavailable == ""
        _claim_one_aggregator(switch, client, 9, 11)
        assert client.occupancy().runs() == [(11, 1, 9, AggState.PARTIAL)]
        client.remove_job(9)
        assert switch.pipeline.registers.agg_state[11] == AggState.FREE
        assert client.occupancy().runs() == []
        _job_installed_nowhere(switch, 9)


def test_occupancy_and_reclaim_over_p4runtime_where_it_is_served() -> None:
    with SoftSwitch(aggregators=AGGREGATORS, lanes=LANES) as switch:
        c = SwitchClient(switch.p4runtime_address, aggregators=AGGREGATORS, lanes=LANES)
        with c:
            assert c.registers is c
            _claim_one_aggregator(switch, c, 9, 11)
            assert c.occupancy().runs() == [(11, 1, 9, AggState.PARTIAL)]
            assert c.reclaim(9) == 1
            assert switch.pipeline.registers.agg_state[11] == AggState.FREE


def test_a_switch_without_a_program_is_refused_with_how_to_load_it() -> None:
    with SoftSwitch(aggregators=AGGREGATORS, lanes=LANES, needs_device_config=True) as switch:
        with pytest.raises(PipelineMismatch, match="--p4-config PATH") as refused:
            SwitchClient(switch.p4runtime_address, aggregators=AGGREGATORS, lanes=LANES)
        assert "Error when reading table entries from target" in str(refused.value)
        program = b'{"program": "inasched.p4"}'
        with SwitchClient(
            switch.p4runtime_address,
            aggregators=AGGREGATORS,
            lanes=LANES,
            device_config=program,
            election_id=(0, 2),
        ) as client:
            client.install_job(JobInstall(2, Policy.ATP, 1, ps=PS_A))
            assert client.installed_jobs() == {2}
