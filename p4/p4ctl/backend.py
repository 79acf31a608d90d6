"""The one interface the service programs the switch through, and its in-memory implementation.

`SwitchBackend` has two implementations: `p4ctl.client.SwitchClient` (P4Runtime over gRPC, any
target) and `InMemorySwitch` here (the same `Pipeline` the soft switch runs, without sockets
or gRPC; for unit tests of other layers and for the simulator). All writes are idempotent:
installing a job twice or removing a missing job is not an error.

Both map endpoints onto 9-bit switch ports the same way (`PortMap`), give job ``j`` the
multicast group ``j + 1`` (P4Runtime reserves group 0) and register the job's PS as worker 255.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol, runtime_checkable

from p4ctl.errors import SwitchError, UpdateError, WriteFailed
from p4ctl.pipeline import Address, Pipeline, RulePipeline
from p4ctl.protocol import MAX_JOBS, MAX_WORKERS, PS_WORKER_ID, AggState, DropReason, Policy
from p4ctl.rule import JOB_COUNTERS, Cells, JobConfig, Registers, is_power_of_two

__all__ = [
    "Endpoint",
    "InMemorySwitch",
    "JobInstall",
    "Occupancy",
    "PortMap",
    "SwitchBackend",
    "SwitchCounters",
    "group_of",
    "job_config",
    "parse_wiring",
]

# v1model egress ports are 9 bits and BMv2 drops on 511; port 0 is left unused so that a
# zeroed `ps_port` never reaches a real endpoint.
FIRST_PORT = 1
LAST_PORT = 510


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A UDP endpoint: an IPv4 host (name or dotted quad) and a port."""

    host: str
    port: int

    def address(self) -> Address:
        """``(dotted IPv4, port)``, as the data plane sees the sender of a datagram."""
        return socket.gethostbyname(self.host), self.port


@dataclass(frozen=True, slots=True)
class JobInstall:
    """What the switch needs to serve one job (`ps` is keyword-only)."""

    job_id: int
    policy: Policy
    fan_in: int
    part_base: int = 0
    part_size: int = 0
    ps: Endpoint = field(kw_only=True)
    priority: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.job_id < MAX_JOBS:
            raise ValueError(f"switch job id {self.job_id} outside 0..{MAX_JOBS - 1}")
        if not 1 <= self.fan_in <= MAX_WORKERS:
            raise ValueError(f"fan_in {self.fan_in} outside 1..{MAX_WORKERS} (bitmap width)")
        if self.policy == Policy.STATIC and not is_power_of_two(self.part_size):
            raise ValueError(
                f"a static job needs a part_size that is a power of two (its private slots; "
                f"the switch checks placement with masks), got {self.part_size}; "
                "scheduler.memory.partition_slots rounds a window up to one"
            )
        if not 0 <= self.priority <= 255:
            raise ValueError(
                f"priority {self.priority} outside 0..255 (an 8-bit job_table parameter)"
            )


@dataclass(frozen=True, slots=True)
class Occupancy:
    """Owner job and `AggState` of every aggregator: ``job[i]``, ``state[i]``.

    Empty, with `unavailable` saying why, when the switch serves no register access
    (`p4ctl.register_access`): nothing is known then, which is not the same as all free.
    """

    job: tuple[int, ...]
    state: tuple[int, ...]
    unavailable: str = ""

    @property
    def aggregators(self) -> int:
        return len(self.state)

    def runs(self) -> list[tuple[int, int, int, int]]:
        """Maximal runs of non-free aggregators with one owner and state:
        ``[(start, length, job, state), ...]`` in index order."""
        runs: list[tuple[int, int, int, int]] = []
        for i, (job, state) in enumerate(zip(self.job, self.state, strict=True)):
            if state == AggState.FREE:
                continue
            if runs and runs[-1][0] + runs[-1][1] == i and runs[-1][2:] == (job, state):
                start, length, _, _ = runs[-1]
                runs[-1] = (start, length + 1, job, state)
            else:
                runs.append((i, 1, job, state))
        return runs

    def held_by(self, job: int) -> int:
        """How many aggregators `job` holds (any non-free state)."""
        return sum(
            1 for j, s in zip(self.job, self.state, strict=True) if j == job and s != AggState.FREE
        )


