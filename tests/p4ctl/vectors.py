"""Loading and building the packet test vectors of ``p4/vectors/`` (see its README)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import p4ctl
from p4ctl.protocol import HEADER, PS_WORKER_ID, AggState, Flag, Kind, Packet, Policy, encode
from p4ctl.rule import JobConfig, Registers

VECTORS = Path(p4ctl.__file__).parent.parent / "vectors"
FIELDS = ("kind", "flags", "job", "worker", "seq", "agg_index", "bitmap", "exponent", "fan_in")


@dataclass(frozen=True)
class Vector:
    name: str
    aggregators: int
    lanes: int
    jobs: dict[int, JobConfig]  # with each job's priority, a parameter of its entry
    workers: dict[tuple[int, int], int]  # (job, worker) -> switch port; the PS is worker 255
    steps: list[dict[str, Any]]
    # Two levels: the ports of the switches registered as worker 255 of a job (its parent, its
    # children), and a job's multicast ports when they are not its workers' (a spine's ToRs).
    switches: dict[int, tuple[int, ...]] = field(default_factory=dict)
    groups: dict[int, tuple[int, ...]] = field(default_factory=dict)
    not_in_p4: bool = False


def with_priority(vector: Vector, change: dict[str, int]) -> Vector:
    """`vector` after a step's ``set_priority``: a MODIFY of the job's ``job_table`` entry."""
    jobs = dict(vector.jobs)
    jobs[change["job"]] = replace(jobs[change["job"]], priority=change["level"])
    return replace(vector, jobs=jobs)


def load(path: Path) -> Vector:
    raw = json.loads(path.read_text())
    jobs, workers, switches, groups = {}, {}, {}, {}
    for j in raw["jobs"]:
        job = j["job"]
        jobs[job] = JobConfig(
            job,
            Policy.parse(j["policy"]),
            j["fan_in"],
            j.get("part_base", 0),
            j.get("part_size", 0),
            j["mcast_group"],
            j["ps_port"],
            j.get("priority", 0),
            j.get("up_port"),
            j.get("local_mask", 0),
        )
        workers[(job, PS_WORKER_ID)] = j["ps_port"]
        for worker, port in j["workers"].items():
            workers[(job, int(worker))] = port
        if "switches" in j:
            switches[job] = tuple(j["switches"])
        if "group" in j:
            groups[j["mcast_group"]] = tuple(j["group"])
    return Vector(
        raw["name"],
        raw["aggregators"],
        raw["lanes"],
        jobs,
        workers,
        raw["steps"],
        switches,
        groups,
        raw.get("not_in_p4", False),
    )


def all_vectors() -> list[Vector]:
    return [load(p) for p in sorted(VECTORS.glob("*.json"))]


def sender(step: dict[str, Any]) -> tuple[int, int] | None:
    """The (job, worker) whose registered address sends the step; None: a stranger."""
    text = step["send"]["from"]
    if text == "stranger":
        return None
    job, worker = text.split("/")[:2]
    return int(job), PS_WORKER_ID if worker in ("ps", "switch") else int(worker)


def sender_port(vector: Vector, step: dict[str, Any]) -> int | None:
    """The port of the sender's worker table entry: ``J/switch/P`` is a switch of job J's
    fabric (its parent or a child) at port P, registered as worker 255; None: a stranger."""
    text = step["send"]["from"]
    if text.startswith(f"{text.split('/')[0]}/switch/"):
        return int(text.split("/")[2])
    origin = sender(step)
    return vector.workers.get(origin) if origin is not None else None


def ingress_port(vector: Vector, step: dict[str, Any]) -> int | None:
    """The switch port a step's packet enters on: its ``port``, else the sender's own (None:
    a stranger, which enters on no port of the vector)."""
    return step["send"].get("port", sender_port(vector, step))


def flooded(vector: Vector, step: dict[str, Any]) -> bool:
    """Whether a step's packet enters on a port other than its sender's (a flooded copy)."""
    origin = sender(step)
    return origin is not None and ingress_port(vector, step) != sender_port(vector, step)


def _flags(names: list[str]) -> Flag:
    flags = Flag.NONE
    for name in names:
        flags |= Flag[name.upper()]
    return flags


def _lanes(values: list[float], k: int, raw: bool) -> np.ndarray:
    out = np.zeros(k, dtype=np.float32 if raw else np.int32)
    out[: len(values)] = values
    return out


def datagram(vector: Vector, step: dict[str, Any]) -> bytes:
    """The bytes a step sends (malformations applied)."""
    spec = step["send"]["packet"]
    origin = sender(step) or (1, 0)
    job = spec.get("job", origin[0])
    worker = spec.get("worker", origin[1])
    cfg = vector.jobs.get(job)
    flags = _flags(spec.get("flags", []))
    kind = spec.get("kind", "gradient")
    count = spec.get("lane_count", vector.lanes)
    pkt = Packet(
        kind=Kind.GRADIENT,
        job=job,
        worker=worker,
        fan_in=spec.get("fan_in", cfg.fan_in if cfg else 1),
        agg_index=spec.get("agg_index", 0),
        seq=spec.get("seq", 0),
        flags=flags,
        shadow=spec.get("shadow", 0),
        exponent=spec.get("exponent", 0),
        bitmap=spec.get("bitmap", 1 << worker if worker < 32 else 0),
        lanes=_lanes(spec.get("lanes", []), count, bool(flags & Flag.RAW_FLOAT)),
        version=spec.get("version", 1),
    )
    data = bytearray(encode(pkt))
    data[1] = kind if isinstance(kind, int) else Kind[kind.upper()]
    if "truncate_to" in spec:
        data = data[: spec["truncate_to"]]
    data += bytes(spec.get("append", 0))
    assert HEADER.size == 24
    return bytes(data)


def packet_fields(pkt: Packet, k: int) -> dict[str, Any]:
    """A packet as the vectors spell it."""
    raw = bool(pkt.flags & Flag.RAW_FLOAT)
    return {
        "kind": pkt.kind.name.lower(),
        "flags": sorted(f.name.lower() for f in Flag if f and pkt.flags & f),  # type: ignore[union-attr]
        "job": pkt.job,
        "worker": pkt.worker,
        "seq": pkt.seq,
        "agg_index": pkt.agg_index,
        "bitmap": pkt.bitmap,
        "exponent": pkt.exponent,
        "fan_in": pkt.fan_in,
        "lanes": [float(v) for v in pkt.lanes] if raw else [int(v) for v in pkt.lanes],
    }


def expected_fields(out: dict[str, Any], k: int) -> dict[str, Any]:
    want = {f: out[f] for f in FIELDS if f in out}
    if "flags" in want:
        want["flags"] = sorted(want["flags"])
    if "lanes" in out:
        raw = "raw_float" in out.get("flags", [])
        lanes = _lanes(out["lanes"], k, raw)
        want["lanes"] = [float(v) for v in lanes] if raw else [int(v) for v in lanes]
    return want


def matches(got: dict[str, Any], want: dict[str, Any]) -> bool:
    return all(got[key] == value for key, value in want.items())


def aggregator_state(regs: Registers, i: int) -> dict[str, Any]:
    return {
        "state": AggState(regs.agg_state[i]).name.lower(),
        "job": regs.agg_job[i],
        "seq": regs.agg_seq[i],
        "bitmap": regs.agg_bitmap[i],
        "count": regs.agg_count[i],
        "exponent": regs.agg_exponent[i],
        "priority": regs.agg_priority[i],
        "lanes": [int(v) for v in regs.agg_lanes[i]],
    }


def check_aggregators(
    before: list[dict[str, Any]], after: list[dict[str, Any]], step: dict[str, Any], k: int
) -> None:
    """Listed aggregators have the fields given; every other one is unchanged."""
    listed = step["expect"].get("aggregators", {})
    for i, (old, new) in enumerate(zip(before, after, strict=True)):
        want = listed.get(str(i))
        if want is None:
            assert new == old, f"{step['case']}: aggregator {i} changed: {old} -> {new}"
            continue
        want = dict(want)
        if "lanes" in want:
            want["lanes"] = [int(v) for v in _lanes(want["lanes"][:k], k, False)]
        got = {key: new[key] for key in want}
        assert got == want, f"{step['case']}: aggregator {i}: {got} != {want}"
