"""The packet test vectors of ``p4/vectors/``, replayed against the rule and the soft switch."""

from __future__ import annotations

import socket
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from p4.v1 import p4runtime_pb2 as p4rt
from p4ctl.client import set_job_params
from p4ctl.client_codec import P4Names, addr_int
from p4ctl.p4info import Sizing, build_p4info
from p4ctl.protocol import (
    PS_WORKER_ID,
    DropReason,
    Kind,
    MalformedPacket,
    Packet,
    Policy,
    decode,
    encode,
)
from p4ctl.rule import JobConfig, Registers, ToGroup, check, process, source_check, static_index
from p4ctl.softswitch import SoftSwitch
from p4runtime_sh.p4runtime import P4RuntimeClient

from .vectors import (
    Vector,
    aggregator_state,
    all_vectors,
    check_aggregators,
    datagram,
    expected_fields,
    flooded,
    ingress_port,
    matches,
    packet_fields,
    sender,
    sender_port,
    with_priority,
)

VECTORS = all_vectors()
RECV_TIMEOUT_S = 10.0  # a safety net for a lost datagram, never a measurement
# Lanes read back over P4Runtime after each step (the vectors use the first two; the rule replay
# checks all k): the pure-Python protobuf runtime makes a full read cost ~0.3 s per step.
CHECKED_LANES = 4


def test_vectors_cover_every_case_of_every_policy() -> None:
    covered = {(v.name, s["expect"]["outcome"]) for v in VECTORS for s in v.steps if "send" in s}
    for policy in ("static", "atp", "esa"):
        for outcome in (
            "claimed",
            "completed",
            "duplicate",
            "flushed",
            "raw_bypass",
            "resend_to_ps",
            "ps_result",
        ):
            assert (policy, outcome) in covered, (policy, outcome)
    assert {
        ("atp", "collision"),
        ("esa", "collision"),
        ("esa", "preempted"),
        ("static", "result_resent"),
        ("static", "stale"),
        ("atp", "aggregated"),
    } <= covered
    dropped = {s["expect"].get("drop") for v in VECTORS for s in v.steps if "send" in s}
    assert {r.name.lower() for r in DropReason} - dropped == {"injected_loss"}


def test_two_level_vectors_cover_up_and_down_in_every_policy() -> None:
    (vector,) = [v for v in VECTORS if v.name == "two_level"]
    assert vector.not_in_p4  # the BMv2 replay skips it until the P4 program has section 7
    seen = set()
    for step in vector.steps:
        cfg = vector.jobs.get(sender(step)[0])
        level = "tor" if cfg.up_port is not None else "spine"
        seen.add((cfg.policy.name.lower(), level, step["expect"]["outcome"]))
    assert {
        ("static", "tor", "completed"),
        ("atp", "tor", "completed"),
        ("esa", "tor", "completed"),
        ("static", "tor", "resend_up"),
        ("static", "tor", "parent_result"),
        ("static", "spine", "result_resent"),
        ("esa", "tor", "parent_result"),
        ("esa", "spine", "preempted"),  # job 4 (one level) evicts a ToR's and a spine's
        ("esa", "spine", "duplicate"),
        ("esa", "spine", "completed"),
        ("esa", "spine", "collision"),
        ("atp", "tor", "collision"),
        ("atp", "tor", "ps_result"),
    } <= seen
    ups = {tuple(o.get("flags", [])) for st in vector.steps for o in st["expect"]["out"]
           if o.get("kind") == "up"}  # fmt: skip
    assert {("evicted",), ("complete",), ("bypassed", "collision"), ("resend",)} <= ups


def test_vectors_drop_a_wrong_slot_inside_the_copy_the_shadow_bit_names() -> None:
    # The case only an exact (mask) index check catches: the copy and the shadow bit agree with
    # seq, the slot does not.
    found = []
    for vector in VECTORS:
        for step in vector.steps:
            origin = sender(step) if "send" in step else None
            cfg = vector.jobs.get(origin[0]) if origin else None
            if cfg is None or cfg.policy != Policy.STATIC:
                continue
            spec = step["send"]["packet"]
            seq, index, shadow = spec.get("seq", 0), spec.get("agg_index", 0), spec.get("shadow", 0)
            right_index, right_shadow = static_index(cfg, seq)
            copy = cfg.part_base + shadow * cfg.part_size
            in_named_copy = copy <= index < copy + cfg.part_size
            if shadow == right_shadow and in_named_copy and index != right_index:
                assert step["expect"].get("drop") == "bad_agg_index", step["case"]
                found.append(step["case"])
    assert found


