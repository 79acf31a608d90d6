"""/metrics: the parameter server's counters next to the switch's."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest
from p4ctl.backend import InMemorySwitch
from p4ctl.protocol import Flag, Kind, Packet, encode

from api.http.app import create_app
from api.settings import Settings
from api.store.crud import create_tenant_token
from tests.api.conftest import LiveServer, wait_for
from workers.ps import ParameterServer

SAMPLE = re.compile(r"^(\w+)(\{[^}]*\})? (\S+)$")


@dataclass
class PsRig:
    client: httpx.Client
    ps: ParameterServer
    switch_socket: socket.socket  # the PS takes it for the switch: its packets are accepted
    token: str


@pytest.fixture
def ps_rig(tmp_path: Path) -> Iterator[PsRig]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    host, port = sock.getsockname()
    # A data-plane address makes the service start its embedded PS, even on the in-memory
    # switch; the address is this test's socket, so it plays the switch.
    settings = Settings(
        data_dir=tmp_path, switch={"target": "memory", "data": f"{host}:{port}", "aggregators": 256}
    )
    app = create_app(
        settings, backend=InMemorySwitch(settings.switch.aggregators, settings.switch.lanes)
    )
    with app.state.service.sessions() as session:
        token = create_tenant_token(session, tenant="alice")
    try:
        with LiveServer(app) as url, httpx.Client(base_url=url, timeout=30) as client:
            ps = app.state.service.coordinator.ps_registry
            assert isinstance(ps, ParameterServer)
            yield PsRig(client=client, ps=ps, switch_socket=sock, token=token)
    finally:
        sock.close()


def samples(text: str) -> dict[str, float]:
    """``{"name{labels}": value}`` of every sample line."""
    found = {}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match and not line.startswith("#"):
            found[match[1] + (match[2] or "")] = float(match[3])
    return found


def test_ps_counters_appear_on_metrics(ps_rig: PsRig) -> None:
    auth = {"Authorization": f"Bearer {ps_rig.token}"}
    body = {"name": "ps", "n_workers": 2, "iterations": 5, "gradient_bytes": 4096}
    job = ps_rig.client.post("/jobs", json=body, headers=auth).json()
    joined = ps_rig.client.post(
        f"/jobs/{job['id']}/workers",
        json={"data_host": "127.0.0.1", "data_port": 40001},
        headers={"Authorization": f"Bearer {job['join_token']}"},
    ).json()
    ps_address = (joined["ps"]["host"], joined["ps"]["port"])
    assert ps_address == ps_rig.ps.address
    lanes = np.arange(64, dtype=np.int32)
    bypassed = Packet(
        kind=Kind.TO_PS, flags=Flag.BYPASSED, job=joined["switch_job_id"], worker=0,
        fan_in=2, bitmap=1, seq=0, lanes=lanes,
    )  # fmt: skip
    ps_rig.switch_socket.sendto(encode(bypassed), ps_address)
    ps_rig.switch_socket.sendto(b"too short", ps_address)
    wait_for(lambda: ps_rig.ps.counters().received == 2, "the PS to receive both datagrams")

    seen = samples(ps_rig.client.get("/metrics").text)
    counters = ps_rig.ps.counters()
    assert seen["inasched_ps_received_total"] == 2
    assert counters.outcomes and counters.drops
    for outcome, n in counters.outcomes.items():
        assert seen[f'inasched_ps_outcomes_total{{outcome="{outcome}"}}'] == n
    for reason, n in counters.drops.items():
        assert seen[f'inasched_ps_drops_total{{reason="{reason}"}}'] == n
    assert sum(counters.outcomes.values()) == 1 and sum(counters.drops.values()) == 1
    assert seen["inasched_ps_jobs"] == len(counters.jobs) == 1


def test_without_a_ps_in_the_process_its_families_are_declared_without_samples(
    tmp_path: Path,
) -> None:
    settings = Settings(data_dir=tmp_path, switch={"target": "memory", "aggregators": 256})
    app = create_app(settings, backend=InMemorySwitch(256, 64))
    with LiveServer(app) as url:
        text = httpx.get(f"{url}/metrics").text
    assert "# TYPE inasched_ps_drops_total counter" in text
    assert not any(name.startswith("inasched_ps_") for name in samples(text))
