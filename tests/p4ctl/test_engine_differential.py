"""The compiled packet pass against the Python rule, byte for byte.

Two pipelines with the same tables, the engine's (`Pipeline`) and the rule's (`RulePipeline`),
take the same datagrams; every
datagram each emits (bytes and destination, in order), every register cell and every counter
must be equal after each packet. The vectors of ``p4/vectors/`` run first, then random
sequences of every policy (hypothesis), with resends, raw floats, odd exponents, strangers,
garbage and priority changes among them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from p4ctl.pipeline import Pipeline, RulePipeline
from p4ctl.protocol import PS_WORKER_ID, Flag, Kind, Packet, Policy, decode, encode
from p4ctl.rule import JobConfig, Registers, hashed_index, static_index

from .vectors import all_vectors, datagram, flooded, ingress_port, sender, sender_port

HOST = "127.0.0.1"
# UDP source ports of flooded copies (``FLOOD_PORT + port``) and of mis-wired senders.
FLOOD_PORT = 30000


def pair(aggregators: int, lanes: int) -> tuple[RulePipeline, Pipeline]:
    return RulePipeline(aggregators, lanes), Pipeline(aggregators, lanes)


def install(
    pipes: tuple[Pipeline | RulePipeline, ...], jobs: dict[int, JobConfig], ports: dict[Any, int]
) -> None:
    """Job table, worker table (worker w of job j sends from udp port `ports[(j, w)]`, its
    switch port is the same number), port table and one multicast group per job."""
    for pipe in pipes:
        for (job, worker), port in ports.items():
            pipe.sources[(job, worker, HOST, port)] = port
            pipe.endpoints[port] = (HOST, port)
        for job, cfg in jobs.items():
            pipe.jobs[job] = cfg
            pipe.groups[cfg.mcast_group] = tuple(
                p for (j, w), p in sorted(ports.items()) if j == job and w != PS_WORKER_ID
            )


def registers(regs: Registers) -> dict[str, Any]:
    state = {n: np.asarray(getattr(regs, n), np.int64) for n in Registers.SCALAR_ARRAYS}
    state["agg_lanes"] = regs.agg_lanes
    return state


def counters(pipe: Pipeline | RulePipeline) -> dict[str, Any]:
    out = {f"packets.{n}": np.asarray(c, np.int64) for n, c in pipe.job_packets.items()}
    out |= {f"bytes.{n}": np.asarray(c, np.int64) for n, c in pipe.job_bytes.items()}
    out["drop_packets"] = np.asarray(pipe.drop_packets, np.int64)
    out["drop_bytes"] = np.asarray(pipe.drop_bytes, np.int64)
    return out


def assert_same(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert got.keys() == want.keys()
    for name, cells in want.items():
        assert np.array_equal(got[name], cells), name


def same_pass(python: RulePipeline, engine: Pipeline, data: bytes, source: tuple[str, int]) -> None:
    assert engine.handle(data, source) == python.handle(data, source)
    assert_same(registers(engine.registers), registers(python.registers))
    assert_same(counters(engine), counters(python))


@pytest.mark.parametrize("vector", all_vectors(), ids=lambda v: v.name)
def test_engine_replays_each_vector_as_the_python_pipeline(vector: Any) -> None:
    pipes = pair(vector.aggregators, vector.lanes)
    ports = dict(vector.workers)
    install(pipes, vector.jobs, ports)
    for pipe in pipes:
        # Two levels: a job's parent and children are switches, registered as worker 255.
        for job, switch_ports in vector.switches.items():
            for port in switch_ports:
                pipe.sources[(job, PS_WORKER_ID, HOST, port)] = port
                pipe.endpoints[port] = (HOST, port)
        for group, members in vector.groups.items():
            pipe.groups[group] = members
    for step in vector.steps:
        if "set_priority" in step:
            change = step["set_priority"]
            for pipe in pipes:
                # A MODIFY of the job's table entry, as the control plane applies it.
                pipe.jobs[change["job"]] = replace(
                    pipe.jobs[change["job"]], priority=change["level"]
                )
            continue
        origin = sender(step)
        own = sender_port(vector, step)
        source = (HOST, own) if own is not None else (HOST, 1)
        if flooded(vector, step):
            # UDP has no ports: a flooded copy comes from an address registered for its sender
            # at the sender's port, whose endpoint it is not.
            source = (HOST, FLOOD_PORT + ingress_port(vector, step))
            for pipe in pipes:
                pipe.sources[(*origin, *source)] = own
        same_pass(*pipes, datagram(vector, step), source)


# ------------------------------------------------------------------------ random sequences

LANES = 64
AGGREGATORS = 16


def _jobs(policy: Policy) -> dict[int, JobConfig]:
    """Three jobs of one policy: fan-in 2, 3 and 1, static partitions side by side."""
    return {
        1: JobConfig(1, policy, 2, 0, 2, 101, 901),
        2: JobConfig(2, policy, 3, 4, 2, 102, 902),
        3: JobConfig(3, policy, 1, 8, 4, 103, 903),
    }


def _ports(jobs: dict[int, JobConfig]) -> dict[tuple[int, int], int]:
    ports = {(j, w): 1000 + 10 * j + w for j, cfg in jobs.items() for w in range(cfg.fan_in)}
    ports |= {(j, PS_WORKER_ID): cfg.ps_port for j, cfg in jobs.items()}
    return ports


step = st.fixed_dictionaries(
    {
        "what": st.sampled_from(
            ["gradient"] * 8
            + ["ps_result", "priority", "garbage", "stranger", "bad_index", "wrong_port"]
        ),
        "job": st.integers(1, 3),
        "worker": st.integers(0, 2),
        "seq": st.integers(0, 11),
        "resend": st.booleans(),
        "raw": st.integers(0, 9).map(lambda r: r == 0),
        "exponent": st.sampled_from([0, 0, 0, 1, -1]),
        "level": st.integers(0, 3),
        "lanes": st.lists(st.integers(-(2**31), 2**31 - 1), min_size=2, max_size=2),
        "garbage": st.binary(max_size=40),
    }
)


def _datagram(cfg: JobConfig, s: dict[str, Any]) -> tuple[bytes, int]:
    """A datagram of step `s` and the udp port it comes from."""
    worker = s["worker"] % cfg.fan_in
    if cfg.policy == Policy.STATIC:
        index, shadow = static_index(cfg, s["seq"])
    else:
        index, shadow = hashed_index(cfg.job_id, s["seq"], AGGREGATORS), 0
    lanes = np.zeros(LANES, np.int32)
    lanes[:2] = s["lanes"]
    flags = (Flag.RESEND if s["resend"] else Flag.NONE) | (
        Flag.RAW_FLOAT if s["raw"] else Flag.NONE
    )
    pkt = Packet(
        kind=Kind.GRADIENT,
        job=cfg.job_id,
        worker=worker,
        fan_in=cfg.fan_in,
        agg_index=index + (AGGREGATORS if s["what"] == "bad_index" else 0),
        seq=s["seq"],
        flags=flags,
        shadow=shadow,
        exponent=s["exponent"],
        bitmap=1 << worker,
        lanes=lanes,  # with RAW_FLOAT, encode sends them as float32 values
    )
    port = 1000 + 10 * cfg.job_id + worker
    if s["what"] == "ps_result":
        pkt = pkt.replace(kind=Kind.PS_RESULT, worker=PS_WORKER_ID, flags=Flag.COMPLETE)
        port = cfg.ps_port
    return encode(pkt), port


@pytest.mark.parametrize("policy", list(Policy), ids=lambda p: p.name.lower())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=1, max_size=60))
def test_engine_agrees_with_the_rule_on_random_sequences(
    policy: Policy, steps: list[dict[str, Any]]
) -> None:
    jobs = _jobs(policy)
    pipes = pair(AGGREGATORS, LANES)
    install(pipes, jobs, _ports(jobs))
    for s in steps:
        cfg = jobs[s["job"]]
        if s["what"] == "priority":
            for pipe in pipes:
                pipe.jobs[cfg.job_id] = replace(pipe.jobs[cfg.job_id], priority=s["level"])
            continue
        data, port = _datagram(cfg, s)
        if s["what"] == "garbage":
            data = s["garbage"]
        if s["what"] == "stranger":
            port = 7
        if s["what"] == "wrong_port":
            # A registered sender whose entry's port has another endpoint: WRONG_PORT.
            worker = s["worker"] % cfg.fan_in
            for pipe in pipes:
                pipe.sources[(cfg.job_id, worker, HOST, FLOOD_PORT + port)] = port
            port += FLOOD_PORT
        same_pass(*pipes, data, (HOST, port))


def test_a_burst_emits_what_single_passes_emit_in_order() -> None:
    jobs = _jobs(Policy.ESA)
    python, engine = pair(AGGREGATORS, LANES)
    install((python, engine), jobs, _ports(jobs))
    sends = []
    for seq in range(8):
        for worker in range(3):
            cfg = jobs[2]
            data, port = _datagram(
                cfg,
                {
                    "what": "gradient",
                    "worker": worker,
                    "seq": seq,
                    "resend": False,
                    "raw": False,
                    "exponent": 0,
                    "lanes": [seq, worker],
                },
            )
            sends.append((data, port))
    want = [out for data, port in sends for out in python.handle(data, (HOST, port))]
    stride = 24 + 4 * LANES
    rows = np.zeros((len(sends), stride), np.uint8)
    for i, (data, _) in enumerate(sends):
        rows[i, : len(data)] = np.frombuffer(data, np.uint8)
    sizes = np.array([len(d) for d, _ in sends], np.int64)
    addrs = np.array([(0x7F000001 << 16) | port for _, port in sends], np.int64)
    got = []
    for out, out_sizes, out_addrs, n in engine.handle_burst(rows, sizes, addrs, len(sends)):
        got += [
            (out[i, : out_sizes[i]].tobytes(), (HOST, int(out_addrs[i]) & 0xFFFF)) for i in range(n)
        ]
    assert got == want
    assert_same(registers(engine.registers), registers(python.registers))


# ------------------------------------------------------------------------ two levels

PARENT_PORT, CHILD_PORTS = 950, (960, 961)


def _two_level_jobs(policy: Policy, spill: bool = False) -> dict[int, JobConfig]:
    """Job 1 as a ToR sees it (worker 0 below it, a parent above: a spine, or with `spill`
    its PS, PROTOCOL.md 7.8); job 2 as a spine sees it (two children sending UP packets);
    job 3 one level."""
    jobs = _jobs(policy)
    up = jobs[1].ps_port if spill else PARENT_PORT
    jobs[1] = replace(jobs[1], up_port=up, local_mask=0b01)
    return jobs


def _install_two_level(pipes: tuple[RulePipeline, Pipeline], jobs: dict[int, JobConfig]) -> None:
    install(pipes, jobs, _ports(jobs))
    for pipe in pipes:
        # The parent of job 1 and the children of job 2 are switches: worker 255 of the job.
        pipe.sources[(1, PS_WORKER_ID, HOST, PARENT_PORT)] = PARENT_PORT
        pipe.endpoints[PARENT_PORT] = (HOST, PARENT_PORT)
        for port in CHILD_PORTS:
            pipe.sources[(2, PS_WORKER_ID, HOST, port)] = port
            pipe.endpoints[port] = (HOST, port)
        pipe.groups[jobs[2].mcast_group] = CHILD_PORTS


two_level_step = step.flatmap(
    lambda s: st.fixed_dictionaries(
        {
            "two": st.sampled_from(["gradient", "gradient", "up", "result", "up_bad"]),
            "bitmap": st.integers(0, 9),
            "child": st.integers(0, 1),
        }
    ).map(lambda extra: {**s, **extra})
)


@pytest.mark.parametrize("parent", ["spine", "ps"])
@pytest.mark.parametrize("policy", list(Policy), ids=lambda p: p.name.lower())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(two_level_step, min_size=1, max_size=60))
def test_engine_agrees_with_the_rule_at_two_levels(
    parent: str, policy: Policy, steps: list[dict[str, Any]]
) -> None:
    # UP packets (several workers, worker 255, from a child), RESULTs from the parent, local
    # completion that sends up (to a spine, or a spill's to the PS), and the one-level cases.
    jobs = _two_level_jobs(policy, spill=parent == "ps")
    pipes = pair(AGGREGATORS, LANES)
    _install_two_level(pipes, jobs)
    for s in steps:
        cfg = jobs[s["job"]]
        if s["what"] == "priority":
            for pipe in pipes:
                pipe.jobs[cfg.job_id] = replace(pipe.jobs[cfg.job_id], priority=s["level"])
            continue
        data, port = _datagram(cfg, s)
        if s["two"] in ("up", "up_bad"):
            # up_bad: an UP that names a worker, not a switch (BAD_WORKER).
            worker = PS_WORKER_ID if s["two"] == "up" else s["worker"] % 3
            pkt = _two_level_packet(jobs[2], s).replace(kind=Kind.UP, worker=worker)
            data, port = encode(pkt), CHILD_PORTS[s["child"]]
        elif s["two"] == "result":
            pkt = _two_level_packet(jobs[1], s).replace(kind=Kind.RESULT, flags=Flag.COMPLETE)
            data, port = encode(pkt), PARENT_PORT if parent == "spine" else jobs[1].ps_port
        same_pass(*pipes, data, (HOST, port))


def _two_level_packet(cfg: JobConfig, s: dict[str, Any]) -> Packet:
    """A packet of another switch for job `cfg`: bitmap any of the job's subsets (or not)."""
    pkt = decode(_datagram(cfg, s)[0])
    bitmap = s["bitmap"] % (1 << cfg.fan_in) if s["bitmap"] < 8 else s["bitmap"]
    lanes = np.zeros(LANES, np.int32)
    lanes[:2] = s["lanes"]
    return pkt.replace(bitmap=bitmap, lanes=lanes, flags=pkt.flags & ~Flag.RAW_FLOAT)
