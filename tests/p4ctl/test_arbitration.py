"""P4Runtime arbitration on the soft switch, as the P4Runtime specification's section "Client
Arbitration and Controller Replication" has it, over real gRPC streams: the primary is the
controller whose election id is at least the highest the switch has seen, every controller hears
of each change, a backup reads but may not write, and a stream that gives an election id in use
or another device id is ended."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator

import grpc
import pytest
from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2 as p4rt
from p4.v1 import p4runtime_pb2_grpc
from p4ctl.backend import Endpoint, JobInstall
from p4ctl.client import SwitchClient
from p4ctl.client_codec import P4Names
from p4ctl.errors import NotPrimary, SwitchError
from p4ctl.p4info import Sizing, build_p4info
from p4ctl.protocol import Policy
from p4ctl.softswitch import SoftSwitch

from tests.conftest import TEST_AGGREGATORS, TEST_LANES

INFO = build_p4info(Sizing(TEST_AGGREGATORS, TEST_LANES))
NAMES = P4Names(INFO)
# How long a test waits for the switch's next arbitration message.
ANSWER_S = 10.0
OK, ALREADY_EXISTS, NOT_FOUND = code_pb2.OK, code_pb2.ALREADY_EXISTS, code_pb2.NOT_FOUND


class Controller:
    """One StreamChannel on its own gRPC channel: what it sent, and what the switch said."""

    def __init__(self, address: str, election: tuple[int, int] | None, device_id: int = 0):
        self.election = election
        self.device_id = device_id
        self.channel = grpc.insecure_channel(address)
        self.stub = p4runtime_pb2_grpc.P4RuntimeStub(self.channel)
        self._out: queue.Queue[p4rt.StreamMessageRequest | None] = queue.Queue()
        self.stream = self.stub.StreamChannel(iter(self._out.get, None))
        self._in: queue.Queue[p4rt.StreamMessageResponse | grpc.RpcError] = queue.Queue()
        self._reader = threading.Thread(target=self._receive, daemon=True)
        self._reader.start()
        self.arbitrate(election)

    def _receive(self) -> None:
        try:
            for reply in self.stream:
                self._in.put(reply)
        except grpc.RpcError as exc:
            self._in.put(exc)

    def arbitrate(self, election: tuple[int, int] | None) -> None:
        self.election = election
        request = p4rt.StreamMessageRequest()
        request.arbitration.device_id = self.device_id
        if election is not None:
            request.arbitration.election_id.high, request.arbitration.election_id.low = election
        self._out.put(request)

    def answer(self) -> p4rt.MasterArbitrationUpdate:
        """The switch's next arbitration message on this stream."""
        reply = self._in.get(timeout=ANSWER_S)
        if isinstance(reply, grpc.RpcError):
            raise reply
        assert reply.HasField("arbitration")
        return reply.arbitration

    def write(self, update: p4rt.Update) -> None:
        request = p4rt.WriteRequest(device_id=self.device_id, updates=[update])
        if self.election is not None:
            request.election_id.high, request.election_id.low = self.election
        self.stub.Write(request, timeout=ANSWER_S)

    def set_pipeline(self) -> None:
        request = p4rt.SetForwardingPipelineConfigRequest(
            device_id=self.device_id,
            action=p4rt.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
        )
        if self.election is not None:
            request.election_id.high, request.election_id.low = self.election
        request.config.p4info.CopyFrom(INFO)
        self.stub.SetForwardingPipelineConfig(request, timeout=ANSWER_S)

    def read_count(self, index: int) -> int:
        query = p4rt.Entity()
        query.register_entry.register_id = NAMES.register_id["agg_count"]
        query.register_entry.index.index = index
        request = p4rt.ReadRequest(device_id=self.device_id, entities=[query])
        (reply,) = self.stub.Read(request, timeout=ANSWER_S)
        return int.from_bytes(reply.entities[0].register_entry.data.bitstring, "big")

    def silent(self) -> bool:
        """Whether the switch sent nothing more on this stream (so far)."""
        return self._in.empty()

    def close(self) -> None:
        self._out.put(None)
        self.channel.close()
        self._reader.join(ANSWER_S)


def _election(update: p4rt.MasterArbitrationUpdate) -> tuple[int, int] | None:
    if not update.HasField("election_id"):
        return None
    return update.election_id.high, update.election_id.low


def _count_update(index: int, value: int) -> p4rt.Update:
    update = p4rt.Update(type=p4rt.Update.MODIFY)
    update.entity.CopyFrom(NAMES.register_entry("agg_count", index, value))
    return update


Connect = Callable[..., Controller]


@pytest.fixture
def connect(soft_switch: SoftSwitch) -> Iterator[Connect]:
    """Opens `Controller` streams on the soft switch (election id, device id); all are closed
    at teardown."""
    opened: list[Controller] = []

    def open_stream(election: tuple[int, int] | None, device_id: int = 0) -> Controller:
        controller = Controller(soft_switch.p4runtime_address, election, device_id)
        opened.append(controller)
        return controller

    yield open_stream
    for controller in opened:
        controller.close()


def _primary_and_backup(connect: Connect) -> tuple[Controller, Controller]:
    """A primary of election id (0, 5), then a backup of (0, 2), each told so."""
    primary = connect((0, 5))
    assert primary.answer().status.code == OK
    backup = connect((0, 2))
    assert backup.answer().status.code == ALREADY_EXISTS
    return primary, backup


