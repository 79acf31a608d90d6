"""The BMv2 vector runner's parts: frames, the P4Runtime connection, the testbed, and what a
vector step expects. ``test_bmv2_vectors.py`` drives them against ``simple_switch_grpc``;
``test_bmv2_runner.py`` tests them without BMv2, so a runner that cannot start fails in CI
rather than on the one machine that has the toolchain.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import socket
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc
from p4ctl import build
from p4ctl.protocol import PS_WORKER_ID, Flag, Kind, Packet, encode
from p4ctl.register_access import RegisterAccess, ThriftRegisters
from p4ctl.rule import COUNTERS, Outcome

SIZING = build.read_sizing()
SWITCH_ADDR = "10.77.255.1"
# The switch's MAC, a static neighbour of every host (the program answers no ARP).
SWITCH_MAC = "02:00:00:00:00:fe"
GRPC_ADDR = "127.0.0.1:29559"
# BMv2's own Thrift runtime: PI's P4Runtime server refuses register reads and writes.
THRIFT_PORT = 29090
THRIFT_ADDR = f"127.0.0.1:{THRIFT_PORT}"
POLICIES = {"static": 0, "atp": 1, "esa": 2}
SETTLE_S = 0.4  # BMv2 forwards in well under this; recirculated packets included
# The vectors' outcome for a packet a check of PROTOCOL.md section 4 drops: no case of the rule
# ran, so it has no `Outcome` member (p4/vectors/README.md).
DROPPED = "dropped"

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


def host_addr(port: int, worker: int) -> tuple[str, int]:
    return f"10.77.{port // 250}.{port % 250 + 1}", 40000 + worker


# ---------------------------------------------------------------------------- frames


def _checksum(data: bytes) -> int:
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def frame(payload: bytes, src: tuple[str, int]) -> bytes:
    udp = struct.pack("!HHHH", src[1], SIZING["AGG_UDP_PORT"], 8 + len(payload), 0) + payload
    ip = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0,
        socket.inet_aton(src[0]), socket.inet_aton(SWITCH_ADDR),
    )  # fmt: skip
    ip = ip[:10] + struct.pack("!H", _checksum(ip)) + ip[12:]
    return b"\x02\x00\x00\x00\x00\x01" + b"\x02\x00\x00\x00\x00\x02" + b"\x08\x00" + ip + udp


def udp_payload(frame: bytes) -> tuple[tuple[str, int], bytes] | None:
    """(UDP destination, payload) of an IPv4/UDP frame, None for anything else."""
    if len(frame) < 42 or frame[12:14] != b"\x08\x00" or frame[23] != 17:
        return None
    dst = socket.inet_ntoa(frame[30:34]), struct.unpack("!H", frame[36:38])[0]
    return dst, frame[42:]


def datagram(send: dict[str, Any], jobs: dict[int, dict[str, Any]], k: int) -> bytes:
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


def request_stream(
    first: p4runtime_pb2.StreamMessageRequest,
    rest: Iterator[p4runtime_pb2.StreamMessageRequest],
) -> Iterator[p4runtime_pb2.StreamMessageRequest]:
    """`first` (the arbitration), then `rest` as gRPC asks for it: `rest` may never end, so
    it must not be taken before `first` is sent."""
    yield first
    yield from rest


def counted(outcome: str | None) -> tuple[str, ...]:
    """The per-job counters a step with expected `outcome` bumps for the sender's job.

    A rule `Outcome` bumps its `COUNTERS`; ``dropped`` (a check dropped the packet, no case of
    the rule ran) bumps none of them, as the Python replay (``tests/p4ctl/test_vectors.py``)
    takes it: its ``drop_reason`` is the step's ``drop``, checked on its own. A step with no
    outcome counts nothing. Any other string is a mistake in the vector: ValueError.
    """
    if outcome is None or outcome == DROPPED:
        return ()
    try:
        return COUNTERS[Outcome(outcome)]
    except ValueError:
        known = sorted([DROPPED, *(o.value for o in Outcome)])
        raise ValueError(f"vector outcome {outcome!r} is none of {known}") from None


class Switch:
    """One P4Runtime connection to simple_switch_grpc, as primary controller.

    Tables, groups, the clone session and the jobs' priorities (``job_table`` data) are
    written over P4Runtime, counters read over it. Registers go over P4Runtime where the
    target serves them (the soft switch), else over BMv2's Thrift runtime at `thrift`, as
    `p4ctl.client.SwitchClient` chooses (`registers`).
    """

    def __init__(
        self,
        info: p4info_pb2.P4Info,
        config_json: bytes,
        address: str = GRPC_ADDR,
        thrift: str = THRIFT_ADDR,
    ) -> None:
        self.info = info
        self.channel = grpc.insecure_channel(address)
        grpc.channel_ready_future(self.channel).result(timeout=10)
        self.stub = p4runtime_pb2_grpc.P4RuntimeStub(self.channel)
        self.election = p4runtime_pb2.Uint128(high=0, low=1)
        arbitration = p4runtime_pb2.StreamMessageRequest()
        arbitration.arbitration.device_id = 0
        arbitration.arbitration.election_id.CopyFrom(self.election)
        # The stream (and with it the primary role) stays open until close().
        self._closed = threading.Event()
        self.stream = self.stub.StreamChannel(request_stream(arbitration, self._held_open()))
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
        self.sizes = {r.preamble.name: r.size for r in info.registers}
        self.registers: RegisterAccess = self
        probe = p4runtime_pb2.Entity()
        probe.register_entry.register_id = self.ids["agg_state"]
        probe.register_entry.index.index = 0
        try:
            self.read(probe)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise
            self.registers = ThriftRegisters(thrift, self.sizes)

    def _held_open(self) -> Iterator[p4runtime_pb2.StreamMessageRequest]:
        """Sends nothing; ends the stream when the switch is closed."""
        self._closed.wait()
        yield from ()

    def close(self) -> None:
        if isinstance(self.registers, ThriftRegisters):
            self.registers.close()
        self._closed.set()
        self.channel.close()

    def __enter__(self) -> Switch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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

    def job_entry(self, job_id: int, job: dict[str, Any]) -> p4runtime_pb2.Entity:
        """The ``job_table`` entry of a vector's job, its priority one of the parameters."""
        params = [POLICIES[job["policy"]], job["fan_in"], job.get("part_base", 0),
                  job.get("part_size", 0), job["mcast_group"], job["ps_port"],
                  job.get("priority", 0)]  # fmt: skip
        return self.entry("job_table", [job_id], "set_job", params)

    def set_priority(self, job_id: int, job: dict[str, Any], level: int) -> None:
        """A vector's ``set_priority`` step: MODIFY the job's entry, as the scheduler does."""
        job["priority"] = level
        self.modify(self.job_entry(job_id, job))

    def register(self, name: str, index: int) -> int:
        """One cell of register `name`, read through `registers`."""
        return self.registers.read_all(name)[index]

    def read_all(self, name: str) -> list[int]:
        """`RegisterAccess` over P4Runtime: one wildcard read of the array."""
        entity = p4runtime_pb2.Entity()
        entity.register_entry.register_id = self.ids[name]
        values = [0] * self.sizes[name]
        for got in self.read(entity):
            cell = got.register_entry
            values[cell.index.index] = int.from_bytes(cell.data.bitstring, "big")
        return values

    def write_cells(self, cells: list[tuple[str, int, int]]) -> None:
        """`RegisterAccess` over P4Runtime: one MODIFY per cell."""
        for name, index, value in cells:
            entity = p4runtime_pb2.Entity()
            entity.register_entry.register_id = self.ids[name]
            entity.register_entry.index.index = index
            entity.register_entry.data.bitstring = _bytes(value)
            self.modify(entity)

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
def compiled(aggregators: int) -> tuple[p4info_pb2.P4Info, bytes]:
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
def testbed(ports: list[int], tmp: Path) -> Iterator[dict[int, socket.socket]]:
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
        args += ["--thrift-port", str(THRIFT_PORT)]
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


