"""The switches of a fabric, for the service: connected to at the topology file's addresses or
started here, and one P4Runtime client each (`api.coordinator.fabriclink.FabricSwitches`).

A switch with a `p4runtime` address in the file is connected to there, and needs its `data`
address too. One without is an ``inasched switch`` process of its own (``python -m
p4ctl.softswitch``) on loopback, started parents first, a child with ``--parent`` its parent's
data address, on the file's `data` address or a free port, sized by the file; it logs to
``switch-NAME.log`` in the data dir and stops with the service. The root's data address is the
`Topology`'s switch address.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from p4ctl.backend import Endpoint

from api.coordinator.fabriclink import FabricSwitches
from api.settings import Settings
from scheduler.errors import TopologyError
from scheduler.fabric import Fabric, Switch, load_fabric, parse_address

__all__ = ["FabricAddresses", "connect_fabric", "open_fabric"]

# A soft switch process imports grpc and numpy and builds its pipeline before it listens:
# about a second here; a loaded machine may take several.
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
# Linux prctl(2) option: the signal a child gets when its parent dies.
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True, slots=True)
class FabricAddresses:
    """A fabric and where each of its switches answers: ``{name: (P4Runtime, data)}``;
    `processes` the switch processes this service started, by name."""

    fabric: Fabric
    switches: dict[str, tuple[str, Endpoint]]
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def root_data(self) -> Endpoint:
        return self.switches[self.fabric.root.name][1]


def open_fabric(settings: Settings, closers: list[Callable[[], None]]) -> FabricAddresses:
    """The fabric of ``settings.switch.topology``, the switches it gives no P4Runtime address
    started (their stops go to `closers`); `TopologyError` naming the file and the field."""
    assert settings.switch.topology is not None
    fabric = load_fabric(settings.switch.topology)
    where = str(settings.switch.topology)
    found: dict[str, tuple[str, Endpoint]] = {}
    processes: dict[str, subprocess.Popen[bytes]] = {}
    # Parents first: a child started here is given its parent's data address.
    for s in sorted(fabric.switches, key=lambda s: len(fabric.path_up(s.name))):
        if s.p4runtime is not None and parse_address(s.p4runtime, "p4runtime")[1] != 0:
            if s.data is None or parse_address(s.data, "data")[1] == 0:
                raise TopologyError(
                    f"{where}: switch {s.name!r}: data: a switch the service connects to (it has "
                    "a p4runtime address) needs its data address, HOST:PORT"
                )
            found[s.name] = (s.p4runtime, Endpoint(*parse_address(s.data, "data")))
            continue
        parent = found[s.parent][1] if s.parent is not None else None
        log_path = settings.data_dir / f"switch-{s.name}.log"
        process, p4runtime, data = _start(s, fabric.lanes, parent, settings.switch.gso, log_path)
        closers.append(partial(_stop, process))
        try:
            _wait_listening(process, p4runtime, log_path)
        except TopologyError as exc:
            raise TopologyError(f"{where}: switch {s.name!r} did not start: {exc}") from None
        found[s.name] = (f"{p4runtime[0]}:{p4runtime[1]}", Endpoint(*data))
        processes[s.name] = process
    ordered = {s.name: found[s.name] for s in fabric.switches}
    return FabricAddresses(fabric, ordered, processes)


def _free_port(kind: socket.SocketKind) -> int:
    """A port free on loopback now (the switch binds it a moment later)."""
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _start(
    switch: Switch, lanes: int, parent: Endpoint | None, gso: bool, log_path: Path
) -> tuple[subprocess.Popen[bytes], tuple[str, int], tuple[str, int]]:
    """``(process, P4Runtime address, data address)`` of `switch` started as a process."""
    data = parse_address(switch.data or "127.0.0.1:0", "data")
    if data[1] == 0:
        data = (data[0], _free_port(socket.SOCK_DGRAM))
    p4runtime = parse_address(switch.p4runtime or "127.0.0.1:0", "p4runtime")
    if p4runtime[1] == 0:
        p4runtime = (p4runtime[0], _free_port(socket.SOCK_STREAM))
    argv = [
        sys.executable, "-m", "p4ctl.softswitch",
        "--data", f"{data[0]}:{data[1]}",
        "--p4runtime", f"{p4runtime[0]}:{p4runtime[1]}",
        "--aggregators", str(switch.aggregators),
        "--lanes", str(lanes),
        "--gso", "on" if gso else "off",
        "--log-level", "WARNING",
    ]  # fmt: skip
    if parent is not None:
        argv += ["--parent", f"{parent.host}:{parent.port}"]
    with log_path.open("ab") as log_file:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
            preexec_fn=_own_session,  # noqa: PLW1509 (async-signal-safe calls only)
        )
    return process, p4runtime, data


def _own_session() -> None:
    """In the switch process before it runs: out of the terminal's process group, so that
    Ctrl-C reaches the service alone, which stops its switches after its last writes to them;
    and SIGTERM when the service dies without stopping them (Linux)."""
    os.setsid()
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


def _wait_listening(
    process: subprocess.Popen[bytes], address: tuple[str, int], log_path: Path
) -> None:
    """Return once `process` accepts connections on its P4Runtime `address`."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
            raise TopologyError(
                f"it exited with status {process.returncode}: {' / '.join(tail)} ({log_path})"
            )
        try:
            with socket.create_connection(address, timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                _stop(process)
                raise TopologyError(
                    f"no P4Runtime server on {address[0]}:{address[1]} after "
                    f"{START_TIMEOUT_S:g} s ({log_path})"
                ) from None
            time.sleep(0.05)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the switch stops cleanly), then SIGKILL if it does not end in time."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


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
        # The file's sizing: pushed to a switch with no pipeline yet, checked against the one
        # a running switch has (a file that disagrees with its switch is refused, named).
        client = SwitchClient(
            p4runtime, election_id=election, aggregators=s.aggregators, lanes=fabric.lanes
        )
        closers.append(client.close)
        clients[s.name] = client
    return FabricSwitches(
        fabric, clients, {name: data for name, (_, data) in addresses.switches.items()}
    )
