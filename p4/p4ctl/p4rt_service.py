"""The soft switch's P4Runtime gRPC service (the P4Runtime 1.6.0 protos of ``p4``).

Supported: Capabilities; Set/GetForwardingPipelineConfig (only the inasched P4Info for this
switch's sizing, else INVALID_ARGUMENT naming the first difference); Write/Read of table
entries, registers, counters, multicast groups and clone session `CLONE_SESSION`;
StreamChannel with arbitration as P4Runtime specifies it for the default role: the highest
election id seen is primary, every other controller a backup, every controller hears of each
change of primary, and a Write or pipeline change not from the primary is refused with
PERMISSION_DENIED; anyone may Read. Per-update Write errors travel as status UNKNOWN with one
``p4.v1.Error`` per update in the trailing metadata.

Options make it answer as PI (BMv2's ``simple_switch_grpc``) does: ``serve_registers=False``
refuses RegisterEntry with UNIMPLEMENTED; ``needs_device_config=True`` takes a P4Info with no
device config, then fails every read with UNKNOWN; ``serve_counters=False`` refuses counter
reads, as a target without them would (PI serves them).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from typing import NoReturn

import grpc
from google.protobuf import any_pb2
from google.protobuf.message import Message
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2 as p4rt
from p4.v1 import p4runtime_pb2_grpc

from p4ctl.p4info import Sizing, build_p4info
from p4ctl.pipeline import Pipeline
from p4ctl.register_access import PI_READS_REFUSED, PI_WRITES_REFUSED
from p4ctl.tables import Entities
from p4ctl.values import EntityError, encode_value

__all__ = ["COUNTER_READS_REFUSED", "P4RuntimeService", "first_difference"]

# What `serve_counters=False` answers a CounterEntry read with (UNIMPLEMENTED).
COUNTER_READS_REFUSED = "Counter reads are not supported"

log = logging.getLogger(__name__)

API_VERSION = "1.4.1"
# Entities per ReadResponse: keeps a wildcard read of k lane arrays under gRPC's 4 MB limit.
READ_BATCH = 2000

Election = tuple[int, int]


def first_difference(got: Message, want: Message, path: str = "p4info") -> str | None:
    """Where two protobuf messages first differ, as ``path: got != want``; None when equal."""
    for fd in want.DESCRIPTOR.fields:
        name = f"{path}.{fd.name}"
        a, b = getattr(got, fd.name), getattr(want, fd.name)
        if fd.is_repeated:
            for i, (x, y) in enumerate(zip(a, b, strict=False)):
                found = (
                    first_difference(x, y, f"{name}[{i}]")
                    if fd.message_type
                    else (None if x == y else f"{name}[{i}]: {x!r} != {y!r}")
                )
                if found:
                    return found
            if len(a) != len(b):
                return f"{name}: {len(a)} entries != {len(b)}"
        elif fd.message_type:
            found = first_difference(a, b, name)
            if found:
                return found
        elif a != b:
            return f"{name}: {a!r} != {b!r}"
    return None


class _Stream:
    """One StreamChannel: its election id (None: a backup that gave none), the queue of
    messages to send on it, and the status that ends it when an arbitration was refused."""

    def __init__(self) -> None:
        self.arbitrated = False
        self.election: Election | None = None
        self.refusal: tuple[grpc.StatusCode, str] | None = None
        self.outbox: queue.Queue[p4rt.StreamMessageResponse | None] = queue.Queue()


class P4RuntimeService(p4runtime_pb2_grpc.P4RuntimeServicer):  # type: ignore[misc]
    """P4Runtime for one device (`device_id`) whose data plane is `pipeline`."""

    def __init__(
        self,
        pipeline: Pipeline,
        device_id: int = 0,
        *,
        serve_registers: bool = True,
        serve_counters: bool = True,
        needs_device_config: bool = False,
    ) -> None:
        self.pipeline = pipeline
        self.device_id = device_id
        self.serve_registers = serve_registers
        self.serve_counters = serve_counters
        self.needs_device_config = needs_device_config
        self.sizing = Sizing(pipeline.aggregators, pipeline.lanes)
        self._expected = build_p4info(self.sizing)
        self._config: p4rt.ForwardingPipelineConfig | None = None
        self._entities = Entities(pipeline, self._expected)
        self._lock = threading.Lock()
        self._streams: list[_Stream] = []
        self._primary: _Stream | None = None
        self._highest: Election | None = None  # the highest election id ever seen
        self._readers: list[threading.Thread] = []

    def close(self) -> None:
        """End every open stream and join their reader threads (after the server stopped)."""
        with self._lock:
            streams, self._streams = self._streams, []
            readers, self._readers = self._readers, []
            self._primary = None
        for stream in streams:
            stream.outbox.put(None)
        for reader in readers:
            reader.join()

    def write_register(self, name: str, index: int, value: int) -> None:
        """Set one cell of register `name`, as a P4Runtime MODIFY would (raises `EntityError`;
        served whatever `serve_registers` says: this is the target's own runtime's path)."""
        update = p4rt.Update(type=p4rt.Update.MODIFY)
        update.entity.register_entry.CopyFrom(self._register_query(name, index))
        update.entity.register_entry.data.bitstring = encode_value(value)
        with self._lock:
            self._require_config()
            self._entities.write(update)

    def read_register(self, name: str, index: int | None = None) -> list[int]:
        """The cells of register `name` (one, or all when `index` is None), unsigned."""
        query = p4rt.Entity()
        query.register_entry.CopyFrom(self._register_query(name, index))
        with self._lock:
            self._require_config()
            entities = list(self._entities.read(query))
        return [int.from_bytes(e.register_entry.data.bitstring, "big") for e in entities]

    def _register_query(self, name: str, index: int | None) -> p4rt.RegisterEntry:
        ids = {r.preamble.name: r.preamble.id for r in self._expected.registers}
        if name not in ids:
            raise EntityError(code_pb2.NOT_FOUND, f"no register named {name!r}")
        entry = p4rt.RegisterEntry(register_id=ids[name])
        if index is not None:
            entry.index.index = index
        return entry

    def _require_config(self) -> None:
        if self._config is None:
            raise EntityError(code_pb2.FAILED_PRECONDITION, "no pipeline is set")

    # ------------------------------------------------------------------ RPCs

    def Capabilities(
        self, request: p4rt.CapabilitiesRequest, context: grpc.ServicerContext
    ) -> p4rt.CapabilitiesResponse:
        return p4rt.CapabilitiesResponse(p4runtime_api_version=API_VERSION)

    def SetForwardingPipelineConfig(
        self, request: p4rt.SetForwardingPipelineConfigRequest, context: grpc.ServicerContext
    ) -> p4rt.SetForwardingPipelineConfigResponse:
        self._check_device(request.device_id, context)
        action = request.action
        if action in (p4rt.SetForwardingPipelineConfigRequest.UNSPECIFIED,):
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "pipeline config action is unset")
        with self._lock:
            self._check_primary(request.election_id, context)
            if action == p4rt.SetForwardingPipelineConfigRequest.COMMIT:
                if self._config is None:
                    _abort(context, grpc.StatusCode.FAILED_PRECONDITION, "no saved config")
                return p4rt.SetForwardingPipelineConfigResponse()
            diff = first_difference(request.config.p4info, self._expected)
            if diff is not None:
                _abort(
                    context,
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"P4Info does not match this switch's pipeline (inasched, "
                    f"aggregators={self.sizing.aggregators}, lanes={self.sizing.lanes}): first "
                    f"difference at {diff} (given != expected); build it with "
                    f"p4ctl.p4info.build_p4info(Sizing({self.sizing.aggregators}, "
                    f"{self.sizing.lanes}))",
                )
            if action == p4rt.SetForwardingPipelineConfigRequest.VERIFY:
                return p4rt.SetForwardingPipelineConfigResponse()
            if action == p4rt.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT:
                # A new pipeline starts from empty tables and registers, as on a real target.
                self.pipeline.reset()
                self._entities = Entities(self.pipeline, self._expected)
            config = p4rt.ForwardingPipelineConfig()
            config.CopyFrom(request.config)
            self._config = config
        log.info("pipeline set (%s)", p4rt.SetForwardingPipelineConfigRequest.Action.Name(action))
        return p4rt.SetForwardingPipelineConfigResponse()

    def GetForwardingPipelineConfig(
        self, request: p4rt.GetForwardingPipelineConfigRequest, context: grpc.ServicerContext
    ) -> p4rt.GetForwardingPipelineConfigResponse:
        self._check_device(request.device_id, context)
        config = self._config
        if config is None:
            _abort(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                "no forwarding pipeline config "
                "set for this device; call SetForwardingPipelineConfig",
            )
        reply = p4rt.GetForwardingPipelineConfigResponse()
        kind = request.response_type
        types = p4rt.GetForwardingPipelineConfigRequest
        reply.config.cookie.CopyFrom(config.cookie)
        if kind in (types.ALL, types.P4INFO_AND_COOKIE):
            reply.config.p4info.CopyFrom(config.p4info)
        if kind in (types.ALL, types.DEVICE_CONFIG_AND_COOKIE):
            reply.config.p4_device_config = config.p4_device_config
        return reply

    def Write(
        self, request: p4rt.WriteRequest, context: grpc.ServicerContext
    ) -> p4rt.WriteResponse:
        self._check_device(request.device_id, context)
        self._check_pipeline(context)
        errors: list[p4rt.Error] = []
        with self._lock:
            self._check_primary(request.election_id, context)
            for update in request.updates:
                try:
                    if not self.serve_registers and update.entity.HasField("register_entry"):
                        raise EntityError(code_pb2.UNIMPLEMENTED, PI_WRITES_REFUSED)
                    self._entities.write(update)
                    errors.append(p4rt.Error(canonical_code=code_pb2.OK))
                except EntityError as exc:
                    errors.append(p4rt.Error(canonical_code=exc.code, message=str(exc)))
        failed = [e for e in errors if e.canonical_code != code_pb2.OK]
        if failed:
            status = status_pb2.Status(
                code=code_pb2.UNKNOWN, message=f"{len(failed)} of {len(errors)} updates failed"
            )
            for error in errors:
                detail = any_pb2.Any()
                detail.Pack(error)
                status.details.append(detail)
            context.set_trailing_metadata(
                (("grpc-status-details-bin", status.SerializeToString()),)
            )
            _abort(context, grpc.StatusCode.UNKNOWN, status.message)
        return p4rt.WriteResponse()

    def Read(
        self, request: p4rt.ReadRequest, context: grpc.ServicerContext
    ) -> Iterator[p4rt.ReadResponse]:
        self._check_device(request.device_id, context)
        self._check_pipeline(context)
        config = self._config
        if self.needs_device_config and config is not None and not config.p4_device_config:
            _abort(context, grpc.StatusCode.UNKNOWN, "Error when reading table entries from target")
        if not self.serve_registers and any(q.HasField("register_entry") for q in request.entities):
            _abort(context, grpc.StatusCode.UNIMPLEMENTED, PI_READS_REFUSED)
        if not self.serve_counters and any(q.HasField("counter_entry") for q in request.entities):
            _abort(context, grpc.StatusCode.UNIMPLEMENTED, COUNTER_READS_REFUSED)
        # Batched into one repeated-field copy per reply: a copy per entity costs a third of
        # the time of building the entities.
        batch: list[p4rt.Entity] = []
        try:
            for query in request.entities:
                for entity in self._entities.read(query):
                    batch.append(entity)
                    if len(batch) >= READ_BATCH:
                        yield p4rt.ReadResponse(entities=batch)
                        batch = []
        except EntityError as exc:
            _abort(context, _status_code(exc.code), str(exc))
        if batch or not request.entities:
            yield p4rt.ReadResponse(entities=batch)

    def StreamChannel(
        self, request_iterator: Iterator[p4rt.StreamMessageRequest], context: grpc.ServicerContext
    ) -> Iterator[p4rt.StreamMessageResponse]:
        stream = _Stream()
        reader = threading.Thread(
            target=self._read_stream, args=(stream, request_iterator), name="p4ctl-stream"
        )
        with self._lock:
            self._streams.append(stream)
            self._readers.append(reader)
        context.add_callback(lambda: stream.outbox.put(None))
        reader.start()
        while (message := stream.outbox.get()) is not None:
            yield message
        if stream.refusal is not None:
            _abort(context, *stream.refusal)

    # ------------------------------------------------------------------ arbitration
    # The P4Runtime specification, "Client Arbitration and Controller Replication", for the
    # default role: the primary is the controller whose election id is at least the highest
    # the device has ever seen (`_highest`), so a controller that comes back after a newer
    # one has written stays a backup; a controller with no election id is a backup.

    def _read_stream(self, stream: _Stream, requests: Iterator[p4rt.StreamMessageRequest]) -> None:
        try:
            for request in requests:
                if request.HasField("arbitration"):
                    refusal = self._arbitrate(stream, request.arbitration)
                    if refusal is not None:
                        stream.refusal = refusal
                        break
                else:
                    log.debug("ignoring stream message %s", request.WhichOneof("update"))
        except grpc.RpcError:
            pass  # the client went away; the stream ends the same way
        finally:
            with self._lock:
                if stream in self._streams:
                    self._streams.remove(stream)
                if self._primary is stream:
                    self._primary = None
                    self._announce(self._streams)
                if threading.current_thread() in self._readers:
                    self._readers.remove(threading.current_thread())
            stream.outbox.put(None)

    def _arbitrate(
        self, stream: _Stream, update: p4rt.MasterArbitrationUpdate
    ) -> tuple[grpc.StatusCode, str] | None:
        """Apply one MasterArbitrationUpdate; a refusal ends the stream with its status."""
        with self._lock:
            if update.device_id != self.device_id:
                code = (
                    grpc.StatusCode.NOT_FOUND
                    if not stream.arbitrated
                    else grpc.StatusCode.FAILED_PRECONDITION
                )
                return code, f"no device {update.device_id}; this switch is device {self.device_id}"
            if update.role.name or update.role.HasField("config"):
                return (
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"role {update.role.name!r}: this switch serves only the default role",
                )
            election = (
                (update.election_id.high, update.election_id.low)
                if update.HasField("election_id")
                else None
            )
            if election is not None and any(
                s.election == election for s in self._streams if s is not stream
            ):
                return (
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"election id {election} is already used by another controller",
                )
            stream.arbitrated = True
            stream.election = election
            was_primary = self._primary is stream
            if election is not None and (self._highest is None or election >= self._highest):
                self._highest = election
                self._primary = stream
                # Every controller hears of a new (or confirmed) primary, the primary last.
                others = [s for s in self._streams if s is not stream]
                self._announce([*others, stream])
            elif was_primary:  # it gave up primacy: now nobody holds it
                self._primary = None
                self._announce(self._streams)
            else:
                self._announce([stream])
            return None

    def _announce(self, streams: list[_Stream]) -> None:
        """Send `streams` the advisory MasterArbitrationUpdate (called with the lock held)."""
        for stream in streams:
            if not stream.arbitrated:
                continue
            reply = p4rt.StreamMessageResponse()
            arbitration = reply.arbitration
            arbitration.device_id = self.device_id
            if self._highest is not None:
                arbitration.election_id.high, arbitration.election_id.low = self._highest
            if stream is self._primary:
                arbitration.status.code = code_pb2.OK
                arbitration.status.message = "primary"
            elif self._primary is not None:
                arbitration.status.code = code_pb2.ALREADY_EXISTS
                arbitration.status.message = "backup: another controller is primary"
            else:
                arbitration.status.code = code_pb2.NOT_FOUND
                arbitration.status.message = "backup: no controller is primary"
            stream.outbox.put(reply)

    def _check_primary(self, election: p4rt.Uint128, context: grpc.ServicerContext) -> None:
        primary = self._primary
        given = (election.high, election.low)
        if primary is None or primary.election != given:
            holder = (
                "no controller is primary"
                if primary is None
                else f"primary holds election id {primary.election}"
            )
            _abort(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                f"election id {given} is not primary ({holder}); open a StreamChannel and "
                "arbitrate with an election id at least the highest this switch has seen "
                f"({self._highest}) to write",
            )

    def _check_device(self, device_id: int, context: grpc.ServicerContext) -> None:
        if device_id != self.device_id:
            _abort(
                context,
                grpc.StatusCode.NOT_FOUND,
                f"no device {device_id}; this switch is device {self.device_id}",
            )

    def _check_pipeline(self, context: grpc.ServicerContext) -> None:
        if self._config is None:
            _abort(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                "no forwarding pipeline config; call SetForwardingPipelineConfig first",
            )


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    context.abort(code, message)
    raise AssertionError("unreachable: ServicerContext.abort raises")


def _status_code(code: int) -> grpc.StatusCode:
    for status in grpc.StatusCode:
        if status.value[0] == code:
            return status
    return grpc.StatusCode.UNKNOWN
