"""`SwitchClient`: the `SwitchBackend` over P4Runtime, for the soft switch or any target.

Built on p4runtime-shell's `P4RuntimeClient`, one object per switch (none of the shell's
module-level state). The shell's ``sys.exit`` on an unanswered handshake is raised as
`SwitchUnavailable`, as is every other lower-layer error mapped onto `p4ctl.errors`.

A job's priority is a parameter of its ``job_table`` entry, so running jobs needs no register
write, which PI (BMv2's P4Runtime server) refuses. Occupancy and reclaim use `registers`:
P4Runtime where the switch serves register reads, else BMv2's Thrift runtime, else none
(`registers_unavailable` says what is lost). What the switch holds is the truth: the client
reads the port, worker and job tables when it connects, so a restarted service resumes with
the switch as it left it; its first `install_job` also installs clone session `CLONE_SESSION`.
Election: with `election_id` (high, low) the switch makes it primary if that is at least the
highest it has seen, else a backup whose writes raise `NotPrimary`; ``election_id=None`` is a
reader that never takes primacy. `is_primary` follows the arbitration updates on the stream.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import partial

import grpc
from google.rpc import code_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2 as p4rt
from p4runtime_sh.p4runtime import P4RuntimeClient, P4RuntimeException

from p4ctl.backend import (
    Endpoint,
    JobInstall,
    Occupancy,
    PortMap,
    SwitchCounters,
    counters_from,
    group_of,
    job_config,
)
from p4ctl.client_codec import P4Names, addr_int, addr_str, write_errors
from p4ctl.errors import (
    NotPrimary,
    PipelineMismatch,
    SwitchError,
    SwitchUnavailable,
    Unsupported,
    UpdateError,
    WriteFailed,
)
from p4ctl.p4info import (
    CLONE_SESSION,
    DEFAULT_AGGREGATORS,
    DEFAULT_LANES,
    Sizing,
    build_p4info,
    compare_p4info,
)
from p4ctl.protocol import MAX_JOBS, PS_WORKER_ID, AggState, DropReason
from p4ctl.register_access import RegisterAccess, ThriftRegisters
from p4ctl.rule import JOB_COUNTERS, JobConfig

__all__ = ["CLONE_PORT", "SwitchClient", "set_job_params"]

log = logging.getLogger(__name__)

INSERT, MODIFY, DELETE = p4rt.Update.INSERT, p4rt.Update.MODIFY, p4rt.Update.DELETE
# A worker-table key: (job, worker) -> (dotted host, udp port, switch port).
SourceEntry = tuple[str, int, int]
# The clone session's one replica. Every clone is recirculated in egress before it would be
# sent (egress_rewrite.p4), so it never leaves on this port; port 0 is the port `PortMap` never
# gives an endpoint, so a clone that did leave would reach no host.
CLONE_PORT = 0
# How long the switch has to answer the stream's first arbitration message.
ARBITRATION_TIMEOUT_S = 5.0
Election = tuple[int, int]


class SwitchClient:
    """The `SwitchBackend` of one P4Runtime switch at `address` ("host:port").

    Sets the inasched pipeline for ``Sizing(aggregators, lanes)`` when the switch has none
    (defaults: `p4ctl.p4info` defaults), otherwise checks the one it runs (sizing then read
    from it when not given). Raises `SwitchUnavailable`, `PipelineMismatch`.
    """

    def __init__(
        self,
        address: str,
        device_id: int = 0,
        election_id: Election | None = (0, 1),
        aggregators: int | None = None,
        lanes: int | None = None,
        *,
        device_config: bytes = b"",
        register_thrift: str | None = None,
        wiring: Mapping[str, int] | None = None,
    ) -> None:
        self.address = address
        # Host -> the switch port it sits behind (`PortMap`); none: any port reaches any host.
        self._wiring = dict(wiring or {})
        self._lock = threading.RLock()
        # Written with the first install_job, not on connect: a backup controller may not write.
        self._clone_session_installed = False
        self._shell: _Shell | None = _connect(device_id, address, election_id)
        self._thrift: ThriftRegisters | None = None
        # Why counters cannot be read ("" until a read is refused; logged once).
        self.counters_unavailable = ""
        try:
            info = self._pipeline(aggregators, lanes, device_config)
            self.names = P4Names(info)
            self.aggregators = self.names.register_size["agg_job"]
            self.lanes = self.names.lanes
            self._load()
            self.registers, self.registers_unavailable = self._register_access(register_thrift)
        except BaseException:
            self.shell.tear_down()
            raise

    # ------------------------------------------------------------------ SwitchBackend

    def install_job(self, job: JobInstall) -> None:
        """Install `job` whole, or leave the switch as it was: on a refused write, what this
        call wrote is undone before the error is raised (no half-installed job)."""
        with self._lock:
            if not self._clone_session_installed:
                # Switch-wide, and before the first job's packets can need it.
                self._upsert([self._clone_session_entry()])
                self._clone_session_installed = True
            address = job.ps.address()
            ps_port, _ = self._ports.assign(address)
            job_id, params = job.job_id, set_job_params(job_config(job, ps_port))
            before, stale = self._jobs.get(job_id), self._sources.get((job_id, PS_WORKER_ID))
            source = (*address, ps_port)
            job_key = self.names.table_entry("job_table", {"job": job_id})
            # Undone newest first; the PS's port entry goes with the last step when no
            # recorded source uses it.
            undo: list[Callable[[], object]] = [self._release_ports]
            try:
                self._upsert([self._endpoint_entry(ps_port, address)])
                if stale != source:
                    if stale is not None:
                        old = self._source_entry(job_id, PS_WORKER_ID, stale)
                        self._delete([old])
                        undo.append(partial(self._upsert, [old]))
                    new = self._source_entry(job_id, PS_WORKER_ID, source)
                    undo.append(partial(self._delete, [new]))
                    self._upsert([new])
                if before is None:
                    undo.append(partial(self._delete, [self._group_entry(job_id, False)]))
                self._write([self._group_entry(job_id)], INSERT, tolerate="ALREADY_EXISTS")
                # Last: until the job's entry is there its packets are dropped (UNKNOWN_JOB),
                # so the data plane sees no part of the job before all of it is written.
                if before is None:
                    undo.append(partial(self._delete, [job_key]))
                else:
                    undo.append(partial(self._write, [self._job_entry(job_id, before)], MODIFY))
                self._upsert([self._job_entry(job_id, params)])
            except SwitchError:
                self._undo(job_id, undo)
                raise
            self._sources[(job_id, PS_WORKER_ID)] = source
            self._jobs[job_id] = params

    def _undo(self, job_id: int, steps: list[Callable[[], object]]) -> None:
        """Run `steps` newest first; a step that fails is logged (the original error wins)."""
        for step in reversed(steps):
            try:
                step()
            except SwitchError as exc:
                log.error("job %d: could not undo a partial install: %s", job_id, exc)

    def add_worker(self, job_id: int, worker_id: int, endpoint: Endpoint) -> None:
        with self._lock:
            params = self._jobs.get(job_id)
            if params is None:
                raise WriteFailed(
                    [UpdateError(0, "NOT_FOUND", f"job {job_id} is not installed; install first")]
                )
            fan_in = params["fan_in"]
            if not 0 <= worker_id < fan_in:
                raise WriteFailed(
                    [
                        UpdateError(
                            0, "INVALID_ARGUMENT", f"worker {worker_id} not in 0..{fan_in - 1}"
                        )
                    ]
                )
            address = endpoint.address()
            port, _ = self._ports.assign(address)
            stale = self._sources.get((job_id, worker_id))
            if stale is not None and stale[:2] != address:
                self._delete([self._source_entry(job_id, worker_id, stale)])
                del self._sources[(job_id, worker_id)]
            source = (*address, port)
            self._upsert(
                [self._endpoint_entry(port, address), self._source_entry(job_id, worker_id, source)]
            )
            self._sources[(job_id, worker_id)] = source
            self._upsert([self._group_entry(job_id)])
            self._release_ports()

    def add_link(self, job_id: int, endpoint: Endpoint, *, down: bool) -> None:
        """Accept job `job_id`'s packets from another switch of its tree at `endpoint`, as
        worker 255 (``p4/PROTOCOL.md`` 7.2): its parent, or (`down`) a child, which joins the
        job's multicast group so that results go down to it."""
        with self._lock:
            if job_id not in self._jobs:
                raise WriteFailed(
                    [UpdateError(0, "NOT_FOUND", f"job {job_id} is not installed; install first")]
                )
            address = endpoint.address()
            port, _ = self._ports.assign(address)
            source = (*address, port)
            self._upsert(
                [
                    self._endpoint_entry(port, address),
                    self._source_entry(job_id, PS_WORKER_ID, source),
                ]
            )
            self._links[(job_id, address)] = (port, down)
            self._upsert([self._group_entry(job_id)])
            self._release_ports()

    def set_priority(self, job_id: int, level: int) -> None:
        """MODIFY the job's ``job_table`` entry: its priority is one of the entry's parameters,
        which every P4Runtime target can write (PI refuses register writes)."""
        with self._lock:
            params = self._jobs.get(job_id)
            if params is None:
                raise WriteFailed(
                    [UpdateError(0, "NOT_FOUND", f"job {job_id} is not installed; install first")]
                )
            if not 0 <= level <= 255:
                raise WriteFailed(
                    [UpdateError(0, "INVALID_ARGUMENT", f"priority {level} outside 0..255")]
                )
            changed = {**params, "priority": level}
            self._write([self._job_entry(job_id, changed)], MODIFY)
            self._jobs[job_id] = changed

    def reclaim(self, job_id: int) -> int:
        """Free every aggregator `job_id` holds; returns how many (0, with a warning, when the
        switch serves no register access: `registers_unavailable` says so)."""
        with self._lock:
            if self.registers is None:
                log.warning(
                    "job %d: aggregators not reclaimed: %s", job_id, self.registers_unavailable
                )
                return 0
            owners = self.registers.read_all("agg_job")
            states = self.registers.read_all("agg_state")
            held = [
                i
                for i, (j, s) in enumerate(zip(owners, states, strict=True))
                if j == job_id and s != AggState.FREE
            ]
            if held:
                self.registers.write_cells(
                    [
                        (name, i, 0)
                        for i in held
                        for name in ("agg_state", "agg_bitmap", "agg_count")
                    ]
                )
            return len(held)

    def remove_job(self, job_id: int) -> None:
        with self._lock:
            mine = {key: src for key, src in self._sources.items() if key[0] == job_id}
            self._delete(
                [self._source_entry(job, worker, src) for (job, worker), src in mine.items()]
            )
            for key in mine:
                del self._sources[key]
            links = {key: link for key, link in self._links.items() if key[0] == job_id}
            self._delete(
                [
                    self._source_entry(job, PS_WORKER_ID, (*address, port))
                    for (job, address), (port, _) in links.items()
                ]
            )
            for link in links:
                del self._links[link]
            self._delete(
                [
                    self.names.table_entry("job_table", {"job": job_id}),
                    self._group_entry(job_id, replicas=False),
                ]
            )
            self._jobs.pop(job_id, None)
            self.reclaim(job_id)
            self._release_ports()

    def installed_jobs(self) -> set[int]:
        with self._lock:
            query = p4rt.Entity()
            query.table_entry.table_id = self.names.table_id["job_table"]
            return {self.names.match_values(e.table_entry)[0] for e in self._read([query])}

    def occupancy(self) -> Occupancy:
        """Owner and state of every aggregator, one wildcard read per array; with no register
        access, an empty `Occupancy` whose `unavailable` says why."""
        with self._lock:
            if self.registers is None:
                return Occupancy(job=(), state=(), unavailable=self.registers_unavailable)
            return Occupancy(
                job=tuple(self.registers.read_all("agg_job")),
                state=tuple(self.registers.read_all("agg_state")),
            )

    def counters(self) -> SwitchCounters:
        with self._lock:
            # Every cell of every counter, so a removed job's counts stay visible, as with
            # `InMemorySwitch`; one query per counter (a wildcard over counter ids is optional
            # for a target).
            queries = [
                p4rt.Entity(counter_entry=p4rt.CounterEntry(counter_id=cid))
                for cid in self.names.counter_name
            ]
            jobs = {name: [0] * MAX_JOBS for name in JOB_COUNTERS}
            drops = [0] * len(DropReason)
            try:
                entities = list(self._read(queries))
            except Unsupported as exc:
                if not self.counters_unavailable:
                    self.counters_unavailable = (
                        f"switch {self.address} serves no counter reads ({exc}): the per-job "
                        "counters and drops cannot be shown, and the progress workers report "
                        "is not verified against them"
                    )
                    log.warning("%s", self.counters_unavailable)
                return SwitchCounters(jobs={}, drops={}, unavailable=self.counters_unavailable)
            for entity in entities:
                entry = entity.counter_entry
                name = self.names.counter_name[entry.counter_id]
                cells = jobs.get(name, drops)
                cells[entry.index.index] = entry.data.packet_count
            return counters_from(jobs, drops)

    @property
    def is_primary(self) -> bool:
        """Whether the switch's latest arbitration update on this client's stream says it is
        primary (False once the stream has ended)."""
        shell = self.shell
        inbox = shell.stream_in_q["arbitration"]
        while True:
            try:
                message = inbox.get_nowait()
            except queue.Empty:
                break
            shell.arbitration = None if message is None else message.arbitration
            if message is None:
                break
        return shell.arbitration is not None and shell.arbitration.status.code == code_pb2.OK

    def close(self) -> None:
        """End the stream and close the channel; safe to call twice."""
        with self._lock:
            shell, self._shell = self._shell, None
            thrift, self._thrift = self._thrift, None
        if thrift is not None:
            thrift.close()
        if shell is not None:
            shell.tear_down()

    def __enter__(self) -> SwitchClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ set-up

    def _pipeline(
        self, aggregators: int | None, lanes: int | None, device_config: bytes
    ) -> p4info_pb2.P4Info:
        """Set our pipeline on a switch that has none, or check the one it runs.

        `device_config` is the target's program (for BMv2 the JSON p4c-bm2-ss writes), pushed
        with the P4Info; it also replaces a pipeline that runs no program (one pushed without
        it). With none, a switch that needs one is refused with how to load it."""
        try:
            running = self.shell.get_p4info()
        except P4RuntimeException as exc:
            if exc.grpc_error.code() != grpc.StatusCode.FAILED_PRECONDITION:
                raise self._mapped(exc.grpc_error) from None
            running = None
        if running is None or not running.tables:
            if self.shell.election_id is None:
                raise SwitchError(
                    f"switch {self.address} runs no pipeline yet, and a reader (no election id) "
                    "may not set one"
                )
            sizing = Sizing(aggregators or DEFAULT_AGGREGATORS, lanes or DEFAULT_LANES)
            return self._set_pipeline(build_p4info(sizing), device_config)
        names = P4Names(running)
        sizing = Sizing(names.register_size.get("agg_job", 0), names.lanes)
        want = Sizing(aggregators or sizing.aggregators, lanes or sizing.lanes)
        # Names, ids, widths and sizes are the contract; a compiler's P4Info (p4c for BMv2, a
        # vendor's) also carries its own annotations, documentation and entities we never use.
        problems = compare_p4info(
            running, build_p4info(want), extra_ok=True, labels=("running", "inasched")
        )
        if problems:
            raise PipelineMismatch(
                f"switch {self.address} runs another pipeline than inasched {want}: "
                + "; ".join(problems[:3])
            )
        try:
            self._check_program(running, b"")
        except PipelineMismatch:
            if not device_config:
                raise
            return self._set_pipeline(build_p4info(want), device_config)
        return running

    def _set_pipeline(self, info: p4info_pb2.P4Info, device_config: bytes) -> p4info_pb2.P4Info:
        request = p4rt.SetForwardingPipelineConfigRequest(
            device_id=self.shell.device_id,
            action=p4rt.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
        )
        _set_election(request.election_id, self.shell.election_id)
        request.config.p4info.CopyFrom(info)
        request.config.p4_device_config = device_config
        try:
            self.shell.stub.SetForwardingPipelineConfig(request)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
                raise PipelineMismatch(f"switch {self.address}: {exc.details()}") from None
            raise self._mapped(exc) from None
        self._check_program(info, device_config)
        names = P4Names(info)
        sizing = Sizing(names.register_size["agg_job"], names.lanes)
        program = (
            f"a {len(device_config)}-byte device config" if device_config else "no device config"
        )
        log.info("set the inasched pipeline on %s (%s, %s)", self.address, sizing, program)
        return info

    def _check_program(self, info: p4info_pb2.P4Info, device_config: bytes) -> None:
        """Refuse a target whose pipeline runs no program: one read of the job table.

        BMv2's ``simple_switch_grpc`` started without a program accepts the P4Info alone and
        then fails every read (UNKNOWN: Error when reading table entries from target); a
        target that needs no device config (the soft switch) serves the read."""
        query = p4rt.Entity()
        query.table_entry.table_id = next(
            t.preamble.id for t in info.tables if t.preamble.name == "job_table"
        )
        try:
            for _ in self._read([query]):
                pass
        except SwitchUnavailable:
            raise
        except SwitchError as exc:
            if device_config:
                raise
            raise PipelineMismatch(
                f"switch {self.address} runs no P4 program: it holds the inasched P4Info with no "
                f"device config, and refuses to read its tables ({exc}). Load the program: "
                "give the JSON p4c-bm2-ss writes for p4/inasched.p4 with --p4-config PATH "
                "(INASCHED_SWITCH_P4_CONFIG), or start simple_switch_grpc with that JSON instead "
                "of --no-p4 (p4/README.md, Running on BMv2)"
            ) from None

    def _register_access(self, thrift: str | None) -> tuple[RegisterAccess | None, str]:
        """``(access, "")``: P4Runtime where the switch serves register reads, else BMv2's
        Thrift runtime at `thrift`; ``(None, why)`` with neither."""
        probe = p4rt.Entity()
        probe.register_entry.register_id = self.names.register_id["agg_state"]
        probe.register_entry.index.index = 0
        request = p4rt.ReadRequest(device_id=self.shell.device_id, entities=[probe])
        try:
            for _ in self.shell.stub.Read(request):
                pass
            return self, ""
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise self._mapped(exc) from None
            refused = f"UNIMPLEMENTED: {exc.details()}"
        if thrift:
            self._thrift = ThriftRegisters(thrift, self.names.register_size)
            log.info(
                "switch %s refuses P4Runtime register access (%s): registers over its Thrift "
                "runtime at %s",
                self.address,
                refused,
                thrift,
            )
            return self._thrift, ""
        why = (
            f"switch {self.address} refuses P4Runtime register access ({refused}) and no Thrift "
            "register transport is set (--switch-thrift HOST:PORT, INASCHED_SWITCH_THRIFT): "
            "occupancy (which aggregators each job holds) cannot be shown, and a removed job's "
            "aggregators are not reclaimed; jobs, priorities, workers and counters work"
        )
        log.warning("%s", why)
        return None, why

    def _load(self) -> None:
        """Read back the tables a previous controller left, so writes stay idempotent."""
        self._ports = PortMap(wiring=self._wiring)
        self._sources: dict[tuple[int, int], SourceEntry] = {}
        # (job, another switch's address) -> (its port, whether it is a child: in the group).
        self._links: dict[tuple[int, tuple[str, int]], tuple[int, bool]] = {}
        # job -> its set_job parameters, as the switch holds them.
        self._jobs: dict[int, dict[str, int]] = {}
        # Worker 255 is the job's PS and, on a fabric, the other switches of its tree.
        switches: list[tuple[int, SourceEntry]] = []
        query = p4rt.Entity()
        query.table_entry.table_id = 0
        for entity in self._read([query]):
            entry = entity.table_entry
            table = self.names.table_name[entry.table_id]
            key = self.names.match_values(entry)
            params = self.names.action_values(entry)
            if table == "port_table" and "addr" in params:
                address = (addr_str(params["addr"]), params["udp_port"])
                self._ports.by_port[key[0]] = address
                self._ports.by_address[address] = key[0]
            elif table == "worker_table" and "port" in params and key[1] == PS_WORKER_ID:
                switches.append((key[0], (addr_str(key[2]), key[3], params["port"])))
            elif table == "worker_table" and "port" in params:
                self._sources[(key[0], key[1])] = (addr_str(key[2]), key[3], params["port"])
            elif table == "job_table" and "fan_in" in params:
                self._jobs[key[0]] = params
        for job, (host, udp_port, port) in switches:
            if self._jobs.get(job, {}).get("ps_port") == port:
                self._sources[(job, PS_WORKER_ID)] = (host, udp_port, port)
            else:
                # Whether it was a child is in the group, which is not read back: the service
                # adds the links again when it restores the job.
                self._links[(job, (host, udp_port))] = (port, False)

    # ------------------------------------------------------------------ entities

    @property
    def shell(self) -> _Shell:
        if self._shell is None:
            raise SwitchUnavailable(self.address, "the client is closed")
        return self._shell

    def _endpoint_entry(self, port: int, address: tuple[str, int]) -> p4rt.Entity:
        return self.names.table_entry(
            "port_table",
            {"egress_port": port},
            "set_endpoint",
            {"addr": addr_int(address[0]), "udp_port": address[1]},
        )

    def _source_entry(self, job: int, worker: int, source: SourceEntry) -> p4rt.Entity:
        host, udp_port, port = source
        match = {"job": job, "worker": worker, "src_addr": addr_int(host), "src_port": udp_port}
        return self.names.table_entry("worker_table", match, "allow_source", {"port": port})

    def _group_entry(self, job_id: int, replicas: bool = True) -> p4rt.Entity:
        entity = p4rt.Entity()
        group = entity.packet_replication_engine_entry.multicast_group_entry
        group.multicast_group_id = group_of(job_id)
        if replicas:
            ports = sorted(
                {
                    src[2]
                    for (job, worker), src in self._sources.items()
                    if job == job_id and worker != PS_WORKER_ID
                }
                | {port for (job, _), (port, down) in self._links.items() if job == job_id and down}
            )
            for port in ports:
                group.replicas.add(egress_port=port, instance=0)
        return entity

    @staticmethod
    def _clone_session_entry() -> p4rt.Entity:
        entity = p4rt.Entity()
        session = entity.packet_replication_engine_entry.clone_session_entry
        session.session_id = CLONE_SESSION
        session.replicas.add(egress_port=CLONE_PORT, instance=0)
        return entity

    def _release_ports(self) -> None:
        used = {src[2] for src in self._sources.values()} | {p for p, _ in self._links.values()}
        released = self._ports.release_unused(used)
        self._delete([self.names.table_entry("port_table", {"egress_port": p}) for p in released])

    def _job_entry(self, job_id: int, params: dict[str, int]) -> p4rt.Entity:
        return self.names.table_entry("job_table", {"job": job_id}, "set_job", params)

    def read_all(self, name: str) -> list[int]:
        """Every cell of register `name`, in one wildcard read (`RegisterAccess`)."""
        query = p4rt.Entity()
        query.register_entry.register_id = self.names.register_id[name]
        values = [0] * self.names.register_size[name]
        for entity in self._read([query]):
            entry = entity.register_entry
            values[entry.index.index] = int.from_bytes(entry.data.bitstring, "big")
        return values

    def write_cells(self, cells: list[tuple[str, int, int]]) -> None:
        """Set ``(register, index, value)`` cells in one batch (`RegisterAccess`)."""
        self._write([self.names.register_entry(n, i, v) for n, i, v in cells], MODIFY)

    # ------------------------------------------------------------------ RPCs, errors mapped

    def _upsert(self, updates: list[p4rt.Entity]) -> None:
        """Insert, or modify what exists already (idempotent installs)."""
        errors = self._write(updates, INSERT, tolerate="ALREADY_EXISTS")
        existing = [updates[e.index] for e in errors]
        if existing:
            self._write(existing, MODIFY)

    def _delete(self, entities: list[p4rt.Entity]) -> None:
        """Delete; what is already gone is fine (idempotent removes)."""
        if entities:
            self._write(entities, DELETE, tolerate="NOT_FOUND")

    def _write(
        self, entities: Iterable[p4rt.Entity], op: int, tolerate: str = ""
    ) -> list[UpdateError]:
        """Write one batch; returns the per-update errors of code `tolerate`, raises others."""
        shell = self.shell
        request = p4rt.WriteRequest(device_id=shell.device_id)
        _set_election(request.election_id, shell.election_id)
        for entity in entities:
            request.updates.add(type=op, entity=entity)
        try:
            # Not shell.write: p4runtime-shell 0.0.6's error iterator never advances past an
            # OK entry, so it spins forever on a batch where some updates succeeded.
            shell.stub.Write(request)
        except grpc.RpcError as exc:
            errors = write_errors(exc)
            if errors is None:
                raise self._mapped(exc) from None
            fatal = [e for e in errors if e.code != tolerate]
            if fatal:
                raise WriteFailed(fatal) from None
            return errors
        return []

    def _read(self, entities: list[p4rt.Entity]) -> Iterator[p4rt.Entity]:
        request = p4rt.ReadRequest(device_id=self.shell.device_id)
        request.entities.extend(entities)
        try:
            for reply in self.shell.stub.Read(request):
                yield from reply.entities
        except grpc.RpcError as exc:
            raise self._mapped(exc) from None

    def _mapped(self, exc: grpc.RpcError) -> SwitchError:
        code, details = exc.code(), exc.details()
        if code == grpc.StatusCode.PERMISSION_DENIED:
            return NotPrimary(f"switch {self.address}: {details}")
        if code == grpc.StatusCode.UNIMPLEMENTED:
            return Unsupported(f"switch {self.address}: {code.name}: {details}")
        if code in (
            grpc.StatusCode.UNAVAILABLE,
            grpc.StatusCode.DEADLINE_EXCEEDED,
            grpc.StatusCode.CANCELLED,
        ):
            return SwitchUnavailable(self.address, f"{code.name}: {details}")
        return SwitchError(f"switch {self.address}: {code.name}: {details}")


