"""The service on a fabric of switches it did not start (the file gives their addresses): it
connects to each, and a restarted service finds its jobs on them and restores them whole."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from p4ctl.protocol import PS_WORKER_ID
from p4ctl.softswitch import SoftSwitch
from pydantic import ValidationError

from api.http.app import create_app
from api.settings import Settings
from api.store.crud import create_tenant_token
from tests.api.conftest import LiveServer, wait_for

RACKS = {"tor0": "127.0.1.0/24", "tor1": "127.0.2.0/24"}


@pytest.fixture
def switches() -> Iterator[dict[str, SoftSwitch]]:
    spine = SoftSwitch(aggregators=64, lanes=64).start()
    parent = spine.data_address
    tors = {name: SoftSwitch(aggregators=64, lanes=64, parent=parent).start() for name in RACKS}
    yield {"spine": spine, **tors}
    for switch in (spine, *tors.values()):
        switch.stop()


def _topology(path: Path, switches: dict[str, SoftSwitch]) -> Path:
    def where(name: str) -> dict[str, str]:
        s = switches[name]
        return {"p4runtime": s.p4runtime_address, "data": "{}:{}".format(*s.data_address)}

    doc = {
        "lanes": 64,
        "switches": [
            {"name": "spine", "aggregators": 64, **where("spine")},
            *(
                {"name": name, "aggregators": 64, "parent": "spine", **where(name),
                 "rack": {"networks": [net]}}
                for name, net in RACKS.items()
            ),
        ],
    }  # fmt: skip
    path.write_text(json.dumps(doc))
    return path


def _sources(switch: SoftSwitch, sid: int) -> set[tuple[int, str, int]]:
    return {(w, host, port) for j, w, host, port in switch.pipeline.sources if j == sid}


def _ps(app: object) -> tuple[int, str, int]:
    """The embedded PS as a switch's worker table names it."""
    plane = app.state.service.plane  # type: ignore[attr-defined]
    return (PS_WORKER_ID, plane.ps.host, plane.ps.port)


def test_a_restarted_service_restores_its_jobs_on_every_switch(
    tmp_path: Path, switches: dict[str, SoftSwitch]
) -> None:
    settings = Settings(
        data_dir=tmp_path,
        tick_s=0.05,
        switch={"topology": _topology(tmp_path / "fabric.json", switches)},
        policy={"policy": "atp"},
    )
    app = create_app(settings)
    with app.state.service.sessions() as s:
        token = create_tenant_token(s, tenant="alice", admin=True)
    auth = {"Authorization": f"Bearer {token}"}
    with LiveServer(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        job = client.post(
            "/jobs",
            json={"name": "wide", "n_workers": 2, "iterations": 9, "gradient_bytes": 4096},
            headers=auth,
        ).json()
        wait_for(lambda: client.get(f"/jobs/{job['id']}", headers=auth).json()["state"]
                 == "admitted", "admission")  # fmt: skip
        for host, port in (("127.0.1.1", 41001), ("127.0.2.1", 41002)):
            joined = client.post(
                f"/jobs/{job['id']}/workers",
                json={"data_host": host, "data_port": port},
                headers={"Authorization": f"Bearer {job['join_token']}"},
            )
            assert joined.status_code == 201, joined.text
        sid = joined.json()["switch_job_id"]
        ps = _ps(app)
    before = {name: _sources(s, sid) - {ps} for name, s in switches.items()}
    assert (PS_WORKER_ID, *switches["spine"].data_address) in before["tor0"]
    for s in switches.values():  # what a switch that lost its state after the stop would hold
        s.pipeline.jobs.clear()
        s.pipeline.sources.clear()
    again = create_app(settings)
    with LiveServer(again) as url, httpx.Client(base_url=url, timeout=30) as client:
        wait_for(lambda: all(sid in s.pipeline.jobs for s in switches.values()), "the restore")
        ps = _ps(again)  # the embedded PS starts on a new port
        assert {name: _sources(s, sid) - {ps} for name, s in switches.items()} == before
        state = client.get(f"/jobs/{job['id']}", headers=auth).json()["state"]
        assert state == "running"


def test_a_topology_takes_no_switch_address(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="a topology names its own switches"):
        Settings(data_dir=tmp_path, switch={"topology": tmp_path / "t.json", "target": "h:1"})


def test_a_switch_connected_to_needs_its_data_address(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(
        json.dumps({"switches": [{"name": "s", "p4runtime": "127.0.0.1:1", "rack": {}}]})
    )
    app = create_app(Settings(data_dir=tmp_path, switch={"topology": path}))
    with pytest.raises(Exception, match="switch 's': data: a switch the service connects to"):
        app.state.service.start()
    app.state.service.stop()