@contextlib.contextmanager
def wired(hosts: dict[int, str], switch_addr: str, prefix: str) -> Iterator[list[str]]:
    """A veth pair per endpoint, all in this namespace (``p4/README.md``, Running on BMv2): port
    `p`'s switch end ``{prefix}s{p}``, its host end ``{prefix}h{p}`` holding ``hosts[p]``, from
    where a policy route sends what that address sends to `switch_addr` (a static neighbour:
    the program answers no ARP). So each packet enters BMv2 once, on its sender's port. Yields
    the switch ends."""
    made: list[int] = []
    try:
        for port, host in sorted(hosts.items()):
            sw_end, host_end, table = f"{prefix}s{port}", f"{prefix}h{port}", str(100 + port)
            _ip("link", "add", sw_end, "type", "veth", "peer", "name", host_end)
            made.append(port)
            for end in (sw_end, host_end):
                # No IPv6 chatter (router solicitations) into the switch.
                subprocess.run(
                    ["sysctl", "-qw", f"net.ipv6.conf.{end}.disable_ipv6=1"], capture_output=True
                )
                _ip("link", "set", end, "up")
            _ip("addr", "add", f"{host}/32", "dev", host_end)
            _ip("rule", "add", "from", host, "lookup", table)
            _ip("route", "add", f"{switch_addr}/32", "dev", host_end, "src", host, "table", table)
            _ip("neigh", "replace", switch_addr, "lladdr", SWITCH_MAC, "dev", host_end,
                "nud", "permanent")  # fmt: skip
        yield [f"{prefix}s{port}" for port in sorted(hosts)]
    finally:
        for port in made:
            subprocess.run(["ip", "link", "del", f"{prefix}s{port}"], capture_output=True)
            subprocess.run(
                ["ip", "rule", "del", "from", hosts[port], "lookup", str(100 + port)],
                capture_output=True,
            )


