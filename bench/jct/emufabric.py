"""``inasched bench jct --emu --topology FILE``: the emulation on a fabric of soft switches.

Each policy runs in a fresh loopback service on the file's fabric (``switch.topology``: one
``inasched switch`` process per switch, parents first; docs/fabric-service.md), with the embedded PS
and one ``inasched worker`` process per server, as `bench.jct.emu` runs them on one switch.
Where a job's workers are is the simulator's: `placements` runs ``scheduler.fabricsim`` on
the same jobs, policy and fabric and reads each job's racks (``--placement``), so ``--sim
--topology`` and ``--emu --topology`` run the same job-to-rack mapping. A worker binds an
address of its rack's ``networks`` (one address each, in rack order), from which the service
tells it its ToR. The emulation runs one worker per server, so the file's ``gpus_per_server``
must be 1. The service schedules the switch policies only (static, atp, esa on every switch of
a job's tree, one placement per job on a pool the size of the smallest switch:
docs/fabric-service.md); the fabric policies (``tiered``) are the simulator's alone.
"""

from __future__ import annotations

import ipaddress
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.jct.emu import EmuConfig, EmuError, _run_policy, emu_config
from bench.jct.fabric import FabricSetting
from bench.jct.params import BenchParams
from bench.jct.results import PolicyRun
from bench.jct.sim import sim_config
from scheduler.fabric import Fabric, dump_fabric
from scheduler.fabricsim import simulate_fabric
from scheduler.registry import FABRIC_POLICIES
from scheduler.workload import JobSpec

__all__ = ["emu_fabric_runner", "placements", "worker_hosts"]


def placements(
    jobs: Sequence[JobSpec], policy: str, params: BenchParams, setting: FabricSetting
) -> dict[int, tuple[tuple[str, int], ...]]:
    """``{job id: ((tor, servers), ...)}``: where the fabric simulator places each job when
    it runs `policy` on `jobs`; EmuError names a job it did not run."""
    run = simulate_fabric(
        jobs,
        sim_config(policy, params),
        setting.fabric(),
        policy=policy,
        placement=setting.placement,
    )
    placed = {j.job_id: j.racks for j in run.jobs}
    missing = sorted(j.job_id for j in jobs if j.job_id not in placed)
    if missing:
        raise EmuError(
            f"the fabric simulator did not run jobs {missing} under {policy}, so they have no "
            "placement to emulate: give the fabric more servers or memory"
        )
    return placed


def worker_hosts(
    jobs: Sequence[JobSpec], placed: dict[int, tuple[tuple[str, int], ...]], fabric: Fabric
) -> list[str]:
    """One data address per worker, in submission order (job, then worker): a job's workers
    in its racks' order, each an address of its rack's first network not given before."""
    free: dict[str, Any] = {}
    for tor in fabric.tors:
        assert tor.rack is not None
        if not tor.rack.networks:
            raise EmuError(
                f"ToR {tor.name} has no networks: the emulation binds each worker to an address "
                "of its rack's networks (docs/topology.md)"
            )
        free[tor.name] = ipaddress.ip_network(tor.rack.networks[0]).hosts()
    out: list[str] = []
    for job in jobs:
        racks = placed[job.job_id]
        if sum(n for _, n in racks) != job.workers:
            raise EmuError(
                f"job {job.job_id} has {job.workers} workers on {racks}: the emulation runs one "
                "worker per server; give the topology gpus_per_server 1"
            )
        for tor_name, servers in racks:
            for _ in range(servers):
                host = next(free[tor_name], None)
                if host is None:
                    raise EmuError(f"rack of {tor_name}: its first network has no address left")
                out.append(str(host))
    return out


def emu_fabric_runner(setting: FabricSetting, config: EmuConfig | None = None) -> Any:
    """A `PolicyRunner` that runs one switch policy in a fresh loopback service on the fabric
    of `setting`, its workers where the fabric simulator places them (module docstring);
    `config` scales the jobs and gives the window (its pool is the file's, per switch)."""

    def run(jobs: Sequence[JobSpec], policy: str, params: BenchParams) -> PolicyRun:
        cfg = config or emu_config("default")
        if policy in FABRIC_POLICIES:
            raise EmuError(
                f"{policy} decides per switch where a job aggregates, which the service does not "
                "run yet (it installs one placement on every switch of a job's tree): emulate "
                "the switch policies"
            )
        fabric = setting.fabric()
        if fabric.gpus_per_server != 1:
            raise EmuError(
                f"the topology has {fabric.gpus_per_server} GPUs per server: the emulation runs "
                "one worker per server; give it gpus_per_server 1"
            )
        sized = params.with_settings([f"window={cfg.window}"])
        hosts = worker_hosts(jobs, placements(jobs, policy, sized, setting), fabric)
        with tempfile.TemporaryDirectory(prefix="inasched-emu-fabric-") as tmp:
            topology = Path(tmp) / "topology.json"
            dump_fabric(fabric, topology)
            return _run_policy(jobs, policy, params, cfg, Path(tmp), hosts, topology)

    return run