# ---------------------------------------------------------------------------- against the rule


@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: v.name)
def test_rule_replays_vector(vector: Vector) -> None:
    regs = Registers(vector.aggregators, vector.lanes)
    for step in vector.steps:
        if "set_priority" in step:
            vector = with_priority(vector, step["set_priority"])
            continue
        before = [aggregator_state(regs, i) for i in range(vector.aggregators)]
        outcome, outputs = _rule_step(vector, regs, step)
        expect = step["expect"]
        assert outcome == (expect["outcome"], expect.get("drop")), step["case"]
        assert len(outputs) == len(expect["out"]), f"{step['case']}: {outputs}"
        for (dest, got), want in zip(outputs, expect["out"], strict=True):
            assert dest == want["to"], step["case"]
            assert matches(got, expected_fields(want, vector.lanes)), (step["case"], got, want)
        after = [aggregator_state(regs, i) for i in range(vector.aggregators)]
        check_aggregators(before, after, step, vector.lanes)


def _rule_step(
    vector: Vector, regs: Registers, step: dict[str, Any]
) -> tuple[tuple[str, str | None], list[tuple[dict[str, int], dict[str, Any]]]]:
    try:
        pkt = decode(datagram(vector, step), vector.lanes)
    except MalformedPacket as exc:
        return ("dropped", exc.reason.name.lower()), []
    cfg = vector.jobs.get(pkt.job)
    if cfg is None:
        return ("dropped", "unknown_job"), []
    # The worker table: a source is registered for exactly its own (job, worker), at its port.
    origin = sender(step)
    # A RESULT at a job with a parent is from the parent, registered as worker 255.
    key = PS_WORKER_ID if pkt.kind == Kind.RESULT and cfg.up_port is not None else pkt.worker
    entry_port = sender_port(vector, step) if origin == (pkt.job, key) else None
    port = ingress_port(vector, step)
    reason = source_check(entry_port, -1 if port is None else port)
    if reason is not None:
        return ("dropped", reason.name.lower()), []
    reason = check(pkt, cfg, vector.aggregators)
    if reason is not None:
        return ("dropped", reason.name.lower()), []
    assert entry_port is not None
    verdict = process(regs, pkt, vector.jobs, entry_port)
    drop = verdict.drop.name.lower() if verdict.drop is not None else None
    outs = [
        (
            {"group": o.group} if isinstance(o, ToGroup) else {"port": o.port},
            packet_fields(o.packet, vector.lanes),
        )
        for o in verdict.outputs
    ]
    return (verdict.outcome.value, drop), outs


# ---------------------------------------------------------------------------- over UDP

PROBE_JOB, PROBE_PORT, PROBE_GROUP = 1000, 500, 1001


