"""The soft switch's packet pass on the compiled engine: tables as arrays, bursts in and out.

`Pipeline` (``p4ctl.pipeline``) owns the switch's state. Its registers and counters are numpy
arrays that the C pass (``p4/p4ctl/csrc/``) reads and writes in place, and its tables stay
dicts, written by the control plane, whose every write rebuilds the arrays the pass looks
entries up in (`Table`, `TableArrays`): a P4Runtime write is seen by the next packet, and a
read returns what the packets did. The pass runs with the GIL held, so it sees one version of
the tables for a whole burst.

- job table: ``(max_jobs, 10)`` rows of `JOB_COLUMNS` (``valid`` 0 for no entry; the priority
  is a column, as it is a parameter of the P4 program's ``job_table`` entry);
- worker table: ``(n, 2)`` sorted keys ``(job << 8 | worker, packed source address)`` and the
  sender's switch port per key (binary search);
- port table: sorted switch ports and their packed UDP addresses;
- multicast groups: sorted group ids, ``starts`` (n + 1 offsets) into one array of ports.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from p4ctl.engine import engine_module, pack_address
from p4ctl.protocol import HEADER_SIZE
from p4ctl.rule import JOB_COUNTERS, JobConfig, Registers

__all__ = [
    "EnginePass",
    "JOB_COLUMNS",
    "Table",
    "TableArrays",
    "job_counter_arrays",
]

log = logging.getLogger(__name__)

JOB_COLUMNS = (
    "valid",
    "policy",
    "fan_in",
    "part_base",
    "part_size",
    "mcast_group",
    "ps_port",
    "priority",
    "up_port",  # -1: no parent (p4/PROTOCOL.md section 7)
    "local_mask",
)
# Datagrams one `EnginePass.process` call may emit before the caller must send them.
OUT_ROWS = 4096

Int64s = npt.NDArray[np.int64]


class Table(dict[Any, Any]):
    """A dict that calls `on_change` after every write (the control plane's table writes)."""

    def __init__(self, on_change: Callable[[], None]) -> None:
        super().__init__()
        self._on_change = on_change

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        self._on_change()

    def __delitem__(self, key: Any) -> None:
        super().__delitem__(key)
        self._on_change()

    def pop(self, key: Any, *default: Any) -> Any:
        value = super().pop(key, *default)
        self._on_change()
        return value

    def popitem(self) -> tuple[Any, Any]:
        item = super().popitem()
        self._on_change()
        return item

    def setdefault(self, key: Any, default: Any = None) -> Any:
        value = super().setdefault(key, default)
        self._on_change()
        return value

    def update(self, *args: Any, **kwargs: Any) -> None:
        super().update(*args, **kwargs)
        self._on_change()

    def clear(self) -> None:
        super().clear()
        self._on_change()


def _host_int(host: str) -> int | None:
    """A dotted IPv4 host as an int, or None for anything a datagram's source never is."""
    try:
        return int.from_bytes(socket.inet_aton(host), "big")
    except OSError:
        return None


def _endpoint(address: tuple[str, int]) -> int | None:
    """The packed UDP address a port sends to; a host name is resolved as ``sendto`` would."""
    host, port = address
    try:
        return pack_address((socket.gethostbyname(host), port))
    except OSError:
        log.warning("port_table: cannot resolve %r; that port sends nothing", host)
        return None


class TableArrays:
    """The arrays of every table, built from the pipeline's dicts (see module docstring)."""

    def __init__(
        self,
        jobs: Mapping[int, JobConfig],
        sources: Mapping[tuple[int, int, str, int], int],
        endpoints: Mapping[int, tuple[str, int]],
        groups: Mapping[int, tuple[int, ...]],
        max_jobs: int,
    ) -> None:
        self.jobs = np.zeros((max_jobs, len(JOB_COLUMNS)), np.int64)
        for job, cfg in jobs.items():
            if 0 <= job < max_jobs:
                self.jobs[job] = (
                    1,
                    int(cfg.policy),
                    cfg.fan_in,
                    cfg.part_base,
                    cfg.part_size,
                    cfg.mcast_group,
                    cfg.ps_port,
                    cfg.priority,
                    -1 if cfg.up_port is None else cfg.up_port,
                    cfg.local_mask,
                )
        keyed = sorted(
            ((job << 8 | worker, host << 16 | udp), port)
            for (job, worker, name, udp), port in sources.items()
            if (host := _host_int(name)) is not None
        )
        self.src_keys = np.array([k for k, _ in keyed], np.int64).reshape(-1, 2)
        self.src_ports = np.array([p for _, p in keyed], np.int64)
        packed = sorted(
            (port, address)
            for port, ep in endpoints.items()
            if (address := _endpoint(ep)) is not None
        )
        self.ep_ports = np.array([p for p, _ in packed], np.int64)
        self.ep_addrs = np.array([a for _, a in packed], np.int64)
        members = sorted(groups.items())
        self.grp_ids = np.array([g for g, _ in members], np.int64)
        self.grp_starts = np.cumsum([0, *(len(ports) for _, ports in members)], dtype=np.int64)
        self.grp_ports = np.array([p for _, ports in members for p in ports], np.int64)
        self.widest_group = max((len(ports) for _, ports in members), default=0)

    def arguments(self) -> tuple[Any, ...]:
        """The arguments of ``SwitchEngine.set_tables``, in its order."""
        return (
            self.jobs,
            self.src_keys,
            self.src_ports,
            self.ep_ports,
            self.ep_addrs,
            self.grp_ids,
            self.grp_starts,
            self.grp_ports,
            self.widest_group,
        )


class EnginePass:
    """The compiled packet pass over `registers` and the counter arrays, with output rows.

    `process` runs a burst through the pass and yields the datagrams that leave, a chunk at a
    time, in the order the Python rule emits them; each chunk's rows are reused by the next,
    so send (or copy) them before asking for more.
    """

    def __init__(
        self,
        registers: Registers,
        job_counters: tuple[Int64s, Int64s],
        drop_counters: tuple[Int64s, Int64s],
        max_jobs: int,
    ) -> None:
        engine = engine_module()
        if not registers.arrays:
            raise ValueError("the compiled pass needs array registers (Registers(arrays=True))")
        self.k = registers.k
        self.datagram_size = HEADER_SIZE + 4 * registers.k
        state = tuple(getattr(registers, n) for n in Registers.SCALAR_ARRAYS)
        self._engine = engine.SwitchEngine(
            (*state, registers.agg_lanes),
            (*job_counters, *drop_counters),
            registers.aggregators,
            registers.k,
            max_jobs,
        )
        self.out_rows = np.zeros((OUT_ROWS, self.datagram_size), np.uint8)
        self.out_sizes = np.zeros(OUT_ROWS, np.int64)
        self.out_addrs = np.zeros(OUT_ROWS, np.int64)

    def set_tables(self, tables: TableArrays) -> None:
        self._engine.set_tables(*tables.arguments())

    def process(
        self,
        rows: npt.NDArray[np.uint8],
        sizes: Int64s,
        addrs: Int64s,
        count: int,
        lost: npt.NDArray[np.bool_] | None,
    ) -> Iterator[int]:
        """Run rows ``0..count`` through the pass; yields the number of datagrams in
        `out_rows` (with `out_sizes`, `out_addrs`) after each chunk."""
        stride = rows.shape[1]
        start = 0
        while start < count:
            before = start
            start, emitted = self._engine.process(
                rows,
                stride,
                sizes,
                addrs,
                start,
                count,
                lost,
                self.out_rows,
                self.out_sizes,
                self.out_addrs,
            )
            if emitted:
                yield emitted
            elif start == before:
                raise RuntimeError(f"{OUT_ROWS} output rows cannot hold one packet's outputs")


def job_counter_arrays(max_jobs: int) -> tuple[dict[str, Int64s], Int64s]:
    """``({counter name: row view}, the whole (len(JOB_COUNTERS), max_jobs) array)``."""
    whole = np.zeros((len(JOB_COUNTERS), max_jobs), np.int64)
    return {name: whole[i] for i, name in enumerate(JOB_COUNTERS)}, whole