def set_job_params(cfg: JobConfig) -> dict[str, int]:
    """The ``set_job`` parameters of job table entry `cfg`."""
    return {
        "policy": int(cfg.policy),
        "fan_in": cfg.fan_in,
        "part_base": cfg.part_base,
        "part_size": cfg.part_size,
        "mcast_group": cfg.mcast_group,
        "ps_port": cfg.ps_port,
        "priority": cfg.priority,
    }


def _set_election(field: p4rt.Uint128, election: Election | None) -> None:
    """Fill a request's election id; a backup without one leaves it unset (and is refused)."""
    if election is not None:
        field.high, field.low = election


class _Shell(P4RuntimeClient):  # type: ignore[misc]
    """p4runtime-shell's client with a handshake that neither prints nor exits: it keeps the
    switch's answer (`arbitration`, None without one) and may give no election id."""

    arbitration: p4rt.MasterArbitrationUpdate | None = None

    def handshake(self) -> None:
        request = p4rt.StreamMessageRequest()
        request.arbitration.device_id = self.device_id
        _set_election(request.arbitration.election_id, self.election_id)
        self.stream_out_q.put(request)
        reply = self.get_stream_packet("arbitration", timeout=ARBITRATION_TIMEOUT_S)
        self.arbitration = None if reply is None else reply.arbitration
        role = "primary" if self.arbitration and self.arbitration.status.code == 0 else "backup"
        log.debug("P4Runtime session with device %d: %s", self.device_id, role)