def test_the_highest_election_id_is_primary_and_every_controller_hears_of_it(
    connect: Connect,
) -> None:
    first = connect((0, 2))
    answer = first.answer()
    assert (answer.status.code, _election(answer), answer.device_id) == (OK, (0, 2), 0)
    second = connect((0, 5))
    to_first, to_second = first.answer(), second.answer()
    assert (to_first.status.code, _election(to_first)) == (ALREADY_EXISTS, (0, 5))
    assert (to_second.status.code, _election(to_second)) == (OK, (0, 5))
    third = connect((0, 3))
    to_third = third.answer()
    assert (to_third.status.code, _election(to_third)) == (ALREADY_EXISTS, (0, 5))


def test_a_backup_reads_but_its_writes_and_pipeline_changes_are_permission_denied(
    connect: Connect,
) -> None:
    primary, backup = _primary_and_backup(connect)
    primary.set_pipeline()
    primary.write(_count_update(7, 9))
    for refused in (lambda: backup.write(_count_update(7, 1)), backup.set_pipeline):
        with pytest.raises(grpc.RpcError) as denied:
            refused()
        assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "(0, 2) is not primary" in str(denied.value.details())
    assert backup.read_count(7) == 9


def test_when_the_primary_leaves_a_lower_backup_hears_not_found_and_stays_a_backup(
    connect: Connect,
) -> None:
    primary, backup = _primary_and_backup(connect)
    primary.set_pipeline()
    primary.close()
    gone = backup.answer()
    assert (gone.status.code, _election(gone)) == (NOT_FOUND, (0, 5))
    with pytest.raises(grpc.RpcError) as denied:
        backup.write(_count_update(1, 1))
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    # A controller replica that takes over arbitrates with a higher id than the old primary's.
    backup.arbitrate((0, 6))
    taken = backup.answer()
    assert (taken.status.code, _election(taken)) == (OK, (0, 6))
    backup.write(_count_update(1, 1))
    assert backup.read_count(1) == 1


def test_a_primary_that_comes_back_with_its_own_id_is_primary_again(
    connect: Connect,
) -> None:
    first = connect((0, 5))
    assert first.answer().status.code == OK
    first.close()
    again = connect((0, 5))
    answer = again.answer()
    assert (answer.status.code, _election(answer)) == (OK, (0, 5))


def test_a_primary_that_lowers_its_id_gives_up_primacy_and_everyone_hears_it(
    connect: Connect,
) -> None:
    primary, backup = _primary_and_backup(connect)
    assert primary.silent()  # a new backup is news to itself only
    primary.arbitrate((0, 4))
    for controller in (primary, backup):
        answer = controller.answer()
        assert (answer.status.code, _election(answer)) == (NOT_FOUND, (0, 5))


def test_a_controller_without_an_election_id_is_a_backup(connect: Connect) -> None:
    reader = connect(None)
    answer = reader.answer()
    # No primary yet, and none ever: the election id is left unset.
    assert (answer.status.code, _election(answer)) == (NOT_FOUND, None)
    primary = connect((0, 1))
    assert primary.answer().status.code == OK
    told = reader.answer()
    assert (told.status.code, _election(told)) == (ALREADY_EXISTS, (0, 1))
    primary.set_pipeline()
    with pytest.raises(grpc.RpcError) as denied:
        reader.write(_count_update(1, 1))
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert reader.read_count(1) == 0


def test_an_election_id_in_use_ends_the_stream_with_invalid_argument(
    connect: Connect,
) -> None:
    primary = connect((0, 5))
    assert primary.answer().status.code == OK
    copy = connect((0, 5))
    with pytest.raises(grpc.RpcError) as ended:
        copy.answer()
    assert ended.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "already used" in str(ended.value.details())
    primary.set_pipeline()  # still the primary


def test_another_device_id_ends_the_stream_with_not_found(connect: Connect) -> None:
    stranger = connect((0, 5), device_id=7)
    with pytest.raises(grpc.RpcError) as ended:
        stranger.answer()
    assert ended.value.code() == grpc.StatusCode.NOT_FOUND
    assert "no device 7" in str(ended.value.details())


def test_switch_client_follows_primacy_and_a_reader_client_never_takes_it(
    soft_switch: SoftSwitch,
) -> None:
    address = soft_switch.p4runtime_address
    sizing = {"aggregators": TEST_AGGREGATORS, "lanes": TEST_LANES}
    with SwitchClient(address, election_id=(1, 0), **sizing) as leader:  # type: ignore[arg-type]
        assert leader.is_primary
        leader.install_job(JobInstall(3, Policy.ATP, 1, ps=Endpoint("127.0.0.1", 9)))
        with SwitchClient(address, election_id=None) as reader:
            assert not reader.is_primary and leader.is_primary
            assert reader.installed_jobs() == {3}
            with pytest.raises(NotPrimary, match="not primary"):
                reader.set_priority(3, 2)
        with SwitchClient(address, election_id=(2, 0)) as successor:
            assert successor.is_primary
            assert not leader.is_primary
            with pytest.raises(NotPrimary):
                leader.set_priority(3, 2)
            successor.set_priority(3, 2)
        # The successor left: nobody is primary, and the old leader's id is below the highest.
        assert not leader.is_primary
        with pytest.raises(NotPrimary):
            leader.set_priority(3, 1)
    with (
        pytest.raises(SwitchError, match="INVALID_ARGUMENT"),
        SwitchClient(address, election_id=(5, 0)),
        SwitchClient(address, election_id=(5, 0)),
    ):
        pass
