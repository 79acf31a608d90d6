"""A job's tables on a tree of soft switches, written over each one's P4Runtime server.

`program_switch` sets the inasched pipeline on a `SoftSwitch` and returns a `ProgrammedSwitch`,
which numbers the switch's ports by the endpoints it is told of. `install_job_tree` writes one
job as ``p4/PROTOCOL.md`` 7.2 says: on its one ToR when its workers sit in one rack, else on
every ToR holding some of them (each ToR's parent entry written after its workers', 7.7) and on
the spine above them. The PS is registered by the caller with the `TreeInstall` returned.

The P4Info's ``set_job`` has no two-level fields yet: a ToR derives ``up_port`` and
``local_mask`` from these tables when it was started with its parent (7.7). `SwitchClient`
keeps one worker-255 entry per job (the PS), so a spine's several are written here directly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from p4.v1 import p4runtime_pb2 as p4rt
from p4runtime_sh.p4runtime import P4RuntimeClient

from p4ctl.client import set_job_params
from p4ctl.client_codec import P4Names, addr_int
from p4ctl.p4info import Sizing, build_p4info
from p4ctl.pipeline import Address
from p4ctl.protocol import PS_WORKER_ID
from p4ctl.rule import JobConfig
from p4ctl.softswitch import SoftSwitch

__all__ = ["ProgrammedSwitch", "TreeInstall", "install_job_tree", "program_switch"]


@dataclass
class ProgrammedSwitch:
    """One soft switch, its P4Runtime session and its ports, by the endpoint each reaches."""

    switch: SoftSwitch
    names: P4Names
    shell: P4RuntimeClient
    ports: dict[Address, int] = field(default_factory=dict)

    def port(self, address: Address) -> int:
        """The port toward `address`, its ``port_table`` entry written when it is new."""
        if address not in self.ports:
            self.ports[address] = len(self.ports) + 1
            params = {"addr": addr_int(address[0]), "udp_port": address[1]}
            entry = self.names.table_entry(
                "port_table", {"egress_port": self.ports[address]}, "set_endpoint", params
            )
            self.write([entry])
        return self.ports[address]

    def source(self, job: int, worker: int, address: Address) -> None:
        """Accept `job`'s packets from `address` as `worker` (255: the PS or another switch)."""
        match = {"job": job, "worker": worker, "src_addr": addr_int(address[0])}
        match["src_port"] = address[1]
        port = self.port(address)
        self.write([self.names.table_entry("worker_table", match, "allow_source", {"port": port})])

    def job(self, cfg: JobConfig, members: Sequence[Address]) -> None:
        """The job's multicast group (`members`) and its ``job_table`` entry."""
        entity = p4rt.Entity()
        group = entity.packet_replication_engine_entry.multicast_group_entry
        group.multicast_group_id = cfg.mcast_group
        for address in members:
            group.replicas.add(egress_port=self.port(address))
        key = {"job": cfg.job_id}
        self.write(
            [entity, self.names.table_entry("job_table", key, "set_job", set_job_params(cfg))]
        )

    def write(self, entities: list[p4rt.Entity]) -> None:
        request = p4rt.WriteRequest(device_id=0)
        request.election_id.low = 1
        for entity in entities:
            request.updates.add(type=p4rt.Update.INSERT, entity=entity)
        self.shell.write(request)

    def close(self) -> None:
        self.shell.tear_down()


def program_switch(switch: SoftSwitch) -> ProgrammedSwitch:
    """Connect to `switch`'s P4Runtime server as primary and set the pipeline of its sizing."""
    info = build_p4info(Sizing(switch.aggregators, switch.lanes))
    shell = P4RuntimeClient(0, switch.p4runtime_address, (0, 1))
    request = p4rt.SetForwardingPipelineConfigRequest(
        device_id=0, action=p4rt.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
    )
    request.election_id.low = 1
    request.config.p4info.CopyFrom(info)
    shell.stub.SetForwardingPipelineConfig(request)
    return ProgrammedSwitch(switch, P4Names(info), shell)


@dataclass(frozen=True)
class TreeInstall:
    """What the job's PS is told (``ParameterServer.register_job``): `root`, the switch its
    results go to, and `children`, the ToRs below a spine whose packets it also takes."""

    root: Address
    children: tuple[Address, ...]


def install_job_tree(
    cfg: JobConfig,
    racks: Sequence[tuple[ProgrammedSwitch, Mapping[int, Address]]],
    spine: ProgrammedSwitch | None,
    ps: Address,
) -> TreeInstall:
    """Install job `cfg` (its ``ps_port`` is set per switch) on the ToRs of `racks`, each
    with its workers' data addresses by worker id, and on `spine` when there are several."""
    two = len(racks) > 1
    if two and spine is None:
        raise ValueError(f"job {cfg.job_id}: workers under {len(racks)} ToRs need a spine")
    job = cfg.job_id
    for tor, workers in racks:
        for worker, address in workers.items():
            tor.source(job, worker, address)
        up = spine.switch.data_address if two and spine is not None else ps
        # Written last: the ToR sends up once it knows all its workers (7.7).
        tor.source(job, PS_WORKER_ID, up)
        tor.job(dataclasses.replace(cfg, ps_port=tor.port(ps)), list(workers.values()))
    if not two or spine is None:
        return TreeInstall(racks[0][0].switch.data_address, ())
    children = tuple(tor.switch.data_address for tor, _ in racks)
    for child in children:
        spine.source(job, PS_WORKER_ID, child)
    spine.source(job, PS_WORKER_ID, ps)
    spine.job(dataclasses.replace(cfg, ps_port=spine.port(ps)), children)
    return TreeInstall(spine.switch.data_address, children)
