"""Names to ids and values to bytes for P4Runtime entities of the inasched P4Info.

`P4Names` is what a controller needs from a P4Info: ids by name (tables, actions, registers,
counters), sizes, and builders of the entities `p4ctl.client` writes, with values in the
canonical bytestring form P4Runtime 1.4 requires (no leading zero bytes).
"""

from __future__ import annotations

import socket

import grpc
from google.rpc import code_pb2, status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2 as p4rt

from p4ctl.errors import UpdateError
from p4ctl.values import encode_value

__all__ = ["P4Names", "addr_int", "addr_str", "write_errors"]


def write_errors(exc: grpc.RpcError) -> list[UpdateError] | None:
    """The refused updates of a failed Write (P4Runtime: status UNKNOWN, one `p4.v1.Error` per
    update in ``grpc-status-details-bin``); None when `exc` is not such a batch error."""
    if exc.code() != grpc.StatusCode.UNKNOWN:
        return None
    metadata = exc.trailing_metadata() or ()
    blob = next((value for key, value in metadata if key == "grpc-status-details-bin"), None)
    if blob is None:
        return None
    status = status_pb2.Status.FromString(blob)
    errors = []
    for index, detail in enumerate(status.details):
        error = p4rt.Error()
        if detail.Unpack(error) and error.canonical_code != code_pb2.OK:
            name = code_pb2.Code.Name(error.canonical_code)
            errors.append(UpdateError(index, name, error.message))
    return errors


def addr_int(host: str) -> int:
    """A dotted IPv4 address as the 32-bit value of the tables' address fields."""
    return int.from_bytes(socket.inet_aton(host), "big")


def addr_str(value: int) -> str:
    """The dotted IPv4 address of a 32-bit table value."""
    return socket.inet_ntoa(value.to_bytes(4, "big"))


class P4Names:
    """Ids and sizes of one P4Info's objects, and entity builders using them."""

    def __init__(self, info: p4info_pb2.P4Info) -> None:
        self.table_id = {t.preamble.name: t.preamble.id for t in info.tables}
        self.table_name = {v: k for k, v in self.table_id.items()}
        self.fields = {
            t.preamble.name: [(f.id, f.name) for f in t.match_fields] for t in info.tables
        }
        self.action_id = {a.preamble.name: a.preamble.id for a in info.actions}
        self.action_params = {
            a.preamble.id: [(p.id, p.name) for p in a.params] for a in info.actions
        }
        self.register_id = {r.preamble.name: r.preamble.id for r in info.registers}
        self.register_size = {r.preamble.name: r.size for r in info.registers}
        self.counter_name = {c.preamble.id: c.preamble.name for c in info.counters}
        self.lanes = sum(1 for name in self.register_id if name.startswith("agg_lane_"))

    def table_entry(
        self,
        table: str,
        match: dict[str, int],
        action: str | None = None,
        params: dict[str, int] | None = None,
    ) -> p4rt.Entity:
        """An Entity holding a table entry (no action: a key for DELETE or Read)."""
        entity = p4rt.Entity()
        entry = entity.table_entry
        entry.table_id = self.table_id[table]
        for fid, fname in self.fields[table]:
            entry.match.add(field_id=fid).exact.value = encode_value(match[fname])
        if action is not None:
            act = entry.action.action
            act.action_id = self.action_id[action]
            for pid, pname in self.action_params[act.action_id]:
                act.params.add(param_id=pid, value=encode_value((params or {})[pname]))
        return entity

    def register_entry(self, register: str, index: int, value: int) -> p4rt.Entity:
        """An Entity setting cell `index` of `register` to `value` (unsigned)."""
        entity = p4rt.Entity()
        entry = entity.register_entry
        entry.register_id = self.register_id[register]
        entry.index.index = index
        entry.data.bitstring = encode_value(value)
        return entity

    def match_values(self, entry: p4rt.TableEntry) -> tuple[int, ...]:
        """The exact-match key of `entry`, in the table's field order."""
        given = {m.field_id: int.from_bytes(m.exact.value, "big") for m in entry.match}
        return tuple(given[fid] for fid, _ in self.fields[self.table_name[entry.table_id]])

    def action_values(self, entry: p4rt.TableEntry) -> dict[str, int]:
        """``{param name: value}`` of `entry`'s action."""
        action = entry.action.action
        names = dict(self.action_params.get(action.action_id, []))
        return {names[p.param_id]: int.from_bytes(p.value, "big") for p in action.params}
