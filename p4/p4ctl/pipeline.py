"""The switch pipeline without sockets: tables, registers, counters and the per-datagram path.

`Pipeline.handle(datagram, source)` is one packet pass of the P4 program: parse, the checks of
``p4/PROTOCOL.md`` section 4 in order, the per-fragment rule, then replication through the
multicast groups and the port table; it returns ``[(bytes, (host, udp_port)), ...]``. The
data plane (`p4ctl.dataplane`) feeds it a burst at a time (`handle_burst`).

`Pipeline` runs the compiled pass (``p4ctl.switch_engine``) over numpy registers and counters
that the P4Runtime server reads and writes in place. `RulePipeline` holds the same tables and
counters and runs the readable rule, `p4ctl.rule`, per packet: it is the simulator's switch
and the reference the differential tests hold `Pipeline` to byte for byte. The tables are
dicts written by the control plane; a dict assignment is atomic under the GIL, so the data
plane reads them without a lock.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from p4ctl.engine import pack_address, unpack_address
from p4ctl.protocol import (
    HEADER_SIZE,
    MAX_JOBS,
    PS_WORKER_ID,
    DropReason,
    Flag,
    Kind,
    MalformedPacket,
    Packet,
    decode,
    encode_header,
    encode_lanes,
)
from p4ctl.rule import (
    COUNTERS,
    JOB_COUNTERS,
    Cells,
    JobConfig,
    Registers,
    ToGroup,
    check,
    process,
    source_check,
)
from p4ctl.switch_engine import EnginePass, Table, TableArrays, job_counter_arrays

__all__ = ["Address", "Pipeline", "RulePipeline"]

log = logging.getLogger(__name__)

# A UDP endpoint as the socket module spells it: (dotted IPv4 host, port).
Address = tuple[str, int]

_RAW_FLOAT = int(Flag.RAW_FLOAT)


class _SwitchState:
    """One switch's state: the tables, registers and counters both pipelines share.

    Tables: `jobs` (job id -> `JobConfig`), `sources` ((job, worker, host, udp port) -> the
    sender's switch port), `endpoints` (switch port -> UDP address), `groups` (multicast group
    -> switch ports). Counters are ``[packets, bytes]`` cells indexed by job id or drop reason.
    """

    def __init__(
        self,
        registers: Registers,
        job_counters: tuple[dict[str, Cells], dict[str, Cells]],
        drop_counters: tuple[Cells, Cells],
        new_table: Callable[[], dict[Any, Any]],
        *,
        drop_rate: float,
        seed: int,
    ) -> None:
        if not 0.0 <= drop_rate < 1.0:
            raise ValueError(f"drop rate must be in [0, 1), got {drop_rate}")
        self.aggregators = registers.aggregators
        self.lanes = registers.k
        self.registers = registers
        self.jobs: dict[int, JobConfig] = new_table()
        self.sources: dict[tuple[int, int, str, int], int] = new_table()
        self.endpoints: dict[int, Address] = new_table()
        self.groups: dict[int, tuple[int, ...]] = new_table()
        self.job_packets, self.job_bytes = job_counters
        self.drop_packets, self.drop_bytes = drop_counters
        self.drop_rate = drop_rate
        self._loss = random.Random(seed)
        # The data address of this switch's parent in a fabric (p4/PROTOCOL.md 7.7), or None.
        self.parent: Address | None = None

    def handle(self, data: bytes, source: Address) -> list[tuple[bytes, Address]]:
        """One packet pass; returns the datagrams that leave, each with its UDP destination."""
        raise NotImplementedError

    def reset(self) -> None:
        """Empty every table, free every aggregator and zero the counters (a new pipeline)."""
        fresh = Registers(self.aggregators, self.lanes, arrays=self.registers.arrays)
        for name in (*Registers.SCALAR_ARRAYS, "agg_lanes"):
            # In place: the compiled pass holds views of these very arrays.
            getattr(self.registers, name)[:] = getattr(fresh, name)
        for table in (self.jobs, self.sources, self.endpoints, self.groups):
            table.clear()
        for counts in (*self.job_packets.values(), *self.job_bytes.values()):
            counts[:] = [0] * len(counts)
        self.drop_packets[:] = [0] * len(DropReason)
        self.drop_bytes[:] = [0] * len(DropReason)


class Pipeline(_SwitchState):
    """The switch's state and its compiled packet pass (see the module docstring)."""

    def __init__(
        self, aggregators: int, lanes: int, *, drop_rate: float = 0.0, seed: int = 0
    ) -> None:
        packets, job_packets = job_counter_arrays(MAX_JOBS)
        octets, job_bytes = job_counter_arrays(MAX_JOBS)
        drop_packets = np.zeros(len(DropReason), np.int64)
        drop_bytes = np.zeros(len(DropReason), np.int64)
        registers = Registers(aggregators, lanes, arrays=True)
        self._engine = EnginePass(
            registers, (job_packets, job_bytes), (drop_packets, drop_bytes), MAX_JOBS
        )
        super().__init__(
            registers,
            (dict(packets), dict(octets)),
            (drop_packets, drop_bytes),
            lambda: Table(self._tables_changed),
            drop_rate=drop_rate,
            seed=seed,
        )
        self._tables_changed()

    def _tables_changed(self) -> None:
        """A table was written: the compiled pass looks entries up in fresh arrays."""
        self._engine.set_tables(
            TableArrays(self.jobs, self.sources, self.endpoints, self.groups, MAX_JOBS)
        )

    def handle_burst(
        self,
        rows: npt.NDArray[np.uint8],
        sizes: npt.NDArray[np.int64],
        addrs: npt.NDArray[np.int64],
        count: int,
    ) -> Iterator[tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64], npt.NDArray[np.int64], int]]:
        """The compiled pass over received rows ``0..count`` (``p4ctl.engine.Burst`` layout).

        Yields ``(rows, sizes, packed addresses, n)`` of the datagrams that leave, a chunk at
        a time, in the order `handle` would return them; a chunk's arrays are reused by the
        next, so send them first.
        """
        engine = self._engine
        lost = None
        if self.drop_rate:
            draw, rate = self._loss.random, self.drop_rate
            lost = np.fromiter((draw() < rate for _ in range(count)), np.bool_, count)
        for n in engine.process(rows, sizes, addrs, count, lost):
            yield engine.out_rows, engine.out_sizes, engine.out_addrs, n

    def handle(self, data: bytes, source: Address) -> list[tuple[bytes, Address]]:
        """One packet pass, as a burst of one."""
        stride = max(self._engine.datagram_size, HEADER_SIZE)
        row = np.zeros((1, stride), np.uint8)
        kept = min(len(data), stride)
        row[0, :kept] = np.frombuffer(data, np.uint8, kept)
        try:
            address = pack_address(source)
        except OSError:
            address = 0  # not a dotted IPv4 source: no worker table entry can match it
        sizes = np.array([len(data)], np.int64)
        sends = []
        for out, out_sizes, out_addrs, n in self.handle_burst(row, sizes, np.array([address]), 1):
            sends += [
                (out[i, : out_sizes[i]].tobytes(), unpack_address(int(out_addrs[i])))
                for i in range(n)
            ]
        return sends


