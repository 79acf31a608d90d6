"""The soft switch as a P4Runtime target: p4runtime-shell's client, injected loss (election:
test_arbitration)."""

from __future__ import annotations

import socket
import threading

import grpc
import numpy as np
import pytest
from p4.v1 import p4runtime_pb2 as p4rt
from p4ctl.client_codec import P4Names, addr_int, write_errors
from p4ctl.errors import UpdateError
from p4ctl.p4info import CLONE_SESSION, Sizing, build_p4info
from p4ctl.protocol import DropReason, Kind, Packet, Policy, decode, encode
from p4ctl.rule import JobConfig
from p4ctl.softswitch import SoftSwitch, main, parse_address
from p4runtime_sh.p4runtime import P4RuntimeClient

INFO = build_p4info(Sizing(256, 64))
NAMES = P4Names(INFO)


def _set_pipeline(shell: P4RuntimeClient, info: object = INFO) -> None:
    request = p4rt.SetForwardingPipelineConfigRequest(
        device_id=0, action=p4rt.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
    )
    request.election_id.high, request.election_id.low = shell.election_id
    request.config.p4info.CopyFrom(info)
    shell.stub.SetForwardingPipelineConfig(request)


def _write(shell: P4RuntimeClient, entity: p4rt.Entity, op: int = p4rt.Update.INSERT) -> None:
    request = p4rt.WriteRequest()
    request.updates.add(type=op, entity=entity)
    shell.write(request)


def _read(shell: P4RuntimeClient, entity: p4rt.Entity) -> list[p4rt.Entity]:
    return [e for reply in shell.read_one(entity) for e in reply.entities]


def test_shell_client_sets_pipeline_and_round_trips_entities(soft_switch: SoftSwitch) -> None:
    shell = P4RuntimeClient(0, soft_switch.p4runtime_address, (0, 1))
    try:
        assert shell.api_version() == "1.4.1"
        _set_pipeline(shell)
        assert shell.get_p4info() == INFO
        # A register cell.
        _write(shell, NAMES.register_entry("agg_count", 7, 9), p4rt.Update.MODIFY)
        query = p4rt.Entity()
        query.register_entry.register_id = NAMES.register_id["agg_count"]
        query.register_entry.index.index = 7
        (cell,) = _read(shell, query)
        assert cell.register_entry.data.bitstring == b"\x09"
        assert soft_switch.pipeline.registers.agg_count[7] == 9
        # A table entry, read back exactly.
        entry = NAMES.table_entry(
            "port_table",
            {"egress_port": 3},
            "set_endpoint",
            {"addr": addr_int("127.0.0.1"), "udp_port": 4000},
        )
        _write(shell, entry)
        query = p4rt.Entity()
        query.table_entry.table_id = NAMES.table_id["port_table"]
        assert _read(shell, query) == [entry]
        assert soft_switch.pipeline.endpoints == {3: ("127.0.0.1", 4000)}
        # A multicast group.
        group = p4rt.Entity()
        mcast = group.packet_replication_engine_entry.multicast_group_entry
        mcast.multicast_group_id = 5
        mcast.replicas.add(egress_port=3)
        mcast.replicas.add(egress_port=4)
        _write(shell, group)
        query = p4rt.Entity()
        query.packet_replication_engine_entry.multicast_group_entry.multicast_group_id = 5
        assert _read(shell, query) == [group]
        assert soft_switch.pipeline.groups == {5: (3, 4)}
    finally:
        shell.tear_down()


def _clone_session(session_id: int = CLONE_SESSION, port: int = 3) -> p4rt.Entity:
    entity = p4rt.Entity()
    session = entity.packet_replication_engine_entry.clone_session_entry
    session.session_id = session_id
    session.replicas.add(egress_port=port, instance=0)
    return entity


def _refusal(shell: P4RuntimeClient, entity: p4rt.Entity, op: int) -> UpdateError:
    """The one per-update error of a Write of `entity` that the switch refuses."""
    request = p4rt.WriteRequest(device_id=0)
    request.election_id.high, request.election_id.low = shell.election_id
    request.updates.add(type=op, entity=entity)
    with pytest.raises(grpc.RpcError) as refused:
        shell.stub.Write(request)
    (error,) = write_errors(refused.value) or []
    return error


def test_clone_session_is_stored_read_back_modified_and_deleted(soft_switch: SoftSwitch) -> None:
    shell = P4RuntimeClient(0, soft_switch.p4runtime_address, (0, 1))
    try:
        _set_pipeline(shell)
        session = _clone_session()
        _write(shell, session)
        query = p4rt.Entity()
        query.packet_replication_engine_entry.clone_session_entry.session_id = CLONE_SESSION
        assert _read(shell, query) == [session]
        assert _refusal(shell, session, p4rt.Update.INSERT).code == "ALREADY_EXISTS"
        # A PRE read with no type set selects groups and sessions alike.
        group = p4rt.Entity()
        group.packet_replication_engine_entry.multicast_group_entry.multicast_group_id = 2
        _write(shell, group)
        everything = p4rt.Entity()
        everything.packet_replication_engine_entry.SetInParent()
        assert _read(shell, everything) == [group, session]
        moved = _clone_session(port=4)
        _write(shell, moved, p4rt.Update.MODIFY)
        wildcard = p4rt.Entity()
        wildcard.packet_replication_engine_entry.clone_session_entry.SetInParent()
        assert _read(shell, wildcard) == [moved]
        _write(shell, moved, p4rt.Update.DELETE)
        assert _read(shell, query) == []
        assert _refusal(shell, moved, p4rt.Update.DELETE).code == "NOT_FOUND"
        assert _refusal(shell, moved, p4rt.Update.MODIFY).code == "NOT_FOUND"
    finally:
        shell.tear_down()