@contextlib.contextmanager
def simple_switch(
    ports: dict[int, str], grpc_addr: str = GRPC_ADDR, thrift_port: int = THRIFT_PORT
) -> Iterator[subprocess.Popen[bytes]]:
    """``simple_switch_grpc --no-p4`` on `ports` (port -> interface), with its Thrift runtime
    and no log (a log line per packet would slow it down several times)."""
    args = ["simple_switch_grpc", "--no-p4", "--thrift-port", str(thrift_port)]
    for port, interface in sorted(ports.items()):
        args += ["-i", f"{port}@{interface}"]
    args += ["--", "--grpc-server-addr", grpc_addr]
    switch = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield switch
    finally:
        switch.terminate()
        switch.wait(timeout=10)


def program(sw: Switch, jobs: dict[int, dict[str, Any]]) -> None:
    entities = []
    for job_id, job in jobs.items():
        ps_port = job["ps_port"]
        entities.append(sw.job_entry(job_id, job))
        members = {int(w): p for w, p in job["workers"].items()} | {PS_WORKER_ID: ps_port}
        for worker, port in members.items():
            host, udp = host_addr(port, worker)
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
        endpoints[job["ps_port"]] = host_addr(job["ps_port"], PS_WORKER_ID)
        for worker, port in job["workers"].items():
            endpoints[port] = host_addr(port, int(worker))
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


def _ipv4(host: str) -> int:
    return int.from_bytes(socket.inet_aton(host), "big")


def drain(sockets: dict[int, socket.socket]) -> list[tuple[int, tuple[str, int], bytes]]:
    got = []
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        for port, sock in sockets.items():
            with contextlib.suppress(BlockingIOError):
                while True:
                    frame, meta = sock.recvfrom(65535)
                    if meta[2] == socket.PACKET_OUTGOING:
                        continue
                    parsed = udp_payload(frame)
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


def matches(pkt: Packet, fields: dict[str, Any], k: int) -> bool:
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
