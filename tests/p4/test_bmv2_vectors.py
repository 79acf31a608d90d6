"""Replays ``p4/vectors/*.json`` against the P4 program on BMv2 ``simple_switch_grpc``.

Each switch port of a vector is a veth pair: the switch end stays in the root namespace and is
given to BMv2, the host end lives in its own network namespace, where a raw socket sends the
vector's frames and collects what the switch sends back. Tables, multicast groups, the clone
session and ``job_priority`` are written over P4Runtime, registers and counters are read back
the same way. Needs root, ``ip``, ``p4c`` and ``simple_switch_grpc``; skipped otherwise (CI has
neither). The P4 program emits some packets on a later pass than the Python rule (see
``p4/README.md``), so the packets of one step are compared as a multiset, not in order.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc
from p4ctl import build
from p4ctl.protocol import PS_WORKER_ID, AggState, DropReason, Flag, Kind, Packet, decode, encode
from p4ctl.rule import COUNTERS, Outcome

pytestmark = pytest.mark.bmv2

VECTORS = sorted((build.P4_DIR / "vectors").glob("*.json"))
SIZING = build.read_sizing()
SWITCH_ADDR = "10.77.255.1"
GRPC_ADDR = "127.0.0.1:29559"
SETTLE_S = 0.4  # BMv2 forwards in well under this; recirculated packets included

_missing = [t for t in ("p4c", "simple_switch_grpc", "ip") if shutil.which(t) is None]
if _missing or os.geteuid() != 0:
    pytest.skip(
        f"needs root and {', '.join(_missing) or 'nothing else'} for the BMv2 vector runner",
        allow_module_level=True,
    )

_libc = ctypes.CDLL(None, use_errno=True)
_CLONE_NEWNET = 0x40000000


@contextlib.contextmanager
def _in_netns(name: str) -> Iterator[None]:
    """Run the body in network namespace `name` (this thread only), then come back."""
    with open("/proc/self/ns/net") as home, open(f"/run/netns/{name}") as target:
        if _libc.setns(target.fileno(), _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {name}")
        try:
            yield
        finally:
            _libc.setns(home.fileno(), _CLONE_NEWNET)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _host_addr(port: int, worker: int) -> tuple[str, int]:
    return f"10.77.{port // 250}.{port % 250 + 1}", 40000 + worker


# ---------------------------------------------------------------------------- frames


def _checksum(data: bytes) -> int:
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _frame(payload: bytes, src: tuple[str, int]) -> bytes:
    udp = struct.pack("!HHHH", src[1], SIZING["AGG_UDP_PORT"], 8 + len(payload), 0) + payload
    ip = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0,
        socket.inet_aton(src[0]), socket.inet_aton(SWITCH_ADDR),
    )  # fmt: skip
    ip = ip[:10] + struct.pack("!H", _checksum(ip)) + ip[12:]
    return b"\x02\x00\x00\x00\x00\x01" + b"\x02\x00\x00\x00\x00\x02" + b"\x08\x00" + ip + udp


def _payload(frame: bytes) -> tuple[tuple[str, int], bytes] | None:
    """(UDP destination, payload) of an IPv4/UDP frame, None for anything else."""
    if len(frame) < 42 or frame[12:14] != b"\x08\x00" or frame[23] != 17:
        return None
    dst = socket.inet_ntoa(frame[30:34]), struct.unpack("!H", frame[36:38])[0]
    return dst, frame[42:]


def _packet(send: dict[str, Any], jobs: dict[int, dict[str, Any]], k: int) -> bytes:
    spec = dict(send.get("packet", {}))
    origin = send["from"]
    job, worker = 0, 0
    if origin != "stranger":
        job_s, worker_s = origin.split("/")
        job, worker = int(job_s), PS_WORKER_ID if worker_s == "ps" else int(worker_s)
    job = spec.get("job", job)
    worker = spec.get("worker", worker)
    flags = Flag.NONE
    for name in spec.get("flags", []):
        flags |= Flag[name.upper()]
    count = spec.get("lane_count", k)
    dtype = np.float32 if flags & Flag.RAW_FLOAT else np.int32
    lanes = np.zeros(count, dtype=dtype)
    given = spec.get("lanes", [])[:count]
    lanes[: len(given)] = given
    kind = spec.get("kind", "gradient")
    pkt = Packet(
        kind=Kind[kind.upper()] if isinstance(kind, str) else Kind.GRADIENT,
        job=job,
        worker=worker,
        fan_in=spec.get("fan_in", jobs.get(job, {}).get("fan_in", 0)),
        agg_index=spec.get("agg_index", 0),
        seq=spec.get("seq", 0),
        flags=flags,
        shadow=spec.get("shadow", 0),
        exponent=spec.get("exponent", 0),
        bitmap=spec.get("bitmap", (1 << worker) & 0xFFFFFFFF),
        lanes=lanes,
        version=spec.get("version", 1),
    )
    data = bytearray(encode(pkt))
    if isinstance(kind, int):
        data[1] = kind
    if "truncate_to" in spec:
        data = data[: spec["truncate_to"]]
    return bytes(data) + bytes(spec.get("append", 0))


# ---------------------------------------------------------------------------- P4Runtime


class Switch:
    """One P4Runtime connection to simple_switch_grpc, as primary controller."""

    def __init__(self, info: p4info_pb2.P4Info, config_json: bytes) -> None:
        self.info = info
        self.channel = grpc.insecure_channel(GRPC_ADDR)
        grpc.channel_ready_future(self.channel).result(timeout=10)
        self.stub = p4runtime_pb2_grpc.P4RuntimeStub(self.channel)
        self.election = p4runtime_pb2.Uint128(high=0, low=1)
        arbitration = p4runtime_pb2.StreamMessageRequest()
        arbitration.arbitration.device_id = 0
        arbitration.arbitration.election_id.CopyFrom(self.election)
        self.stream = self.stub.StreamChannel(iter([arbitration, *self._forever()]))
        next(self.stream)  # the arbitration answer
        pipeline = p4runtime_pb2.SetForwardingPipelineConfigRequest(
            device_id=0,
            election_id=self.election,
            action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
        )
        pipeline.config.p4info.CopyFrom(info)
        pipeline.config.p4_device_config = config_json
        self.stub.SetForwardingPipelineConfig(pipeline)
        self.ids = {
            e.preamble.name: e.preamble.id
            for group in (info.tables, info.actions, info.registers, info.counters)
            for e in group
        }

    @staticmethod
    def _forever() -> Iterator[p4runtime_pb2.StreamMessageRequest]:
        while True:  # keeps the stream (and the primary role) open
            time.sleep(3600)
            yield p4runtime_pb2.StreamMessageRequest()

    def write(self, *entities: p4runtime_pb2.Entity) -> None:
        request = p4runtime_pb2.WriteRequest(device_id=0, election_id=self.election)
        for entity in entities:
            update = request.updates.add(type=p4runtime_pb2.Update.INSERT)
            update.entity.CopyFrom(entity)
        self.stub.Write(request)

    def modify(self, entity: p4runtime_pb2.Entity) -> None:
        request = p4runtime_pb2.WriteRequest(device_id=0, election_id=self.election)
        request.updates.add(type=p4runtime_pb2.Update.MODIFY).entity.CopyFrom(entity)
        self.stub.Write(request)

    def read(self, entity: p4runtime_pb2.Entity) -> list[p4runtime_pb2.Entity]:
        request = p4runtime_pb2.ReadRequest(device_id=0, entities=[entity])
        return [e for answer in self.stub.Read(request) for e in answer.entities]

    def entry(
        self, table: str, keys: list[int], action: str, params: list[int]
    ) -> p4runtime_pb2.Entity:
        entity = p4runtime_pb2.Entity()
        entry = entity.table_entry
        entry.table_id = self.ids[table]
        for fid, value in enumerate(keys, start=1):
            entry.match.add(field_id=fid).exact.value = _bytes(value)
        entry.action.action.action_id = self.ids[action]
        for pid, value in enumerate(params, start=1):
            entry.action.action.params.add(param_id=pid, value=_bytes(value))
        return entity

    def register(self, name: str, index: int, value: int | None = None) -> int:
        entity = p4runtime_pb2.Entity()
        entity.register_entry.register_id = self.ids[name]
        entity.register_entry.index.index = index
        if value is not None:
            entity.register_entry.data.bitstring = _bytes(value)
            self.modify(entity)
            return value
        (got,) = self.read(entity)
        return int.from_bytes(got.register_entry.data.bitstring, "big")

    def counter(self, name: str, index: int) -> int:
        entity = p4runtime_pb2.Entity()
        entity.counter_entry.counter_id = self.ids[name]
        entity.counter_entry.index.index = index
        (got,) = self.read(entity)
        return got.counter_entry.data.packet_count


def _bytes(value: int) -> bytes:
    # P4Runtime's canonical form: the shortest big-endian string (at least one byte).
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


# ---------------------------------------------------------------------------- fixtures


@functools.cache
def _compiled(aggregators: int) -> tuple[p4info_pb2.P4Info, bytes]:
    """p4c's P4Info and BMv2 JSON for a pool of `aggregators` (a vector's own sizing)."""
    out = Path(tempfile.mkdtemp(prefix="inasched-p4c-"))
    info_path = out / "inasched.p4info.txtpb"
    subprocess.run(
        ["p4c", "--target", "bmv2", "--arch", "v1model", f"-DAGGREGATORS={aggregators}",
         "--p4runtime-files", str(info_path), "-o", str(out), str(build.P4_MAIN)],
        check=True,
    )  # fmt: skip
    info = text_format.Parse(info_path.read_text(), p4info_pb2.P4Info())
    return info, (out / "inasched.json").read_bytes()


@contextlib.contextmanager
def _testbed(ports: list[int], tmp: Path) -> Iterator[dict[int, socket.socket]]:
    """veth pairs and namespaces for `ports`, BMv2 on them; yields port -> host raw socket."""
    made: list[int] = []
    switch: subprocess.Popen[bytes] | None = None
    sockets: dict[int, socket.socket] = {}
    try:
        for port in ports:
            ns, sw_end, host_end = f"inav{port}", f"inas{port}", f"inah{port}"
            _ip("netns", "add", ns)
            made.append(port)
            _ip("link", "add", sw_end, "type", "veth", "peer", "name", host_end)
            _ip("link", "set", host_end, "netns", ns)
            _ip("link", "set", sw_end, "up")
            _ip("-n", ns, "link", "set", host_end, "up")
            with _in_netns(ns):
                sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
                sock.bind((host_end, 0))
                sock.setblocking(False)
            sockets[port] = sock
        args = ["simple_switch_grpc", "--no-p4", "--log-file", str(tmp / "bmv2")]
        for port in ports:
            args += ["-i", f"{port}@inas{port}"]
        args += ["--", "--grpc-server-addr", GRPC_ADDR]
        switch = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        yield sockets
    finally:
        for sock in sockets.values():
            sock.close()
        if switch is not None:
            switch.terminate()
            switch.wait(timeout=10)
        for port in made:
            subprocess.run(["ip", "link", "del", f"inas{port}"], capture_output=True)
            subprocess.run(["ip", "netns", "del", f"inav{port}"], capture_output=True)


def _program(sw: Switch, jobs: dict[int, dict[str, Any]]) -> None:
    policies = {"static": 0, "atp": 1, "esa": 2}
    entities = []
    for job_id, job in jobs.items():
        ps_port = job["ps_port"]
        entities.append(sw.entry(
            "job_table", [job_id], "set_job",
            [policies[job["policy"]], job["fan_in"], job.get("part_base", 0),
             job.get("part_size", 0), job["mcast_group"], ps_port],
        ))  # fmt: skip
        members = {int(w): p for w, p in job["workers"].items()} | {PS_WORKER_ID: ps_port}
        for worker, port in members.items():
            host, udp = _host_addr(port, worker)
            entities.append(sw.entry(
                "worker_table", [job_id, worker, _ipv4(host), udp], "allow_source", [port],
            ))  # fmt: skip
        group = p4runtime_pb2.Entity()
        mcast = group.packet_replication_engine_entry.multicast_group_entry
        mcast.multicast_group_id = job["mcast_group"]
        for worker, port in sorted((int(w), p) for w, p in job["workers"].items()):
            mcast.replicas.add(egress_port=port, instance=worker + 1)
        entities.append(group)
    endpoints = {}
    for job in jobs.values():
        endpoints[job["ps_port"]] = _host_addr(job["ps_port"], PS_WORKER_ID)
        for worker, port in job["workers"].items():
            endpoints[port] = _host_addr(port, int(worker))
    for port, (host, udp) in endpoints.items():
        entities.append(sw.entry(
            "port_table", [port], "set_endpoint", [_ipv4(host), udp]
        ))  # fmt: skip
    clone = p4runtime_pb2.Entity()
    session = clone.packet_replication_engine_entry.clone_session_entry
    session.session_id = SIZING["CLONE_SESSION"]
    session.replicas.add(egress_port=min(endpoints), instance=0)
    entities.append(clone)
    sw.write(*entities)
    for job_id, job in jobs.items():
        sw.register("job_priority", job_id, job.get("priority", 0))


def _ipv4(host: str) -> int:
    return int.from_bytes(socket.inet_aton(host), "big")


def _drain(sockets: dict[int, socket.socket]) -> list[tuple[int, tuple[str, int], bytes]]:
    got = []
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        for port, sock in sockets.items():
            with contextlib.suppress(BlockingIOError):
                while True:
                    frame, meta = sock.recvfrom(65535)
                    if meta[2] == socket.PACKET_OUTGOING:
                        continue
                    parsed = _payload(frame)
                    if parsed is not None:
                        got.append((port, *parsed))
        time.sleep(0.01)
    return got


def _expected_field(name: str, value: Any) -> Any:
    if name == "kind" and isinstance(value, str):
        return int(Kind[value.upper()])
    if name == "flags" and isinstance(value, list):
        return int(sum(Flag[f.upper()] for f in value))
    return value


def _matches(pkt: Packet, fields: dict[str, Any], k: int) -> bool:
    for name, value in fields.items():
        if name == "to":
            continue
        if name == "lanes":
            want = np.zeros(k, dtype=pkt.lanes.dtype)
            want[: len(value)] = value
            if not np.array_equal(pkt.lanes, want):
                return False
        elif int(getattr(pkt, name)) != _expected_field(name, value):
            return False
    return True


# ---------------------------------------------------------------------------- the test


@pytest.mark.parametrize("path", VECTORS, ids=[p.stem for p in VECTORS])
def test_vector_on_bmv2(path: Path, tmp_path: Path) -> None:
    vector = json.loads(path.read_text())
    k = vector["lanes"]
    if k != SIZING["LANES"]:
        pytest.skip(f"vector sized for {k} lanes, this build has {SIZING['LANES']}")
    compiled = _compiled(vector["aggregators"])
    jobs = {job["job"]: job for job in vector["jobs"]}
    ports = sorted({j["ps_port"] for j in jobs.values()}
                   | {p for j in jobs.values() for p in j["workers"].values()})  # fmt: skip
    widths = {r.preamble.name: r.type_spec.bitstring.bit.bitwidth for r in compiled[0].registers}
    groups = {j["mcast_group"]: sorted(j["workers"].values()) for j in jobs.values()}
    with _testbed(ports, tmp_path) as sockets:
        sw = Switch(*compiled)
        _program(sw, jobs)
        for n, step in enumerate(vector["steps"]):
            where = f"{path.name} step {n} ({step.get('case', '')})"
            if "set_priority" in step:
                change = step["set_priority"]
                sw.register("job_priority", change["job"], change["level"])
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
                src = _host_addr(port, worker)
            expect = step.get("expect", {})
            drop = expect.get("drop")
            before = sw.counter("drop_reason", DropReason[drop.upper()]) if drop else 0
            outcome = expect.get("outcome")
            job_id = int(origin.split("/")[0]) if origin != "stranger" else None
            counted = COUNTERS[Outcome(outcome)] if outcome and job_id is not None else ()
            counts = {name: sw.counter(name, job_id) for name in counted}

            sockets[port].send(_frame(_packet(send, jobs, k), src))
            received = _drain(sockets)

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
                    (i for i, (p, pkt) in enumerate(left) if p == target and _matches(pkt, out, k)),
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
