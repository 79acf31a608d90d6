"""The BMv2 vector runner's parts (``bmv2_runner.py``), without BMv2: the request stream, the
reading of a vector's outcomes, the frames it sends and reads, and its P4Runtime connection
against the soft switch, which serves the same P4Runtime calls. ``test_bmv2_vectors.py`` is
skipped where BMv2 is absent; these are not, so a runner that cannot start fails here.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator

import pytest
from p4.v1 import p4runtime_pb2
from p4ctl import build
from p4ctl.p4info import Sizing, build_p4info
from p4ctl.protocol import Flag, Kind, decode
from p4ctl.rule import COUNTERS, Outcome
from p4ctl.softswitch import SoftSwitch

from . import bmv2_runner as runner

VECTORS = sorted((build.P4_DIR / "vectors").glob("*.json"))
# More than any stream needs before its first message is sent; an eager runner takes them all.
EAGER_LIMIT = 1000


def _vector_outcomes() -> set[str | None]:
    return {
        step.get("expect", {}).get("outcome")
        for path in VECTORS
        for step in json.loads(path.read_text())["steps"]
        if "send" in step
    }


# ---------------------------------------------------------------------------- request stream


def test_request_stream_yields_the_arbitration_before_taking_anything_else() -> None:
    taken = []

    def endless() -> Iterator[p4runtime_pb2.StreamMessageRequest]:
        for n in itertools.count():
            assert n < EAGER_LIMIT, "the stream was expanded before its first message was sent"
            taken.append(n)
            yield p4runtime_pb2.StreamMessageRequest()

    arbitration = p4runtime_pb2.StreamMessageRequest()
    arbitration.arbitration.device_id = 7
    stream = runner.request_stream(arbitration, endless())
    assert next(stream) is arbitration
    assert taken == []
    next(stream)
    assert taken == [0]


# ---------------------------------------------------------------------------- outcomes


def test_every_outcome_in_the_vectors_maps_to_the_counters_it_bumps() -> None:
    outcomes = _vector_outcomes()
    assert runner.DROPPED in outcomes
    for outcome in outcomes:
        counted = runner.counted(outcome)
        if outcome in (None, runner.DROPPED):
            assert counted == ()
        else:
            assert counted == COUNTERS[Outcome(outcome)]


def test_a_dropped_step_counts_no_rule_counter() -> None:
    # drop_reason is the step's `drop`, checked on its own; no case of the rule ran.
    assert runner.counted("dropped") == ()
    assert runner.counted("stale") == ("job_dropped",)


def test_an_outcome_no_vector_may_use_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match="'droped' is none of .*'dropped'"):
        runner.counted("droped")


# ---------------------------------------------------------------------------- frames


def test_a_step_leaves_as_an_ipv4_udp_frame_to_the_switch_that_decodes_to_its_packet() -> None:
    jobs = {1: {"job": 1, "fan_in": 2}}
    send = {"from": "1/1", "packet": {"seq": 5, "agg_index": 3, "flags": ["resend"], "lanes": [9]}}
    src = runner.host_addr(2, 1)
    parsed = runner.udp_payload(runner.frame(runner.datagram(send, jobs, 4), src))
    assert parsed is not None
    dst, data = parsed
    assert dst == (runner.SWITCH_ADDR, runner.SIZING["AGG_UDP_PORT"])
    pkt = decode(data, 4)
    assert (pkt.kind, pkt.job, pkt.worker, pkt.fan_in, pkt.bitmap) == (Kind.GRADIENT, 1, 1, 2, 2)
    assert (pkt.seq, pkt.agg_index, pkt.flags) == (5, 3, Flag.RESEND)
    assert runner.matches(pkt, {"to": {"port": 2}, "kind": "gradient", "lanes": [9]}, 4)
    assert not runner.matches(pkt, {"flags": ["resend", "bypassed"]}, 4)


def test_frames_that_are_not_ipv4_udp_are_ignored() -> None:
    assert runner.udp_payload(b"\x00" * 60) is None


# ---------------------------------------------------------------------------- P4Runtime


def test_switch_connection_takes_the_primary_role_programs_and_reads_back(
    soft_switch: SoftSwitch,
) -> None:
    # The soft switch serves the P4Runtime calls the runner makes of simple_switch_grpc; its
    # P4Info is the committed one for its own sizing, where p4c's is the compiled program's.
    vector = json.loads((build.P4_DIR / "vectors" / "atp.json").read_text())
    jobs = {job["job"]: job for job in vector["jobs"]}
    info = build_p4info(Sizing(soft_switch.aggregators, soft_switch.lanes))
    with runner.Switch(info, b"", address=soft_switch.p4runtime_address) as sw:
        assert sw.registers is sw
        runner.program(sw, jobs)
        job = next(iter(jobs))
        pipe = soft_switch.pipeline
        assert pipe.jobs[job].priority == jobs[job].get("priority", 0)
        sw.set_priority(job, jobs[job], 3)
        assert pipe.jobs[job].priority == 3
        sw.registers.write_cells([("agg_seq", 2, 77)])
        assert sw.register("agg_seq", 2) == 77
        assert sw.counter("job_aggregated", job) == 0


def test_switch_connection_reads_registers_over_thrift_where_p4runtime_refuses_them() -> None:
    # As simple_switch_grpc: PI refuses RegisterEntry, BMv2's Thrift runtime serves registers.
    pytest.importorskip("bm_runtime.standard")
    vector = json.loads((build.P4_DIR / "vectors" / "esa.json").read_text())
    jobs = {job["job"]: job for job in vector["jobs"]}
    refusing = SoftSwitch(aggregators=64, lanes=64, serve_registers=False, thrift=("127.0.0.1", 0))
    with refusing:
        info = build_p4info(Sizing(refusing.aggregators, refusing.lanes))
        with runner.Switch(
            info, b"", address=refusing.p4runtime_address, thrift=refusing.thrift_address
        ) as sw:
            assert sw.registers is not sw
            runner.program(sw, jobs)
            job = next(iter(jobs))
            sw.set_priority(job, jobs[job], 9)
            assert refusing.pipeline.jobs[job].priority == 9
            refusing.pipeline.registers.agg_exponent[3] = -2
            assert sw.register("agg_exponent", 3) == 0xFE
