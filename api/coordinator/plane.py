"""The data plane of a service: what forwards gradients, which needs no store.

`DataPlane` is the embedded soft switch (when the settings name none elsewhere) and the PS
(started in this process, or one of its own reached over its control channel), with the data
endpoint the workers send to. A service keeps it from one leadership term to the next while no
other service leads (`api.coordinator.runtime`); each term connects its own P4Runtime client
(`switch_client`) with the term's election id. `connect_switch` is the switch and its client in
one call, for tools and tests.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from p4ctl.backend import Endpoint, InMemorySwitch, SwitchBackend, parse_wiring

from api.coordinator.leader import election_id
from api.coordinator.topology import PsRegistry, Topology
from api.settings import Settings, parse_hostport

if TYPE_CHECKING:
    from p4ctl.client import SwitchClient
    from p4ctl.softswitch import SoftSwitch

    from api.coordinator.fabricplane import FabricAddresses

__all__ = [
    "DISCARD",
    "DataPlane",
    "close_all",
    "connect_switch",
    "endpoint",
    "start_embedded_switch",
    "start_ps",
    "switch_client",
    "switch_data_of",
]

log = logging.getLogger(__name__)
# RFC 863 discard: where the in-memory backend "sends" (nothing is ever sent there).
DISCARD = Endpoint("127.0.0.1", 9)


@dataclass
class DataPlane:
    """What forwards gradients from this process, kept from one term to the next while no other
    service leads (it does not need the store): the data endpoint the workers send to, the
    embedded switch's P4Runtime address (None: the switch is elsewhere), and the PS."""

    switch_data: Endpoint
    ps: Endpoint
    registry: PsRegistry | None
    p4runtime: str | None = None
    closers: list[Callable[[], None]] = field(default_factory=list)
    # A fabric of switches (INASCHED_SWITCH_TOPOLOGY) instead of one.
    fabric: FabricAddresses | None = None

    @property
    def topology(self) -> Topology:
        return Topology(switch_data=self.switch_data, ps=self.ps)

    def close(self) -> None:
        close_all(self.closers)


def endpoint(text: str | None) -> Endpoint | None:
    return Endpoint(*parse_hostport(text)) if text else None


def close_all(closers: list[Callable[[], None]]) -> None:
    """Run and empty `closers`, newest first; one that fails is logged, the rest still run."""
    while closers:
        closer = closers.pop()
        try:
            closer()
        except Exception:
            log.exception("error while stopping %r", closer)


def connect_switch(
    settings: Settings,
    closers: list[Callable[[], None]],
    election: tuple[int, int] = election_id(1),
) -> tuple[SwitchBackend, Endpoint]:
    """``(backend, switch data-plane endpoint)`` as `settings` say, a P4Runtime switch with
    `election` as this controller's election id; cleanups go to `closers`."""
    if settings.switch.target == "memory":
        backend: SwitchBackend = InMemorySwitch(settings.switch.aggregators, settings.switch.lanes)
        return backend, endpoint(settings.switch.data) or DISCARD
    if settings.switch.target == "embedded":
        switch = start_embedded_switch(settings, closers)
        client = switch_client(settings, election, embedded=switch.p4runtime_address)
        closers.append(client.close)
        return client, Endpoint(*switch.data_address)
    switch_data = switch_data_of(settings)
    client = switch_client(settings, election)
    closers.append(client.close)
    return client, switch_data


def start_embedded_switch(settings: Settings, closers: list[Callable[[], None]]) -> SoftSwitch:
    """A started soft switch sized as `settings` say, on their data port; its stop goes to
    `closers`."""
    from p4ctl.softswitch import SoftSwitch

    switch = SoftSwitch(
        aggregators=settings.switch.aggregators,
        lanes=settings.switch.lanes,
        data=("127.0.0.1", settings.switch.data_port),
        gso=settings.switch.gso,
    ).start()
    closers.append(switch.stop)
    return switch


def switch_client(
    settings: Settings, election: tuple[int, int], *, embedded: str | None = None
) -> SwitchClient:
    """A P4Runtime client with `election` of the `embedded` switch (its address), or of the
    switch the settings name."""
    from p4ctl.client import SwitchClient

    if embedded is not None:
        # Read and written over P4Runtime like any other target: on the upb protobuf runtime a
        # full read of occupancy and counters of 20,480 aggregators takes 0.13-0.26 s here
        # (python -m bench.p4rt_read), against 4-7 s on pure-Python protobuf.
        return SwitchClient(
            embedded,
            election_id=election,
            aggregators=settings.switch.aggregators,
            lanes=settings.switch.lanes,
        )
    # A switch that already runs our pipeline keeps its sizing (the client reads it); one with
    # no pipeline yet gets the sizing given in the settings, or the P4Info defaults.
    given = settings.switch.model_fields_set
    program = (
        settings.switch.p4_config.read_bytes() if settings.switch.p4_config is not None else b""
    )
    # A target that refuses register access (PI) without --switch-thrift still schedules: jobs,
    # priorities and workers are table entries. The client has logged what is lost
    # (`registers_unavailable`): the dashboard's occupancy stays empty and nothing is reclaimed.
    return SwitchClient(
        settings.switch.target,
        device_id=settings.switch.device_id,
        election_id=election,
        aggregators=settings.switch.aggregators if "aggregators" in given else None,
        lanes=settings.switch.lanes if "lanes" in given else None,
        device_config=program,
        register_thrift=settings.switch.thrift,
        wiring=parse_wiring(settings.switch.ports or ""),
    )


def switch_data_of(settings: Settings) -> Endpoint:
    """The UDP data address of a switch named by address (it cannot be asked for it)."""
    if settings.switch.data is None:
        raise ValueError(
            f"the switch at {settings.switch.target} needs its UDP data address: "
            "set INASCHED_SWITCH_DATA=HOST:PORT (or --switch-data)"
        )
    return Endpoint(*parse_hostport(settings.switch.data))


def start_ps(
    settings: Settings, switch_data: Endpoint, closers: list[Callable[[], None]]
) -> tuple[Endpoint, PsRegistry | None]:
    """``(PS endpoint, registry)``: a configured PS, which the scheduler registers jobs with
    over its control channel (``workers.ps_control``), or a PS started in this process."""
    configured = endpoint(settings.ps.address)
    if configured is not None:
        if settings.ps.control is None or settings.ps.secret is None:
            raise ValueError(
                f"the PS at {settings.ps.address} serves only jobs the service registers: set "
                "INASCHED_PS_CONTROL=HOST:PORT (its --control-port) and INASCHED_PS_SECRET "
                "(the secret it was started with)"
            )
        from workers.ps_control import RemotePs, load_secret

        control = parse_hostport(settings.ps.control)
        return configured, RemotePs(control, load_secret(settings.ps.secret.get_secret_value()))
    if switch_data == DISCARD:
        return DISCARD, None  # no data plane, so nothing will ever reach a PS
    from workers.ps import ParameterServer

    ps = ParameterServer("127.0.0.1", 0, gso=settings.switch.gso).start()
    closers.append(ps.stop)
    return Endpoint(*ps.address), ps
