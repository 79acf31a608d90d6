"""The switches of a fabric, for the service: started on loopback, or found at the topology
file's addresses, and one P4Runtime client each (`api.coordinator.fabriclink.FabricSwitches`).

With the `embedded` target every switch of the file is a `SoftSwitch` of this process, on the
file's `data` and `p4runtime` addresses or any free loopback port, sized by the file; with any
other target every switch must give both addresses in the file, and the service connects to
them. The root's data address is the `Topology`'s switch address (where the PS sends).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from p4ctl.backend import Endpoint

from api.coordinator.fabriclink import FabricSwitches
from api.settings import Settings
from scheduler.errors import TopologyError
from scheduler.fabric import Fabric, load_fabric, parse_address

__all__ = ["FabricAddresses", "connect_fabric", "open_fabric"]


@dataclass(frozen=True, slots=True)
class FabricAddresses:
    """A fabric and where each of its switches answers: ``{name: (P4Runtime, data)}``;
    `embedded` when this process runs them."""

    fabric: Fabric
    switches: dict[str, tuple[str, Endpoint]]
    embedded: bool

    @property
    def root_data(self) -> Endpoint:
        return self.switches[self.fabric.root.name][1]


def open_fabric(settings: Settings, closers: list[Callable[[], None]]) -> FabricAddresses:
    """The fabric of ``settings.switch.topology``, its soft switches started (their stops go to
    `closers`) with the `embedded` target; `TopologyError` naming the file and the field."""
    assert settings.switch.topology is not None
    fabric = load_fabric(settings.switch.topology)
    where = str(settings.switch.topology)
    if settings.switch.target != "embedded":
        for switch in fabric.switches:
            for key in ("p4runtime", "data"):
                value = getattr(switch, key)
                if value is None or parse_address(value, key)[1] == 0:
                    raise TopologyError(
                        f"{where}: switch {switch.name!r}: {key}: the service connects to a "
                        "switch it does not start at the file's address: give HOST:PORT"
                    )
        return FabricAddresses(
            fabric,
            {
                s.name: (str(s.p4runtime), Endpoint(*parse_address(s.data, "data")))
                for s in fabric.switches
            },
            embedded=False,
        )
    from p4ctl.softswitch import SoftSwitch

    started: dict[str, tuple[str, Endpoint]] = {}
    for s in fabric.switches:
        data = parse_address(s.data or "127.0.0.1:0", "data")
        p4runtime = parse_address(s.p4runtime or "127.0.0.1:0", "p4runtime")
        try:
            switch = SoftSwitch(
                aggregators=s.aggregators,
                lanes=fabric.lanes,
                data=data,
                p4runtime=p4runtime,
                gso=settings.switch.gso,
            ).start()
        except (OSError, ValueError) as exc:
            raise TopologyError(f"{where}: switch {s.name!r} cannot start: {exc}") from exc
        closers.append(switch.stop)
        started[s.name] = (switch.p4runtime_address, Endpoint(*switch.data_address))
    return FabricAddresses(fabric, started, embedded=True)


def connect_fabric(
    addresses: FabricAddresses,
    election: tuple[int, int],
    closers: list[Callable[[], None]],
) -> FabricSwitches:
    """A P4Runtime client of every switch with `election`, as one `FabricSwitches`; the
    clients' closes go to `closers`."""
    from p4ctl.client import SwitchClient

    fabric = addresses.fabric
    clients = {}
    for s in fabric.switches:
        p4runtime, _ = addresses.switches[s.name]
        # A soft switch started here is sized by the file; another keeps its pipeline's.
        sized = addresses.embedded
        client = SwitchClient(
            p4runtime,
            election_id=election,
            aggregators=s.aggregators if sized else None,
            lanes=fabric.lanes if sized else None,
        )
        closers.append(client.close)
        clients[s.name] = client
    return FabricSwitches(
        fabric, clients, {name: data for name, (_, data) in addresses.switches.items()}
    )