class Harness:
    """A soft switch programmed over P4Runtime exactly as a vector says, one UDP socket per
    switch port, and a probe job whose result marks the end of each step's outputs."""

    def __init__(self, switch: SoftSwitch, vector: Vector) -> None:
        self.switch, self.vector = switch, vector
        self.info = build_p4info(Sizing(switch.aggregators, switch.lanes))
        self.names = P4Names(self.info)
        self.shell = P4RuntimeClient(0, switch.p4runtime_address, (0, 1))
        self.sockets: dict[int, socket.socket] = {}
        # A flooded copy (a step whose packet enters on another port): UDP has no ports, so it
        # comes from a socket of its own, registered for its sender at the sender's port.
        self.flood: dict[tuple[int, int], socket.socket] = {}
        self.probe_seq = 0

    def close(self) -> None:
        self.shell.tear_down()
        for sock in [*self.sockets.values(), *self.flood.values()]:
            sock.close()

    def _socket(self, port: int) -> socket.socket:
        if port not in self.sockets:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind(("127.0.0.1", 0))
            self.sockets[port] = sock
        return self.sockets[port]

    def write(self, entities: list[p4rt.Entity], op: int = p4rt.Update.INSERT) -> None:
        request = p4rt.WriteRequest(device_id=0)
        request.election_id.low = 1
        for entity in entities:
            request.updates.add(type=op, entity=entity)
        self.shell.write(request)

    def program(self) -> None:
        request = p4rt.SetForwardingPipelineConfigRequest(
            device_id=0, action=p4rt.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
        )
        request.election_id.low = 1
        request.config.p4info.CopyFrom(self.info)
        self.shell.stub.SetForwardingPipelineConfig(request)
        n = self.names
        jobs = dict(self.vector.jobs)
        workers = dict(self.vector.workers)
        entities = []
        for (job, worker), port in [*workers.items(), ((PROBE_JOB, PS_WORKER_ID), PROBE_PORT)]:
            host, udp_port = self._socket(port).getsockname()
            entities.append(
                n.table_entry(
                    "port_table",
                    {"egress_port": port},
                    "set_endpoint",
                    {"addr": addr_int(host), "udp_port": udp_port},
                )
            )
            match = {"job": job, "worker": worker, "src_addr": addr_int(host), "src_port": udp_port}
            entities.append(n.table_entry("worker_table", match, "allow_source", {"port": port}))
        for step in self.vector.steps:
            origin = sender(step) if "send" in step else None
            if origin is None or not flooded(self.vector, step) or origin in self.flood:
                continue
            sock = self.flood[origin] = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind(("127.0.0.1", 0))
            host, udp_port = sock.getsockname()
            match = {"job": origin[0], "worker": origin[1]}
            match |= {"src_addr": addr_int(host), "src_port": udp_port}
            entities.append(
                n.table_entry("worker_table", match, "allow_source", {"port": workers[origin]})
            )
        probe = JobConfig(PROBE_JOB, Policy.STATIC, 1, 0, 1, PROBE_GROUP, PROBE_PORT)
        for cfg in (probe, *jobs.values()):
            entities.append(
                n.table_entry("job_table", {"job": cfg.job_id}, "set_job", set_job_params(cfg))
            )
        groups = {PROBE_GROUP: [PROBE_PORT]}
        for cfg in jobs.values():
            groups[cfg.mcast_group] = sorted(
                p for (j, w), p in workers.items() if j == cfg.job_id and w < cfg.fan_in
            )
        for gid, ports in groups.items():
            entity = p4rt.Entity()
            group = entity.packet_replication_engine_entry.multicast_group_entry
            group.multicast_group_id = gid
            for port in ports:
                group.replicas.add(egress_port=port)
            entities.append(entity)
        self.write(entities)

    def set_priority(self, job: int, level: int) -> None:
        """MODIFY the job's ``job_table`` entry: the priority is one of its parameters."""
        self.vector = with_priority(self.vector, {"job": job, "level": level})
        cfg = self.vector.jobs[job]
        entry = self.names.table_entry("job_table", {"job": job}, "set_job", set_job_params(cfg))
        self.write([entry], p4rt.Update.MODIFY)

    def send(self, step: dict[str, Any]) -> dict[int, list[bytes]]:
        """Send the step's datagram, then the probe; returns what each port received."""
        origin = sender(step)
        data = datagram(self.vector, step)
        if origin is None:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as stranger:
                stranger.sendto(data, self.switch.data_address)
        elif flooded(self.vector, step):
            self.flood[origin].sendto(data, self.switch.data_address)
        else:
            self._socket(self.vector.workers[origin]).sendto(data, self.switch.data_address)
        self._probe()
        received: dict[int, list[bytes]] = {}
        for port, sock in self.sockets.items():
            sock.setblocking(False)
            try:
                while True:
                    received.setdefault(port, []).append(sock.recv(4096))
            except BlockingIOError:
                pass
        return {p: r for p, r in received.items() if r}

    def _probe(self) -> None:
        # A PS_RESULT of a static job is only multicast: it touches no register.
        seq = self.probe_seq = self.probe_seq + 1
        pkt = Packet(
            kind=Kind.PS_RESULT,
            job=PROBE_JOB,
            worker=PS_WORKER_ID,
            fan_in=1,
            seq=seq,
            lanes=np.zeros(self.vector.lanes, dtype=np.int32),
        )
        probe = self.sockets[PROBE_PORT]
        probe.sendto(encode(pkt), self.switch.data_address)
        probe.setblocking(True)
        probe.settimeout(RECV_TIMEOUT_S)
        # Its result is sent after every output of the step's packet: one thread, in order.
        reply = decode(probe.recv(4096))
        assert reply.seq == seq

    def registers(self) -> list[dict[str, Any]]:
        """Every aggregator of the vector's range, read over P4Runtime."""
        request = p4rt.ReadRequest(device_id=0)
        names = [*Registers.SCALAR_ARRAYS, *(f"agg_lane_{i}" for i in range(CHECKED_LANES))]
        for name in names:
            request.entities.add().register_entry.register_id = self.names.register_id[name]
        values: dict[str, dict[int, int]] = {}
        by_id = {v: k for k, v in self.names.register_id.items()}
        for reply in self.shell.stub.Read(request):
            for entity in reply.entities:
                entry = entity.register_entry
                values.setdefault(by_id[entry.register_id], {})[entry.index.index] = int.from_bytes(
                    entry.data.bitstring, "big"
                )
        regs = Registers(self.vector.aggregators, CHECKED_LANES)
        for name in Registers.SCALAR_ARRAYS:
            cells = getattr(regs, name)
            for i in range(self.vector.aggregators):
                value = values[name][i]
                cells[i] = value - 256 if name == "agg_exponent" and value > 127 else value
        for lane in range(CHECKED_LANES):
            for i in range(self.vector.aggregators):
                value = values[f"agg_lane_{lane}"][i]
                regs.agg_lanes[i, lane] = value - (1 << 32) if value >> 31 else value
        return [aggregator_state(regs, i) for i in range(self.vector.aggregators)]

    def drop_counters(self) -> dict[str, int]:
        request = p4rt.ReadRequest(device_id=0)
        request.entities.add().counter_entry.counter_id = next(
            c.preamble.id for c in self.info.counters if c.preamble.name == "drop_reason"
        )
        counts = {}
        for reply in self.shell.stub.Read(request):
            for entity in reply.entities:
                entry = entity.counter_entry
                counts[DropReason(entry.index.index).name.lower()] = entry.data.packet_count
        return counts