@dataclass(frozen=True, slots=True)
class SwitchCounters:
    """Packet counts: ``jobs[job_id][counter name]`` (jobs with any non-zero counter, every
    name of `p4ctl.rule.JOB_COUNTERS`) and ``drops[reason name in lower case]`` (all reasons).

    Empty, with `unavailable` saying why, when the switch serves no counter reads: nothing is
    known then, which is not the same as nothing counted."""

    jobs: Mapping[int, Mapping[str, int]]
    drops: Mapping[str, int]
    unavailable: str = ""


@runtime_checkable
class SwitchBackend(Protocol):
    """How the service programs a switch. Writes are idempotent; errors are `SwitchError`s."""

    aggregators: int
    lanes: int

    def install_job(self, job: JobInstall) -> None: ...
    def add_worker(self, job_id: int, worker_id: int, endpoint: Endpoint) -> None: ...
    def set_priority(self, job_id: int, level: int) -> None: ...
    def reclaim(self, job_id: int) -> int: ...
    def remove_job(self, job_id: int) -> None: ...
    def installed_jobs(self) -> set[int]: ...
    def occupancy(self) -> Occupancy: ...
    def counters(self) -> SwitchCounters: ...
    def close(self) -> None: ...


def group_of(job_id: int) -> int:
    """The multicast group of a job (P4Runtime reserves group 0)."""
    return job_id + 1


def job_config(job: JobInstall, ps_port: int) -> JobConfig:
    """The job table entry of `job` whose PS sits behind switch port `ps_port`."""
    return JobConfig(
        job_id=job.job_id,
        policy=Policy(job.policy),
        fan_in=job.fan_in,
        part_base=job.part_base,
        part_size=job.part_size,
        mcast_group=group_of(job.job_id),
        ps_port=ps_port,
        priority=job.priority,
    )


def parse_wiring(text: str) -> dict[str, int]:
    """``"HOST=PORT,..."`` -> ``{dotted IPv4: port}``: the switch port each endpoint host sits
    behind (a veth pair per endpoint on BMv2). ValueError saying what is wrong."""
    wiring: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, sep, port = item.partition("=")
        if not sep or not port.strip().isdigit():
            raise ValueError(f"{item!r} is not HOST=PORT")
        number = int(port)
        if not FIRST_PORT <= number <= LAST_PORT:
            raise ValueError(f"port {number} of {host!r} outside {FIRST_PORT}..{LAST_PORT}")
        try:
            address = socket.gethostbyname(host.strip())
        except OSError as exc:
            raise ValueError(f"host {host!r} does not resolve: {exc}") from None
        if wiring.setdefault(address, number) != number:
            raise ValueError(f"host {host!r} given two ports, {wiring[address]} and {number}")
    return wiring