def _connect(device_id: int, address: str, election_id: Election | None) -> _Shell:
    """A connected shell client; a refused or unanswered arbitration raises `SwitchError`."""
    shell = _Shell.__new__(_Shell)
    try:
        shell.__init__(device_id, address, election_id)  # type: ignore[misc]
    except SystemExit:
        # Only the channel set-up still exits; keep the reference so that the half-open
        # channel does not outlive the failure.
        _abandon(shell)
        raise SwitchUnavailable(address, "no P4Runtime channel") from None
    if shell.arbitration is None:
        stream = getattr(shell, "stream", None)
        _abandon(shell)
        if stream is not None and stream.done() and stream.code() != grpc.StatusCode.OK:
            # The switch ended the stream: another device id, an election id in use.
            code = stream.code()
            if code == grpc.StatusCode.UNAVAILABLE:
                raise SwitchUnavailable(address, f"{code.name}: {stream.details()}")
            raise SwitchError(f"switch {address}: {code.name}: {stream.details()}")
        raise SwitchUnavailable(address, "no P4Runtime session (no arbitration answer)")
    return shell


def _abandon(shell: P4RuntimeClient) -> None:
    """Close what a failed handshake left open."""
    channel = getattr(shell, "channel", None)
    if channel is not None:
        queue_out = getattr(shell, "stream_out_q", None)
        if queue_out is not None:
            queue_out.put(None)
        channel.close()
    thread = getattr(shell, "stream_recv_thread", None)
    if thread is not None:
        thread.join()
