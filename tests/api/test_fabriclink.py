"""`FabricSwitches` over in-memory switches: the tree a job is written on at any depth, a
worker that moves racks, and a switch that stops answering."""

from __future__ import annotations

import pytest
from p4ctl.backend import Endpoint, InMemorySwitch, JobInstall
from p4ctl.errors import SwitchUnavailable
from p4ctl.protocol import PS_WORKER_ID, Policy

from api.coordinator.fabriclink import LOST_AFTER_S, FabricSwitches, NotUnderATor
from scheduler.fabric import Fabric, Rack, Switch

PS = Endpoint("127.0.0.1", 7000)


def _fabric() -> Fabric:
    """spine over agg0 (tor0, tor1) and agg1 (tor2)."""

    def tor(name: str, parent: str, net: str) -> Switch:
        return Switch(name, 64, parent, rack=Rack(networks=(net,)))

    return Fabric(
        (
            Switch("spine", 64),
            Switch("agg0", 64, "spine"),
            Switch("agg1", 64, "spine"),
            tor("tor0", "agg0", "10.0.0.0/24"),
            tor("tor1", "agg0", "10.0.1.0/24"),
            tor("tor2", "agg1", "10.0.2.0/24"),
        )
    )


class Gone(InMemorySwitch):
    """A switch whose control plane stopped answering once `gone` is set."""

    gone = False

    def __getattribute__(self, name: str) -> object:
        if name in ("install_job", "add_worker", "add_link", "remove_job", "occupancy",
                    "counters", "installed_jobs", "reclaim") and object.__getattribute__(
            self, "gone"
        ):  # fmt: skip
            raise SwitchUnavailable("tor1", "UNAVAILABLE: refused")
        return object.__getattribute__(self, name)


@pytest.fixture
def fabric() -> tuple[FabricSwitches, dict[str, InMemorySwitch]]:
    switches: dict[str, InMemorySwitch] = {
        s.name: (Gone if s.name == "tor1" else InMemorySwitch)(64, 64) for s in _fabric().switches
    }
    data = {name: Endpoint("127.0.0.1", 9000 + i) for i, name in enumerate(switches)}
    return FabricSwitches(_fabric(), switches, data, clock=CLOCK), switches


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


CLOCK = Clock()


def _links(switch: InMemorySwitch, sid: int) -> set[int]:
    """Ports of the UDP data addresses registered as worker 255 for job `sid`, but the PS."""
    return {udp for (j, w, _, udp) in switch.pipeline.sources if j == sid and w == PS_WORKER_ID} - {
        PS.port
    }


def _join(links: FabricSwitches, sid: int, hosts: list[str]) -> None:
    links.install_job(JobInstall(sid, Policy.ATP, len(hosts), ps=PS))
    for worker, host in enumerate(hosts):
        links.add_worker(sid, worker, Endpoint(host, 5000 + worker))


def test_a_job_is_written_up_to_the_lowest_common_switch_only(
    fabric: tuple[FabricSwitches, dict[str, InMemorySwitch]],
) -> None:
    links, switches = fabric
    trees: list[tuple[int, Endpoint, tuple[Endpoint, ...]]] = []
    links.on_tree = lambda sid, top, below: trees.append((sid, top, below))
    _join(links, 3, ["10.0.0.1", "10.0.1.1", "10.0.0.2"])
    assert links.trees() == {3: ("tor0", "tor1", "agg0")}
    assert {n for n, s in switches.items() if 3 in s.installed_jobs()} == {"tor0", "tor1", "agg0"}
    data = links.data
    assert _links(switches["tor0"], 3) == {data["agg0"].port}  # its parent, up
    assert _links(switches["agg0"], 3) == {data["tor0"].port, data["tor1"].port}  # no parent
    assert switches["agg0"].pipeline.groups[4] != ()  # the children, down
    assert trees == [(3, data["agg0"], (data["tor0"], data["tor1"]))]
    # Job-wide worker ids at each ToR, fan-in the job's everywhere.
    assert {w for (j, w, _, _) in switches["tor0"].pipeline.sources if j == 3} == {0, 2, 255}
    assert switches["agg0"].pipeline.jobs[3].fan_in == 3


def test_a_job_in_one_rack_is_its_tor_alone(
    fabric: tuple[FabricSwitches, dict[str, InMemorySwitch]],
) -> None:
    links, switches = fabric
    _join(links, 5, ["10.0.2.1", "10.0.2.2"])
    assert links.trees() == {5: ("tor2",)}
    assert {n for n, s in switches.items() if s.installed_jobs()} == {"tor2"}
    assert _links(switches["tor2"], 5) == set()


def test_a_worker_that_moves_racks_moves_the_tree(
    fabric: tuple[FabricSwitches, dict[str, InMemorySwitch]],
) -> None:
    links, switches = fabric
    _join(links, 1, ["10.0.2.1", "10.0.2.2"])
    links.add_worker(1, 1, Endpoint("10.0.0.9", 5001))
    assert links.trees() == {1: ("tor2", "tor0", "agg1", "agg0", "spine")}
    links.add_worker(1, 1, Endpoint("10.0.2.3", 5001))
    assert links.trees() == {1: ("tor2",)}
    assert {n for n, s in switches.items() if s.installed_jobs()} == {"tor2"}


def test_a_worker_under_no_tor_is_named(
    fabric: tuple[FabricSwitches, dict[str, InMemorySwitch]],
) -> None:
    links, _ = fabric
    with pytest.raises(NotUnderATor, match="10.9.9.9 is in no rack's networks .tor0: 10.0.0.0/24"):
        links.tor_of("10.9.9.9")


def test_a_lost_switch_is_named_and_its_jobs_freed_elsewhere(
    fabric: tuple[FabricSwitches, dict[str, InMemorySwitch]],
) -> None:
    links, switches = fabric
    _join(links, 2, ["10.0.0.1", "10.0.1.1"])
    _join(links, 4, ["10.0.0.5"])
    switches["tor0"].pipeline.registers.agg_state[7] = 1  # job 2 holds an aggregator on tor0
    switches["tor0"].pipeline.registers.agg_job[7] = 2
    switches["tor1"].gone = True  # type: ignore[attr-defined]
    links.occupancy()
    assert links.lost() == {}  # a blip is not a loss
    CLOCK.now += LOST_AFTER_S
    occupancy = links.occupancy()
    assert links.lost() == {"tor1": "switch at tor1 is unavailable: UNAVAILABLE: refused"}
    assert links.touching(links.lost()) == {2: "tor1"}
    read = {r.name: r for r in links.reads()}
    assert read["tor1"].occupancy.unavailable.startswith("switch tor1 went away")
    assert read["tor1"].lost and not read["tor0"].lost
    assert occupancy.held_by(2) == 1  # what the switches still answering hold
    links.remove_job(2)
    assert switches["tor0"].installed_jobs() == {4}
    assert switches["tor0"].occupancy().held_by(2) == 0
    assert 2 not in switches["agg0"].installed_jobs()
