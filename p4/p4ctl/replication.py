"""The packet replication engine of the soft switch's control plane: multicast groups and the
clone session, as P4Runtime writes and reads them.

Multicast groups become port tuples of the `Pipeline` (one result per port). The clone session
`CLONE_SESSION` is stored and read back only: the Python rule emits a case's second packet
itself, where the P4 program clones. Refusals raise `EntityError` with the gRPC code.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2 as p4rt

from p4ctl.p4info import CLONE_SESSION, PORT_BITS
from p4ctl.pipeline import Pipeline
from p4ctl.values import EntityError, decode_value

__all__ = ["Replication"]


class Replication:
    """Multicast groups and clone sessions written over P4Runtime, applied to `pipeline`."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self._groups: dict[int, p4rt.MulticastGroupEntry] = {}
        self._sessions: dict[int, p4rt.CloneSessionEntry] = {}

    def write(self, op: int, pre: p4rt.PacketReplicationEngineEntry) -> None:
        """Apply one PRE update of type `op`; raises `EntityError` (nothing changed then)."""
        which = pre.WhichOneof("type")
        if which == "multicast_group_entry":
            self._write_group(op, pre.multicast_group_entry)
        elif which == "clone_session_entry":
            self._write_session(op, pre.clone_session_entry)
        else:
            raise EntityError(
                code_pb2.UNIMPLEMENTED,
                f"{which or 'empty'} PRE entries are not supported (multicast groups and "
                "clone sessions are)",
            )

    def _write_group(self, op: int, group: p4rt.MulticastGroupEntry) -> None:
        gid = group.multicast_group_id
        if gid == 0:
            raise EntityError(code_pb2.INVALID_ARGUMENT, "multicast group 0 is reserved")
        if op == p4rt.Update.DELETE:
            if gid not in self._groups:
                raise EntityError(code_pb2.NOT_FOUND, f"no multicast group {gid}")
            del self._groups[gid]
            self.pipeline.groups.pop(gid, None)
            return
        if op == p4rt.Update.INSERT and gid in self._groups:
            raise EntityError(code_pb2.ALREADY_EXISTS, f"multicast group {gid} exists")
        if op == p4rt.Update.MODIFY and gid not in self._groups:
            raise EntityError(code_pb2.NOT_FOUND, f"no multicast group {gid} to modify")
        ports = []
        for replica in group.replicas:
            if replica.WhichOneof("port_kind") == "port":
                ports.append(decode_value(replica.port, PORT_BITS, f"group {gid} port"))
            else:
                ports.append(replica.egress_port)
        stored = p4rt.MulticastGroupEntry()
        stored.CopyFrom(group)
        self._groups[gid] = stored
        # One UDP endpoint per port: two replicas to one port would deliver the result twice.
        self.pipeline.groups[gid] = tuple(dict.fromkeys(ports))

    def _write_session(self, op: int, session: p4rt.CloneSessionEntry) -> None:
        sid = session.session_id
        if sid != CLONE_SESSION:
            raise EntityError(
                code_pb2.INVALID_ARGUMENT,
                f"clone session {sid}: the inasched pipeline clones to session {CLONE_SESSION} "
                "only (CLONE_SESSION in p4/include/sizing.p4)",
            )
        if op == p4rt.Update.DELETE:
            if self._sessions.pop(sid, None) is None:
                raise EntityError(code_pb2.NOT_FOUND, f"no clone session {sid}")
            return
        if op == p4rt.Update.INSERT and sid in self._sessions:
            raise EntityError(code_pb2.ALREADY_EXISTS, f"clone session {sid} exists")
        if op == p4rt.Update.MODIFY and sid not in self._sessions:
            raise EntityError(code_pb2.NOT_FOUND, f"no clone session {sid} to modify")
        if not session.replicas:
            raise EntityError(
                code_pb2.INVALID_ARGUMENT, f"clone session {sid} needs a replica (any port)"
            )
        if session.packet_length_bytes:
            # A truncated clone would lose lanes of the sum it carries.
            raise EntityError(
                code_pb2.INVALID_ARGUMENT,
                f"clone session {sid}: packet_length_bytes must be 0 (clones carry every lane)",
            )
        for replica in session.replicas:
            if replica.WhichOneof("port_kind") == "port":
                decode_value(replica.port, PORT_BITS, f"clone session {sid} port")
            elif replica.egress_port >> PORT_BITS:
                raise EntityError(
                    code_pb2.OUT_OF_RANGE,
                    f"clone session {sid}: port {replica.egress_port} exceeds {PORT_BITS} bits",
                )
        stored = p4rt.CloneSessionEntry()
        stored.CopyFrom(session)
        self._sessions[sid] = stored

    def read(self, query: p4rt.PacketReplicationEngineEntry) -> Iterator[p4rt.Entity]:
        """Groups, sessions or (no type given) both; id 0 selects every one of its kind."""
        which = query.WhichOneof("type")
        kinds: tuple[tuple[str, int, dict[int, Any]], ...] = (
            ("multicast_group_entry", query.multicast_group_entry.multicast_group_id, self._groups),
            ("clone_session_entry", query.clone_session_entry.session_id, self._sessions),
        )
        for kind, wanted, stored in kinds:
            if which not in (None, kind):
                continue
            for key, entry in sorted(stored.items()):
                if wanted in (0, key):
                    out = p4rt.Entity()
                    getattr(out.packet_replication_engine_entry, kind).CopyFrom(entry)
                    yield out