class RulePipeline(_SwitchState):
    """The switch's state and `p4ctl.rule` in Python per packet (see the module docstring)."""

    def __init__(
        self, aggregators: int, lanes: int, *, drop_rate: float = 0.0, seed: int = 0
    ) -> None:
        super().__init__(
            Registers(aggregators, lanes),
            (
                {name: [0] * MAX_JOBS for name in JOB_COUNTERS},
                {name: [0] * MAX_JOBS for name in JOB_COUNTERS},
            ),
            ([0] * len(DropReason), [0] * len(DropReason)),
            dict,
            drop_rate=drop_rate,
            seed=seed,
        )
        # Keyed by the outcome's value: hashing an Enum member runs Python code.
        self._outcome_cells = {
            outcome.value: [(self.job_packets[n], self.job_bytes[n]) for n in names]
            for outcome, names in COUNTERS.items()
        }

    def handle(self, data: bytes, source: Address) -> list[tuple[bytes, Address]]:
        size = len(data)
        if self.drop_rate and self._loss.random() < self.drop_rate:
            self._drop(DropReason.INJECTED_LOSS, size, None)
            return []
        pkt = self._parse(data)
        if pkt is None:
            return []
        job = pkt.job
        cfg = self.jobs.get(job)
        if cfg is None:
            self._drop(DropReason.UNKNOWN_JOB, size, None)
            return []
        sender_port = self.sources.get((job, _source_worker(pkt, cfg), source[0], source[1]))
        reason = source_check(sender_port, self._ingress_port(source, sender_port))
        if reason is not None or sender_port is None:
            self._drop(reason or DropReason.UNREGISTERED_SOURCE, size, job)
            return []
        reason = check(pkt, cfg, self.aggregators)
        if reason is not None:
            self._drop(reason, size, job)
            return []
        verdict = process(self.registers, pkt, self.jobs, sender_port)
        if verdict.drop is not None:
            self.drop_packets[verdict.drop] += 1
            self.drop_bytes[verdict.drop] += size
        for packets, octets in self._outcome_cells[verdict.outcome._value_]:
            packets[job] += 1
            octets[job] += size
        if verdict.evicted_job is not None:
            self.job_packets["job_evicted"][verdict.evicted_job] += 1
            self.job_bytes["job_evicted"][verdict.evicted_job] += size
        if not verdict.outputs:
            return []
        sends: list[tuple[bytes, Address]] = []
        body_of: tuple[object, int, bytes | memoryview] = (
            pkt.lanes,
            int(pkt.flags) & _RAW_FLOAT,
            memoryview(data)[HEADER_SIZE:],
        )
        for out in verdict.outputs:
            wire, body_of = _wire(out.packet, body_of)
            if isinstance(out, ToGroup):
                for port in self.groups.get(out.group, ()):
                    self._emit(sends, wire, port)
            else:
                self._emit(sends, wire, out.port)
        return sends

    def _ingress_port(self, source: Address, port: int | None) -> int:
        """The port `source` entered on, as far as it matters: UDP has no ports, so a datagram
        enters on the port whose endpoint is its source. One endpoint per port (`PortMap`), so
        it entered on `port` exactly when `port`'s endpoint is `source`; -1: somewhere else."""
        if port is not None and self.endpoints.get(port) == source:
            return port
        return -1

    def _parse(self, data: bytes) -> Packet | None:
        """The decoded datagram, or None after counting why it was dropped."""
        try:
            return decode(data, self.lanes)
        except MalformedPacket as exc:
            self._drop(exc.reason, len(data), None)
            return None

    def _emit(self, sends: list[tuple[bytes, Address]], wire: bytes, port: int) -> None:
        address = self.endpoints.get(port)
        if address is None:
            # An egress port with no port_table entry: the packet leaves into nothing, as on a
            # switch whose port is down; the control plane writes the entry before the job.
            log.debug("no endpoint for port %d, %d bytes dropped at egress", port, len(wire))
            return
        sends.append((wire, address))

    def _drop(self, reason: DropReason, size: int, job: int | None) -> None:
        self.drop_packets[reason] += 1
        self.drop_bytes[reason] += size
        if job is not None:
            self.job_packets["job_dropped"][job] += 1
            self.job_bytes["job_dropped"][job] += size


def _source_worker(pkt: Packet, cfg: JobConfig) -> int:
    """The worker id a packet's source is looked up under: a RESULT at a switch whose job has
    a parent comes from the parent, registered as worker 255 (p4/PROTOCOL.md 7.2); every other
    packet under its header's worker."""
    if pkt.kind == Kind.RESULT and cfg.up_port is not None:
        return PS_WORKER_ID
    return pkt.worker


def _wire(
    out: Packet, body_of: tuple[object, int, bytes | memoryview]
) -> tuple[bytes, tuple[object, int, bytes | memoryview]]:
    """The datagram of `out`, and the ``(lanes, raw bit, body bytes)`` it was built from.

    `body_of` names lanes whose wire bytes are known: first the received packet's own (a
    bypass forwards them unchanged but for kind and flags), then the last output's (esa sends
    the same sum to the workers and to the PS), so each array is byte-swapped at most once.
    """
    lanes, raw, body = body_of
    out_raw = int(out.flags) & _RAW_FLOAT
    if out.lanes is not lanes or out_raw != raw:
        lanes, raw, body = out.lanes, out_raw, encode_lanes(out)
    return encode_header(out, len(out.lanes)) + body, (lanes, raw, body)