class PortMap:
    """Which switch port stands for which UDP endpoint (the port table, as a controller sees it).

    A host in `wiring` (dotted IPv4 -> port) sits behind that port: the switch binds a sender
    to its entry's port (WRONG_PORT), so on a switch with real ports an endpoint's port must be
    the one its packets enter on. Other endpoints get the lowest port nobody is wired to.
    """

    def __init__(
        self, known: Mapping[int, Address] | None = None, wiring: Mapping[str, int] | None = None
    ) -> None:
        self.by_port: dict[int, Address] = dict(known or {})
        self.by_address: dict[Address, int] = {a: p for p, a in self.by_port.items()}
        self.wiring = dict(wiring or {})

    def assign(self, address: Address) -> tuple[int, bool]:
        """``(port, new)``: the port of `address`, allocating the lowest free one if needed."""
        port = self.by_address.get(address)
        wired = self.wiring.get(address[0])
        if port is not None and wired in (None, port):
            return port, False
        if wired is not None:
            holder = self.by_port.get(wired)
            if holder is not None and holder != address:
                raise SwitchError(
                    f"switch port {wired}, where host {address[0]} is wired, already serves "
                    f"endpoint {holder[0]}:{holder[1]}: a port's entry names one endpoint, so "
                    "give each worker and PS a host of its own (INASCHED_SWITCH_PORTS)"
                )
            if port is not None:  # read back from a controller that did not know the wiring
                del self.by_port[port]
            self.by_port[wired] = address
            self.by_address[address] = wired
            return wired, True
        taken = set(self.wiring.values())
        for candidate in range(FIRST_PORT, LAST_PORT + 1):
            if candidate not in self.by_port and candidate not in taken:
                self.by_port[candidate] = address
                self.by_address[address] = candidate
                return candidate, True
        raise SwitchError(
            f"all {LAST_PORT - FIRST_PORT + 1} switch ports are in use; remove finished jobs"
        )

    def release_unused(self, used: Iterable[int]) -> list[int]:
        """Forget every port not in `used`; returns the ports released."""
        keep = set(used)
        released = [p for p in self.by_port if p not in keep]
        for port in released:
            del self.by_address[self.by_port.pop(port)]
        return released