# Two levels are installed over this P4Info's P4Runtime only as PROTOCOL.md 7.7 derives them
# (a switch started with a parent); tests/p4ctl/test_two_level_udp.py runs them over UDP.
@pytest.fixture(params=[v for v in VECTORS if not v.not_in_p4], ids=lambda v: v.name)
def harness(request: pytest.FixtureRequest, make_soft_switch: Any) -> Iterator[Harness]:
    vector: Vector = request.param
    switch = make_soft_switch(aggregators=vector.aggregators, lanes=vector.lanes)
    h = Harness(switch, vector)
    try:
        h.program()
        yield h
    finally:
        h.close()


def test_soft_switch_replays_vector_over_udp(harness: Harness) -> None:
    vector = harness.vector
    before = harness.registers()
    for step in vector.steps:
        if "set_priority" in step:
            harness.set_priority(step["set_priority"]["job"], step["set_priority"]["level"])
            continue
        received = harness.send(step)
        want: dict[int, list[dict[str, Any]]] = {}
        for out in step["expect"]["out"]:
            ports = (
                [out["to"]["port"]]
                if "port" in out["to"]
                else [
                    p
                    for (j, w), p in vector.workers.items()
                    if vector.jobs[j].mcast_group == out["to"]["group"]
                    and w < vector.jobs[j].fan_in
                ]
            )
            for port in ports:
                want.setdefault(port, []).append(expected_fields(out, vector.lanes))
        got = {
            p: [packet_fields(decode(d, vector.lanes), vector.lanes) for d in data]
            for p, data in received.items()
            if p != PROBE_PORT
        }
        assert sorted(got) == sorted(want), f"{step['case']}: ports {sorted(got)}"
        for port, packets in want.items():
            assert len(got[port]) == len(packets), step["case"]
            for g, w in zip(got[port], packets, strict=True):
                assert matches(g, w), (step["case"], g, w)
        after = harness.registers()
        check_aggregators(before, after, step, CHECKED_LANES)
        before = after
    drops = Counter(
        s["expect"]["drop"] for s in vector.steps if "send" in s and s["expect"].get("drop")
    )
    counted = harness.drop_counters()
    assert {r: n for r, n in counted.items() if n} == dict(drops)
