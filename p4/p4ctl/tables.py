"""P4Runtime entities of the inasched pipeline, applied to a `Pipeline` (the soft switch's
control plane, without gRPC).

`Entities.write(update)` validates one `p4.v1.Update` against the P4Info and applies it:
table entries become the pipeline's job configs, allowed sources and port endpoints; register
entries become cells of `Registers` (``agg_lane_i`` is column ``i`` of ``agg_lanes``);
multicast groups and the clone session go to `p4ctl.replication`.
`Entities.read(entity)` yields the matching entities, wildcards included. Refusals raise
`EntityError` carrying the canonical gRPC code.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass, replace

from google.rpc import code_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2 as p4rt

from p4ctl.pipeline import Pipeline
from p4ctl.protocol import MAX_WORKERS, PS_WORKER_ID, Policy
from p4ctl.replication import Replication
from p4ctl.rule import JOB_COUNTERS, Cells, JobConfig, Registers, is_power_of_two
from p4ctl.values import EntityError, decode_value, encode_value

__all__ = ["Entities"]


def _ipv4(value: int) -> str:
    return socket.inet_ntoa(value.to_bytes(4, "big"))


@dataclass(frozen=True, slots=True)
class _Table:
    name: str
    fields: tuple[tuple[int, str, int], ...]  # (id, name, width)
    actions: frozenset[int]
    size: int


class Entities:
    """The switch's P4Runtime-visible state for one P4Info, applied to `pipeline`."""

    def __init__(self, pipeline: Pipeline, info: p4info_pb2.P4Info) -> None:
        self.pipeline = pipeline
        self._tables = {
            t.preamble.id: _Table(
                t.preamble.name,
                tuple((f.id, f.name, f.bitwidth) for f in t.match_fields),
                frozenset(a.id for a in t.action_refs),
                t.size,
            )
            for t in info.tables
        }
        self._actions = {
            a.preamble.id: (a.preamble.name, {p.id: (p.name, p.bitwidth) for p in a.params})
            for a in info.actions
        }
        self._registers = {
            r.preamble.id: (r.preamble.name, r.type_spec.bitstring.bit.bitwidth, r.size)
            for r in info.registers
        }
        self._counters = {c.preamble.id: (c.preamble.name, c.size) for c in info.counters}
        self._entries: dict[int, dict[tuple[int, ...], p4rt.TableEntry]] = {
            tid: {} for tid in self._tables
        }
        self._replication = Replication(pipeline)
        # Each job's entry as `set_job` wrote it; the data plane's may add its fabric fields.
        self._set_jobs: dict[int, JobConfig] = {}

    # ------------------------------------------------------------------ write

    def write(self, update: p4rt.Update) -> None:
        """Apply one update; raises `EntityError` when it is refused (nothing changed then)."""
        kind = update.entity.WhichOneof("entity")
        if kind == "table_entry":
            self._write_table(update.type, update.entity.table_entry)
        elif kind == "register_entry":
            if update.type != p4rt.Update.MODIFY:
                raise EntityError(code_pb2.INVALID_ARGUMENT, "registers only take MODIFY")
            self._write_register(update.entity.register_entry)
        elif kind == "counter_entry":
            if update.type != p4rt.Update.MODIFY:
                raise EntityError(code_pb2.INVALID_ARGUMENT, "counters only take MODIFY")
            self._write_counter(update.entity.counter_entry)
        elif kind == "packet_replication_engine_entry":
            self._replication.write(update.type, update.entity.packet_replication_engine_entry)
        else:
            raise EntityError(code_pb2.UNIMPLEMENTED, f"{kind or 'empty'} entities not supported")

    def _write_table(self, op: int, entry: p4rt.TableEntry) -> None:
        table = self._tables.get(entry.table_id)
        if table is None:
            raise EntityError(code_pb2.NOT_FOUND, f"no table with id {entry.table_id}")
        if entry.is_default_action:
            raise EntityError(code_pb2.PERMISSION_DENIED, f"{table.name}'s default action is fixed")
        key = self._key(table, entry)
        entries = self._entries[entry.table_id]
        if op == p4rt.Update.DELETE:
            if key not in entries:
                raise EntityError(code_pb2.NOT_FOUND, f"{table.name} has no entry {key}")
            self._apply(table.name, key, None)
            del entries[key]
            return
        if op == p4rt.Update.INSERT and key in entries:
            raise EntityError(code_pb2.ALREADY_EXISTS, f"{table.name} already has entry {key}")
        if op == p4rt.Update.MODIFY and key not in entries:
            raise EntityError(code_pb2.NOT_FOUND, f"{table.name} has no entry {key} to modify")
        if op == p4rt.Update.INSERT and len(entries) >= table.size:
            raise EntityError(code_pb2.RESOURCE_EXHAUSTED, f"{table.name} is full ({table.size})")
        action = entry.action.action
        if entry.action.WhichOneof("type") != "action" or action.action_id not in table.actions:
            raise EntityError(
                code_pb2.INVALID_ARGUMENT,
                f"{table.name} takes one direct action of its action_refs",
            )
        name, params = self._actions[action.action_id]
        values: dict[str, int] = {}
        for param in action.params:
            pname, width = params.get(param.param_id, ("", 0))
            if not pname:
                raise EntityError(
                    code_pb2.INVALID_ARGUMENT, f"{name} has no param {param.param_id}"
                )
            values[pname] = decode_value(param.value, width, f"{name}.{pname}")
        missing = {p for p, _ in params.values()} - set(values)
        if missing:
            raise EntityError(code_pb2.INVALID_ARGUMENT, f"{name} lacks {sorted(missing)}")
        self._apply(table.name, key, (name, values))
        stored = p4rt.TableEntry()
        stored.CopyFrom(entry)
        entries[key] = stored

    def _key(self, table: _Table, entry: p4rt.TableEntry) -> tuple[int, ...]:
        given = {m.field_id: m for m in entry.match}
        key = []
        for fid, fname, width in table.fields:
            match = given.pop(fid, None)
            if match is None or match.WhichOneof("field_match_type") != "exact":
                raise EntityError(
                    code_pb2.INVALID_ARGUMENT, f"{table.name} needs an exact match on {fname}"
                )
            key.append(decode_value(match.exact.value, width, f"{table.name}.{fname}"))
        if given:
            raise EntityError(
                code_pb2.INVALID_ARGUMENT, f"{table.name} has no match fields {sorted(given)}"
            )
        return tuple(key)

    def _apply(
        self, table: str, key: tuple[int, ...], action: tuple[str, dict[str, int]] | None
    ) -> None:
        """Make the data plane see `action` for `key` (None: the entry is gone)."""
        pipe = self.pipeline
        name, v = action if action else ("", {})
        if table == "job_table":
            (job,) = key
            if name == "set_job":
                self._set_jobs[job] = self._job_config(job, v)
                self._place(job)
            else:
                self._set_jobs.pop(job, None)
                pipe.jobs.pop(job, None)
        elif table == "worker_table":
            job, worker, addr, udp_port = key
            source = (job, worker, _ipv4(addr), udp_port)
            if name == "allow_source":
                pipe.sources[source] = v["port"]
            else:
                pipe.sources.pop(source, None)
            if job in self._set_jobs:
                self._place(job)
        elif table == "port_table":
            (port,) = key
            if name == "set_endpoint":
                pipe.endpoints[port] = (_ipv4(v["addr"]), v["udp_port"])
            else:
                pipe.endpoints.pop(port, None)

    def _place(self, job: int) -> None:
        """The data plane's entry of `job`: its `set_job`, placed in a fabric.

        This P4Info's `set_job` has no `up_port`/`local_mask` (p4/PROTOCOL.md 7.7): on a switch
        started with a parent, a job whose worker table holds the parent's address as worker
        255 goes up out of that entry's port, and its local workers are the ids below `fan_in`
        the worker table holds. A job there whose worker table holds some but not all of its
        workers and no parent is a spill job (7.8): its parent is its PS (`up_port` =
        `ps_port`). Any other job is a one-level job.
        """
        cfg = self._set_jobs[job]
        parent = self.pipeline.parent
        up_port, local = None, 0
        for (j, worker, host, udp_port), port in list(self.pipeline.sources.items()):
            if j != job:
                continue
            if worker < cfg.fan_in:
                local |= 1 << worker
            elif worker == PS_WORKER_ID and (host, udp_port) == parent:
                up_port = port
        if up_port is None and parent is not None and 0 < local < (1 << cfg.fan_in) - 1:
            up_port = cfg.ps_port  # its racks' sums meet at the PS, not at a spine
        if up_port is not None:
            cfg = replace(cfg, up_port=up_port, local_mask=local)
        if self.pipeline.jobs.get(job) != cfg:
            self.pipeline.jobs[job] = cfg

    def _job_config(self, job: int, v: dict[str, int]) -> JobConfig:
        if v["policy"] not in {int(p) for p in Policy}:
            raise EntityError(code_pb2.INVALID_ARGUMENT, f"job {job}: policy {v['policy']} unknown")
        if not 1 <= v["fan_in"] <= MAX_WORKERS:
            raise EntityError(
                code_pb2.INVALID_ARGUMENT,
                f"job {job}: fan_in {v['fan_in']} outside 1..{MAX_WORKERS}",
            )
        policy = Policy(v["policy"])
        base, size = v["part_base"], v["part_size"]
        if policy == Policy.STATIC and not is_power_of_two(size):
            # The P4 program would drop every fragment of such a job as BAD_AGG_INDEX
            # (fragment_check.p4): refuse the entry instead of accepting a dead job.
            raise EntityError(
                code_pb2.INVALID_ARGUMENT,
                f"job {job}: static part_size {size} is not a power of two (the switch checks "
                "seq mod part_size with a mask)",
            )
        if policy == Policy.STATIC and base + 2 * size > self.pipeline.aggregators:
            raise EntityError(
                code_pb2.INVALID_ARGUMENT,
                f"job {job}: static partition {base}+2x{size} "
                f"does not fit {self.pipeline.aggregators} aggregators",
            )
        return JobConfig(
            job,
            policy,
            v["fan_in"],
            v["part_base"],
            v["part_size"],
            v["mcast_group"],
            v["ps_port"],
            v["priority"],
        )

    def _register(self, register_id: int) -> tuple[str, int, int]:
        found = self._registers.get(register_id)
        if found is None:
            raise EntityError(code_pb2.NOT_FOUND, f"no register with id {register_id}")
        return found

    def _write_register(self, entry: p4rt.RegisterEntry) -> None:
        name, width, size = self._register(entry.register_id)
        value = decode_value(entry.data.bitstring, width, name)
        indices = self._indices(entry.HasField("index"), entry.index.index, size, name)
        regs = self.pipeline.registers
        if name.startswith("agg_lane_"):
            regs.agg_lanes[indices, int(name.removeprefix("agg_lane_"))] = _signed(value, 32)
        else:
            cells: list[int] = getattr(regs, name)
            # The exponent is a signed byte in the protocol; every other register is unsigned.
            cell = _signed(value, width) if name == "agg_exponent" else value
            for i in indices:
                cells[i] = cell

    def _write_counter(self, entry: p4rt.CounterEntry) -> None:
        name, size = self._counter(entry.counter_id)
        indices = self._indices(entry.HasField("index"), entry.index.index, size, name)
        packets, octets = self._counter_cells(name)
        for i in indices:
            packets[i] = entry.data.packet_count
            octets[i] = entry.data.byte_count

    # ------------------------------------------------------------------ read

    def read(self, entity: p4rt.Entity) -> Iterator[p4rt.Entity]:
        """Every stored entity `entity` selects (id 0 or a missing index is a wildcard)."""
        kind = entity.WhichOneof("entity")
        if kind == "table_entry":
            yield from self._read_tables(entity.table_entry)
        elif kind == "register_entry":
            yield from self._read_registers(entity.register_entry)
        elif kind == "counter_entry":
            yield from self._read_counters(entity.counter_entry)
        elif kind == "packet_replication_engine_entry":
            yield from self._replication.read(entity.packet_replication_engine_entry)
        else:
            raise EntityError(code_pb2.UNIMPLEMENTED, f"reading {kind} is not supported")

    def _read_tables(self, query: p4rt.TableEntry) -> Iterator[p4rt.Entity]:
        if query.table_id and query.table_id not in self._tables:
            raise EntityError(code_pb2.NOT_FOUND, f"no table with id {query.table_id}")
        tables = [query.table_id] if query.table_id else sorted(self._tables)
        for tid in tables:
            key = self._key(self._tables[tid], query) if query.match else None
            for entry_key, entry in list(self._entries[tid].items()):
                if key is None or key == entry_key:
                    out = p4rt.Entity()
                    out.table_entry.CopyFrom(entry)
                    yield out

    def _read_registers(self, query: p4rt.RegisterEntry) -> Iterator[p4rt.Entity]:
        ids = [query.register_id] if query.register_id else sorted(self._registers)
        regs = self.pipeline.registers
        for rid in ids:
            name, width, size = self._register(rid)
            indices = self._indices(query.HasField("index"), query.index.index, size, name)
            values = _register_values(regs, name, width)
            for i in indices:
                out = p4rt.Entity()
                entry = out.register_entry
                entry.register_id = rid
                entry.index.index = i
                entry.data.bitstring = encode_value(values[i])
                yield out

    def _counter(self, counter_id: int) -> tuple[str, int]:
        found = self._counters.get(counter_id)
        if found is None:
            raise EntityError(code_pb2.NOT_FOUND, f"no counter with id {counter_id}")
        return found

    def _counter_cells(self, name: str) -> tuple[Cells, Cells]:
        pipe = self.pipeline
        if name in JOB_COUNTERS:
            return pipe.job_packets[name], pipe.job_bytes[name]
        return pipe.drop_packets, pipe.drop_bytes

    def _read_counters(self, query: p4rt.CounterEntry) -> Iterator[p4rt.Entity]:
        ids = [query.counter_id] if query.counter_id else sorted(self._counters)
        for cid in ids:
            name, size = self._counter(cid)
            indices = self._indices(query.HasField("index"), query.index.index, size, name)
            packets, octets = self._counter_cells(name)
            for i in indices:
                out = p4rt.Entity()
                entry = out.counter_entry
                entry.counter_id = cid
                entry.index.index = i
                entry.data.packet_count = packets[i]
                entry.data.byte_count = octets[i]
                yield out

    @staticmethod
    def _indices(has_index: bool, index: int, size: int, name: str) -> range:
        if not has_index:
            return range(size)
        if not 0 <= index < size:
            raise EntityError(code_pb2.OUT_OF_RANGE, f"{name} index {index} outside 0..{size - 1}")
        return range(index, index + 1)


def _register_values(regs: Registers, name: str, width: int) -> list[int]:
    """The cells of register `name` as unsigned ints (two's complement where signed)."""
    mask = (1 << width) - 1
    if name.startswith("agg_lane_"):
        column = regs.agg_lanes[:, int(name.removeprefix("agg_lane_"))]
        return [v & mask for v in column.tolist()]
    return [int(v) & mask for v in getattr(regs, name)]


def _signed(value: int, width: int) -> int:
    return value - (1 << width) if value >> (width - 1) else value