class InMemorySwitch:
    """A `SwitchBackend` that programs an in-process `Pipeline` directly.

    `pipeline` is public so that a simulator can pass datagrams through it
    (``pipeline.handle(data, source)``) while the service-side code programs it. It runs the
    compiled pass (`Pipeline`); with `rule`, `p4ctl.rule` in Python over plain-list registers
    (`RulePipeline`, the simulator's switch: the rule is fastest on one cell at a time).
    """

    def __init__(self, aggregators: int = 4096, lanes: int = 64, *, rule: bool = False) -> None:
        self.aggregators = aggregators
        self.lanes = lanes
        self.pipeline: Pipeline | RulePipeline = (RulePipeline if rule else Pipeline)(
            aggregators, lanes
        )
        self._ports = PortMap()
        # (job, another switch's address) -> whether it is below (in the job's group).
        self._links: dict[tuple[int, Address], bool] = {}

    @property
    def registers(self) -> Registers:
        return self.pipeline.registers

    def install_job(self, job: JobInstall) -> None:
        pipe = self.pipeline
        ps_port, _ = self._ports.assign(job.ps.address())
        if job.policy == Policy.STATIC and job.part_base + 2 * job.part_size > self.aggregators:
            raise WriteFailed(
                [
                    _invalid(
                        f"static partition of job {job.job_id} ends past "
                        f"aggregator {self.aggregators - 1}"
                    )
                ]
            )
        links = {a for (j, a) in self._links if j == job.job_id}
        for key in [
            k
            for k in pipe.sources
            if k[0] == job.job_id and k[1] == PS_WORKER_ID and k[2:] not in links
        ]:
            del pipe.sources[key]
        host, udp_port = self._ports.by_port[ps_port]
        pipe.sources[(job.job_id, PS_WORKER_ID, host, udp_port)] = ps_port
        pipe.jobs[job.job_id] = job_config(job, ps_port)
        pipe.groups.setdefault(group_of(job.job_id), ())
        self._sync_ports()

    def add_link(self, job_id: int, endpoint: Endpoint, *, down: bool) -> None:
        """Accept job `job_id`'s packets from another switch of its tree at `endpoint`, as
        worker 255 (``p4/PROTOCOL.md`` 7.2): its parent, or (`down`) a child, which joins the
        job's multicast group so that results go down to it."""
        pipe = self.pipeline
        if job_id not in pipe.jobs:
            raise WriteFailed(
                [UpdateError(0, "NOT_FOUND", f"job {job_id} is not installed; install_job first")]
            )
        address = endpoint.address()
        port, _ = self._ports.assign(address)
        pipe.sources[(job_id, PS_WORKER_ID, *address)] = port
        self._links[(job_id, address)] = down
        pipe.groups[group_of(job_id)] = self._worker_ports(job_id)
        self._sync_ports()

    def add_worker(self, job_id: int, worker_id: int, endpoint: Endpoint) -> None:
        pipe = self.pipeline
        cfg = pipe.jobs.get(job_id)
        if cfg is None:
            raise WriteFailed(
                [UpdateError(0, "NOT_FOUND", f"job {job_id} is not installed; install_job first")]
            )
        if not 0 <= worker_id < cfg.fan_in:
            raise WriteFailed([_invalid(f"worker {worker_id} outside 0..{cfg.fan_in - 1}")])
        port, _ = self._ports.assign(endpoint.address())
        for key in [k for k in pipe.sources if k[0] == job_id and k[1] == worker_id]:
            del pipe.sources[key]
        host, udp_port = self._ports.by_port[port]
        pipe.sources[(job_id, worker_id, host, udp_port)] = port
        pipe.groups[group_of(job_id)] = self._worker_ports(job_id)
        self._sync_ports()

    def set_priority(self, job_id: int, level: int) -> None:
        if not 0 <= level <= 255:
            raise WriteFailed([_invalid(f"priority {level} outside 0..255")])
        cfg = self.pipeline.jobs.get(job_id)
        if cfg is None:
            raise WriteFailed([UpdateError(0, "NOT_FOUND", f"job {job_id} is not installed")])
        self.pipeline.jobs[job_id] = replace(cfg, priority=level)

    def reclaim(self, job_id: int) -> int:
        return self.pipeline.registers.reclaim_job(job_id)

    def remove_job(self, job_id: int) -> None:
        pipe = self.pipeline
        pipe.jobs.pop(job_id, None)
        for key in [k for k in pipe.sources if k[0] == job_id]:
            del pipe.sources[key]
        pipe.groups.pop(group_of(job_id), None)
        pipe.registers.reclaim_job(job_id)
        self._links = {k: v for k, v in self._links.items() if k[0] != job_id}
        self._sync_ports()

    def installed_jobs(self) -> set[int]:
        return set(self.pipeline.jobs)

    def occupancy(self) -> Occupancy:
        return occupancy_from(self.pipeline.registers)

    def counters(self) -> SwitchCounters:
        pipe = self.pipeline
        return counters_from(pipe.job_packets, pipe.drop_packets)

    def close(self) -> None:
        """Nothing to release; present for the interface."""

    def _worker_ports(self, job_id: int) -> tuple[int, ...]:
        ports = {
            p
            for (j, w, host, udp), p in self.pipeline.sources.items()
            if j == job_id and (w != PS_WORKER_ID or self._links.get((j, (host, udp))))
        }
        return tuple(sorted(ports))

    def _sync_ports(self) -> None:
        pipe = self.pipeline
        used = set(pipe.sources.values()) | {cfg.ps_port for cfg in pipe.jobs.values()}
        for port in self._ports.release_unused(used):
            pipe.endpoints.pop(port, None)
        pipe.endpoints.update(self._ports.by_port)


def occupancy_from(regs: Registers) -> Occupancy:
    """`Occupancy` of a pipeline's registers (numpy arrays, or the lists of `RulePipeline`: the
    answer holds plain ints either way, as JSON needs)."""
    return Occupancy(job=tuple(map(int, regs.agg_job)), state=tuple(map(int, regs.agg_state)))


def counters_from(job_packets: Mapping[str, Cells], drops: Cells) -> SwitchCounters:
    """`SwitchCounters` from per-name, per-job packet counts and per-reason drop counts (numpy
    arrays, or the lists of `RulePipeline`: the answer holds plain ints either way)."""
    jobs: dict[int, dict[str, int]] = {}
    for name in JOB_COUNTERS:
        for job, count in enumerate(job_packets[name]):
            if count:
                jobs.setdefault(job, dict.fromkeys(JOB_COUNTERS, 0))[name] = int(count)
    return SwitchCounters(
        jobs=jobs, drops={reason.name.lower(): int(drops[reason]) for reason in DropReason}
    )


def _invalid(message: str) -> UpdateError:
    return UpdateError(0, "INVALID_ARGUMENT", message)
