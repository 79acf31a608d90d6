"""A job on a tree of switches whose racks the caller names, as ``p4/PROTOCOL.md`` 7.2 says.

`install_job_tree` writes one job through each switch's `SwitchClient`: on its one ToR when its
workers sit in one rack, else on every ToR holding some of them and on the spine above, whose
children (the ToRs) are linked down; the ToRs' links up to the spine are written last, once
every switch holds the job, so that no sum goes up early (7.7). Without a spine (`spine`
None, or one with no memory for the job) a cross-rack job spills (7.8): it is installed on its
ToRs only, whose parent is then the PS (the ToRs must be started with a parent, 7.7). The
service installs trees (not spills) the same way with the ToR found from each worker's address
(``api.coordinator.fabriclink``); this is for switches wired by hand, where the caller says
which ToR each worker is under (the two-level test, ``bench.allreduce --topology``). The PS
is registered by the caller with the `TreeInstall` returned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from p4ctl.backend import Endpoint, JobInstall
from p4ctl.client import SwitchClient
from p4ctl.pipeline import Address

__all__ = ["TreeInstall", "TreeSwitch", "install_job_tree"]


@dataclass(frozen=True)
class TreeSwitch:
    """One switch of a tree: its P4Runtime client and its UDP data address."""

    client: SwitchClient
    data: Address


@dataclass(frozen=True)
class TreeInstall:
    """What the job's PS is told (``ParameterServer.register_job``): `root`, the switch its
    results go to, and `children`, the ToRs below a spine whose packets it also takes; a
    `spill` job has no root: `root` is its first ToR, and results go to it and each child."""

    root: Address
    children: tuple[Address, ...]
    spill: bool = False


def install_job_tree(
    job: JobInstall,
    racks: Sequence[tuple[TreeSwitch, Mapping[int, Endpoint]]],
    spine: TreeSwitch | None,
) -> TreeInstall:
    """Install `job` on the ToRs of `racks`, each with its workers' endpoints by worker id,
    and on `spine` when there are several ToRs (none: the job spills to its PS)."""
    if len(racks) == 1:
        ((tor, workers),) = racks
        _install(tor, job, workers)
        return TreeInstall(tor.data, ())
    for tor, workers in racks:
        _install(tor, job, workers)
    if spine is None:
        tors = tuple(tor.data for tor, _ in racks)
        return TreeInstall(tors[0], tors[1:], spill=True)
    _install(spine, job, {})
    for tor, _ in racks:
        spine.client.add_link(job.job_id, Endpoint(*tor.data), down=True)
    for tor, _ in racks:
        tor.client.add_link(job.job_id, Endpoint(*spine.data), down=False)
    return TreeInstall(spine.data, tuple(tor.data for tor, _ in racks))


def _install(switch: TreeSwitch, job: JobInstall, workers: Mapping[int, Endpoint]) -> None:
    switch.client.install_job(job)
    for worker, endpoint in workers.items():
        switch.client.add_worker(job.job_id, worker, endpoint)