def test_clone_sessions_the_pipeline_cannot_use_are_refused_with_the_reason(
    soft_switch: SoftSwitch,
) -> None:
    shell = P4RuntimeClient(0, soft_switch.p4runtime_address, (0, 1))
    try:
        _set_pipeline(shell)
        for session_id in (0, 7):
            error = _refusal(shell, _clone_session(session_id), p4rt.Update.INSERT)
            assert error.code == "INVALID_ARGUMENT"
            assert f"clones to session {CLONE_SESSION} only" in error.message
        empty = _clone_session()
        del empty.packet_replication_engine_entry.clone_session_entry.replicas[:]
        assert "needs a replica" in _refusal(shell, empty, p4rt.Update.INSERT).message
        truncating = _clone_session()
        truncating.packet_replication_engine_entry.clone_session_entry.packet_length_bytes = 64
        assert "packet_length_bytes" in _refusal(shell, truncating, p4rt.Update.INSERT).message
        assert _refusal(shell, _clone_session(port=600), p4rt.Update.INSERT).code == "OUT_OF_RANGE"
        query = p4rt.Entity()
        query.packet_replication_engine_entry.clone_session_entry.SetInParent()
        assert _read(shell, query) == []
    finally:
        shell.tear_down()


def test_wildcard_register_read_returns_the_whole_array(soft_switch: SoftSwitch) -> None:
    shell = P4RuntimeClient(0, soft_switch.p4runtime_address, (0, 1))
    try:
        _set_pipeline(shell)
        soft_switch.pipeline.registers.agg_lanes[5, 3] = -2
        query = p4rt.Entity()
        query.register_entry.register_id = NAMES.register_id["agg_lane_3"]
        cells = _read(shell, query)
        assert [c.register_entry.index.index for c in cells] == list(range(256))
        assert cells[5].register_entry.data.bitstring == (2**32 - 2).to_bytes(4, "big")
    finally:
        shell.tear_down()


def test_pipeline_of_another_sizing_is_refused_with_the_difference(
    soft_switch: SoftSwitch,
) -> None:
    shell = P4RuntimeClient(0, soft_switch.p4runtime_address, (0, 1))
    try:
        with pytest.raises(grpc.RpcError) as refused:
            _set_pipeline(shell, build_p4info(Sizing(256, 128)))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "first difference at p4info.registers" in refused.value.details()
    finally:
        shell.tear_down()


def test_injected_loss_is_seeded_and_counted(make_soft_switch: object) -> None:
    switch = make_soft_switch(  # type: ignore[operator]
        aggregators=16, lanes=64, drop_rate=0.5, seed=3
    )
    pkt = encode(Packet(kind=Kind.GRADIENT, job=1, lanes=np.zeros(64, dtype=np.int32)))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        for _ in range(200):
            sender.sendto(pkt, switch.data_address)
        # Every datagram is either lost or an unknown job: wait until all 200 are counted.
        drops = switch.pipeline.drop_packets
        done = threading.Event()
        while not done.wait(0.01):
            if drops[DropReason.INJECTED_LOSS] + drops[DropReason.UNKNOWN_JOB] == 200:
                done.set()
    assert 60 < drops[DropReason.INJECTED_LOSS] < 140


def test_cli_rejects_a_bad_address() -> None:
    with pytest.raises(SystemExit):
        main(["--data", "nowhere"])
    assert parse_address("127.0.0.1:9555") == ("127.0.0.1", 9555)


def test_garbage_and_strangers_are_dropped_and_counted_while_a_job_is_served(
    make_soft_switch: object,
) -> None:
    switch = make_soft_switch(aggregators=16, lanes=64)  # type: ignore[operator]
    pipe = switch.pipeline
    rng = np.random.default_rng(7)
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(3)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
            sock.settimeout(10.0)
        workers, stranger = socks[:2], socks[2]
        for w, sock in enumerate(workers):
            host, port = sock.getsockname()
            pipe.sources[(1, w, host, port)] = 10 + w
            pipe.endpoints[10 + w] = (host, port)
        pipe.groups[5] = (10, 11)
        pipe.jobs[1] = JobConfig(1, Policy.STATIC, 2, 0, 4, 5, 10)
        lanes = np.arange(64, dtype=np.int32)
        first = Packet(kind=Kind.GRADIENT, job=1, worker=0, fan_in=2, bitmap=1, lanes=lanes)
        # Garbage of every length (as one burst, coalesced or not), and a well-formed packet
        # from an address the worker table does not know.
        for _ in range(300):
            stranger.sendto(rng.bytes(int(rng.integers(1, 400))), switch.data_address)
        stranger.sendto(encode(first), switch.data_address)
        workers[0].sendto(encode(first), switch.data_address)
        workers[1].sendto(encode(first.replace(worker=1, bitmap=2)), switch.data_address)
        for sock in workers:
            result = decode(sock.recv(2048), 64)
            assert result.kind == Kind.RESULT and np.array_equal(result.lanes, 2 * lanes)
        drops = pipe.drop_packets
        assert drops[DropReason.UNREGISTERED_SOURCE] == 1
        # Random bytes fail the first check they meet; every one is counted somewhere.
        assert sum(int(d) for d in drops) == 301
        assert pipe.job_packets["job_aggregated"][1] == 2
    finally:
        for sock in socks:
            sock.close()
