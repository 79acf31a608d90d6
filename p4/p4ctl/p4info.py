"""The control-plane contract as a P4Info, built from the protocol constants.

``p4/build/inasched.p4info.txtpb`` is `build_p4info()` for the default sizing, committed as
text; the soft switch builds the same message for its own sizing and refuses any other, and the
P4 program pins the same names and ids with ``@name``/``@id`` annotations (checked by a test).

    python -m p4ctl.p4info --write p4/build/inasched.p4info.txtpb   # regenerate
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from p4ctl.protocol import MAX_JOBS, DropReason
from p4ctl.rule import JOB_COUNTERS, Registers

__all__ = [
    "CLONE_SESSION",
    "COMMITTED_P4INFO",
    "DEFAULT_AGGREGATORS",
    "DEFAULT_LANES",
    "MAX_AGGREGATORS",
    "MAX_PORTS",
    "PORT_BITS",
    "Sizing",
    "build_p4info",
    "compare_p4info",
    "p4info_text",
]

# ATP's Tofino prototype fits about 20,000 aggregators of 62 lanes; we round to 20,480 of 64.
DEFAULT_AGGREGATORS = 20480
DEFAULT_LANES = 64
# The most a soft switch or the service accepts: the lanes alone take aggregators x lanes x 4
# bytes (128 MiB at 256 lanes), and the service reads every aggregator's state each tick.
MAX_AGGREGATORS = 131072
# The lane registers of a soft switch, at most: 128 MiB whatever k (at 1,024 lanes that is
# 32,768 aggregators).
MAX_LANE_CELLS = MAX_AGGREGATORS * 256
# v1model ports are 9 bits wide; port 511 is BMv2's drop port.
PORT_BITS = 9
MAX_PORTS = 511
# One entry per (job, worker) plus each job's PS.
WORKER_TABLE_SIZE = MAX_JOBS * 33
# The one clone session the P4 program clones to (sizing.p4's CLONE_SESSION): not in the P4Info,
# so the control plane must install it as a PRE entry (p4/README.md).
CLONE_SESSION = 1

COMMITTED_P4INFO = Path(__file__).resolve().parent.parent / "build" / "inasched.p4info.txtpb"

_PREFIX = p4info_pb2.P4Ids


@dataclass(frozen=True, slots=True)
class Sizing:
    """The compile-time sizes a pipeline is built for."""

    aggregators: int = DEFAULT_AGGREGATORS
    lanes: int = DEFAULT_LANES


# (name, bit width) of every scalar aggregator register, in `Registers.SCALAR_ARRAYS` order.
AGG_REGISTER_WIDTHS: dict[str, int] = {
    "agg_job": 16,
    "agg_seq": 32,
    "agg_state": 8,
    "agg_bitmap": 32,
    "agg_count": 8,
    "agg_exponent": 8,
    "agg_priority": 8,
}
assert tuple(AGG_REGISTER_WIDTHS) == Registers.SCALAR_ARRAYS

# name -> (match fields [(name, width)], action names, size)
TABLES: dict[str, tuple[list[tuple[str, int]], list[str], int]] = {
    "job_table": ([("job", 16)], ["set_job", "unknown_job"], MAX_JOBS),
    "worker_table": (
        [("job", 16), ("worker", 8), ("src_addr", 32), ("src_port", 16)],
        ["allow_source", "reject_source"],
        WORKER_TABLE_SIZE,
    ),
    "port_table": ([("egress_port", PORT_BITS)], ["set_endpoint", "NoAction"], MAX_PORTS),
}

ACTIONS: dict[str, list[tuple[str, int]]] = {
    "NoAction": [],
    "set_job": [
        ("policy", 8),
        ("fan_in", 8),
        ("part_base", 32),
        ("part_size", 32),
        ("mcast_group", 16),
        ("ps_port", PORT_BITS),
        # The job's priority level, written by the scheduler only (a MODIFY of the entry): a
        # table parameter, not a register, so that every P4Runtime target can write it (PI,
        # under BMv2's simple_switch_grpc, answers register writes with UNIMPLEMENTED).
        ("priority", 8),
    ],
    "unknown_job": [],
    "allow_source": [("port", PORT_BITS)],
    "reject_source": [],
    "set_endpoint": [("addr", 32), ("udp_port", 16)],
}


def _id(prefix: int, index: int) -> int:
    return (prefix << 24) | index


def build_p4info(sizing: Sizing = Sizing()) -> p4info_pb2.P4Info:
    """The P4Info of the inasched pipeline for `sizing` (ids are stable across sizings)."""
    info = p4info_pb2.P4Info()
    info.pkg_info.name = "inasched"
    info.pkg_info.version = "1"
    info.pkg_info.arch = "v1model"

    action_ids = {name: _id(_PREFIX.ACTION, n) for n, name in enumerate(ACTIONS, start=1)}
    for name, params in ACTIONS.items():
        action = info.actions.add()
        action.preamble.id = action_ids[name]
        action.preamble.name = name
        action.preamble.alias = name
        for pid, (pname, width) in enumerate(params, start=1):
            param = action.params.add()
            param.id = pid
            param.name = pname
            param.bitwidth = width

    for n, (name, (fields, actions, size)) in enumerate(TABLES.items(), start=1):
        table = info.tables.add()
        table.preamble.id = _id(_PREFIX.TABLE, n)
        table.preamble.name = name
        table.preamble.alias = name
        for fid, (fname, width) in enumerate(fields, start=1):
            field = table.match_fields.add()
            field.id = fid
            field.name = fname
            field.bitwidth = width
            field.match_type = p4info_pb2.MatchField.EXACT
        for aname in actions:
            table.action_refs.add().id = action_ids[aname]
        table.size = size

    registers = [(name, width, sizing.aggregators) for name, width in AGG_REGISTER_WIDTHS.items()]
    registers += [(f"agg_lane_{lane}", 32, sizing.aggregators) for lane in range(sizing.lanes)]
    # Id 1 was the job_priority register, now set_job's priority: the others keep their ids.
    for n, (name, width, size) in enumerate(registers, start=2):
        register = info.registers.add()
        register.preamble.id = _id(_PREFIX.REGISTER, n)
        register.preamble.name = name
        register.preamble.alias = name
        register.type_spec.bitstring.bit.bitwidth = width
        register.size = size

    counters = [(name, MAX_JOBS) for name in JOB_COUNTERS] + [("drop_reason", len(DropReason))]
    for n, (name, size) in enumerate(counters, start=1):
        counter = info.counters.add()
        counter.preamble.id = _id(_PREFIX.COUNTER, n)
        counter.preamble.name = name
        counter.preamble.alias = name
        counter.spec.unit = p4info_pb2.CounterSpec.BOTH
        counter.size = size
    return info


def p4info_text(sizing: Sizing = Sizing()) -> str:
    """`build_p4info` as protobuf text format (what is committed)."""
    return str(text_format.MessageToString(build_p4info(sizing)))


def _entities(info: p4info_pb2.P4Info) -> dict[str, dict[str, object]]:
    """Per kind, name -> the properties the contract pins (ids, widths, sizes)."""
    return {
        "table": {
            t.preamble.name: (
                t.preamble.id,
                [(f.id, f.name, f.bitwidth, f.match_type) for f in t.match_fields],
                sorted(a.id for a in t.action_refs),
                t.size,
            )
            for t in info.tables
        },
        "action": {
            a.preamble.name: (a.preamble.id, [(p.id, p.name, p.bitwidth) for p in a.params])
            for a in info.actions
        },
        "register": {
            r.preamble.name: (r.preamble.id, r.type_spec.bitstring.bit.bitwidth, r.size)
            for r in info.registers
        },
        "counter": {c.preamble.name: (c.preamble.id, c.spec.unit, c.size) for c in info.counters},
    }


def _package(info: p4info_pb2.P4Info) -> dict[str, str]:
    """The pkg_info fields the contract pins."""
    pkg = info.pkg_info
    return {"name": pkg.name, "version": pkg.version, "arch": pkg.arch}


def compare_p4info(
    got: p4info_pb2.P4Info,
    want: p4info_pb2.P4Info,
    *,
    extra_ok: bool = False,
    labels: tuple[str, str] = ("emitted", "committed"),
) -> list[str]:
    """Every difference in names, ids, widths and sizes of tables, actions, registers and
    counters (what the control plane relies on), and in the package's name, version and
    architecture (p4c writes the first two only from the program's ``@pkginfo``); empty when
    they agree. Documentation and annotations are not compared. `extra_ok`: entities in `got`
    that `want` lacks are not a difference (a compiler's own, such as NoAction). `labels` name
    the two sides in the messages."""
    problems: list[str] = []
    g, w = labels
    if _package(got) != _package(want):
        problems.append(f"pkg_info: {g} {_package(got)}, {w} {_package(want)}")
    ours, theirs = _entities(got), _entities(want)
    for kind, wanted in theirs.items():
        have = ours[kind]
        for name in sorted(wanted.keys() - have.keys()):
            problems.append(f"{kind} {name}: in the {w} P4Info, not the {g} one")
        if not extra_ok:
            for name in sorted(have.keys() - wanted.keys()):
                problems.append(f"{kind} {name}: in the {g} P4Info, not the {w} one")
        for name in sorted(wanted.keys() & have.keys()):
            if wanted[name] != have[name]:
                problems.append(f"{kind} {name}: {g} {have[name]}, {w} {wanted[name]}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print or write the inasched P4Info.")
    parser.add_argument("--write", type=Path, help="write the text P4Info to this file")
    parser.add_argument("--aggregators", type=int, default=DEFAULT_AGGREGATORS)
    parser.add_argument("--lanes", type=int, default=DEFAULT_LANES)
    args = parser.parse_args(argv)
    text = p4info_text(Sizing(args.aggregators, args.lanes))
    if args.write:
        args.write.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
