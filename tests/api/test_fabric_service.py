"""The service on a fabric of soft switch processes (real P4Runtime servers, one per switch):
a worker learns its ToR, a job is installed on each switch of its tree as p4/PROTOCOL.md 7.2
says and removed from all of them, a switch that goes away fails the jobs of its tree."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from p4.v1 import p4runtime_pb2 as p4rt
from p4ctl.client import SwitchClient
from p4ctl.client_codec import addr_str

from api.http.app import create_app
from api.settings import Settings
from api.store.crud import create_tenant_token
from tests.api.conftest import LiveServer, wait_for

SWITCHES = ("spine", "tor0", "tor1")


@dataclass(frozen=True, slots=True)
class Tables:
    """What a switch's P4Runtime server answers for one job."""

    sources: set[tuple[int, tuple[str, int]]]  # (worker id, source address)
    group: set[tuple[str, int]]  # the addresses its multicast group sends to


@dataclass
class Fabric:
    client: httpx.Client
    token: str
    switches: dict[str, tuple[str, tuple[str, int]]]  # name -> (P4Runtime, data address)
    processes: dict[str, subprocess.Popen[bytes]]
    ps: tuple[str, int]

    def auth(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.token}"}

    def submit(self, n_workers: int) -> dict[str, object]:
        body = {"name": "job", "n_workers": n_workers, "iterations": 1000, "gradient_bytes": 4096}
        answer = self.client.post("/jobs", json=body, headers=self.auth())
        assert answer.status_code == 201, answer.text
        job: dict[str, object] = answer.json()
        wait_for(lambda: self.job(job)["state"] == "admitted", "admission")
        return job

    def job(self, job: dict[str, object]) -> dict[str, object]:
        answer = self.client.get(f"/jobs/{job['id']}", headers=self.auth())
        result: dict[str, object] = answer.json()
        return result

    def join(self, job: dict[str, object], host: str, port: int) -> httpx.Response:
        return self.client.post(
            f"/jobs/{job['id']}/workers",
            json={"data_host": host, "data_port": port},
            headers=self.auth(str(job["join_token"])),
        )

    def data(self, name: str) -> tuple[str, int]:
        return self.switches[name][1]

    def holding(self, name: str) -> set[int]:
        """The switch job ids switch `name` holds, as a P4Runtime reader sees them."""
        with SwitchClient(self.switches[name][0], election_id=None) as reader:
            return reader.installed_jobs()

    def tables(self, name: str, sid: int) -> Tables:
        """Switch `name`'s worker table and multicast group for job `sid`, over P4Runtime."""
        with SwitchClient(self.switches[name][0], election_id=None) as reader:
            names, stub = reader.names, reader.shell.stub
            read = p4rt.ReadRequest(device_id=0)
            read.entities.add().table_entry.table_id = names.table_id["worker_table"]
            read.entities.add().table_entry.table_id = names.table_id["port_table"]
            group = read.entities.add().packet_replication_engine_entry
            group.multicast_group_entry.multicast_group_id = sid + 1
            entities = [e for reply in stub.Read(read) for e in reply.entities]
        ports: dict[int, tuple[str, int]] = {}
        sources: set[tuple[int, tuple[str, int]]] = set()
        members: list[int] = []
        for entity in entities:
            if entity.HasField("packet_replication_engine_entry"):
                replicas = entity.packet_replication_engine_entry.multicast_group_entry.replicas
                members = [r.egress_port for r in replicas]
                continue
            entry = entity.table_entry
            key, params = names.match_values(entry), names.action_values(entry)
            if entry.table_id == names.table_id["port_table"]:
                ports[key[0]] = (addr_str(params["addr"]), params["udp_port"])
            elif key[0] == sid:
                sources.add((key[1], (addr_str(key[2]), key[3])))
        return Tables(sources, {ports[port] for port in members})


@pytest.fixture
def fabric(tmp_path: Path) -> Iterator[Fabric]:
    topology = tmp_path / "fabric.json"
    tor = {"parent": "spine", "aggregators": 128}
    topology.write_text(
        json.dumps(
            {
                "lanes": 64,
                "switches": [
                    {"name": "spine", "aggregators": 128},
                    {"name": "tor0", **tor, "rack": {"networks": ["127.0.1.0/24"]}},
                    {"name": "tor1", **tor, "aggregators": 256,
                     "rack": {"networks": ["127.0.2.0/24"]}},
                ],
            }
        )
    )  # fmt: skip
    settings = Settings(
        data_dir=tmp_path,
        tick_s=0.05,
        heartbeat_timeout_s=60.0,
        switch={"target": "embedded", "topology": topology},
        policy={"policy": "atp"},
    )
    app = create_app(settings)
    service = app.state.service
    with service.sessions() as s:
        token = create_tenant_token(s, tenant="alice", admin=True)
    with LiveServer(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        plane = service.plane
        assert plane is not None and plane.fabric is not None
        switches = {
            name: (p4runtime, (data.host, data.port))
            for name, (p4runtime, data) in plane.fabric.switches.items()
        }
        ps = (plane.ps.host, plane.ps.port)
        yield Fabric(client, token, switches, plane.fabric.processes, ps)


def _data(fabric: Fabric, name: str) -> dict[str, object]:
    host, port = fabric.data(name)
    return {"host": host, "port": port}


def test_a_worker_learns_its_tors_data_address(fabric: Fabric) -> None:
    job = fabric.submit(2)
    first = fabric.join(job, "127.0.1.5", 41001)
    second = fabric.join(job, "127.0.2.5", 41002)
    assert first.status_code == second.status_code == 201
    assert first.json()["switch"] == _data(fabric, "tor0")
    assert second.json()["switch"] == _data(fabric, "tor1")
    stray = fabric.join(fabric.submit(1), "127.0.0.1", 41003)
    assert stray.status_code == 422
    assert "in no rack's networks (tor0: 127.0.1.0/24; tor1: 127.0.2.0/24)" in stray.text


def test_a_job_is_installed_on_its_tree_and_removed_from_all_of_it(fabric: Fabric) -> None:
    wide, narrow = fabric.submit(3), fabric.submit(2)
    for host, port in (("127.0.1.1", 41001), ("127.0.2.1", 41002)):
        assert fabric.join(wide, host, port).status_code == 201
    # Not every worker has joined: no switch holds the job yet.
    assert all(not fabric.holding(name) for name in SWITCHES)
    sid_wide = fabric.join(wide, "127.0.2.2", 41003).json()["switch_job_id"]
    for port in (41004, 41005):
        sid_narrow = fabric.join(narrow, "127.0.1.9", port).json()["switch_job_id"]
    assert fabric.holding("spine") == {sid_wide}  # the in-rack job never touches the spine
    assert fabric.holding("tor0") == {sid_wide, sid_narrow}
    assert fabric.holding("tor1") == {sid_wide}
    # p4/PROTOCOL.md 7.2: job-wide worker ids at the ToRs, each ToR's parent and the spine's
    # children registered as worker 255, and the spine's group the ToRs' ports.
    spine, tor0, tor1 = (fabric.data(name) for name in SWITCHES)
    assert fabric.tables("tor0", sid_wide) == Tables(
        {(0, ("127.0.1.1", 41001)), (255, spine), (255, fabric.ps)},
        {("127.0.1.1", 41001)},
    )
    assert fabric.tables("tor1", sid_wide) == Tables(
        {(1, ("127.0.2.1", 41002)), (2, ("127.0.2.2", 41003)), (255, spine), (255, fabric.ps)},
        {("127.0.2.1", 41002), ("127.0.2.2", 41003)},
    )
    assert fabric.tables("spine", sid_wide) == Tables(
        {(255, tor0), (255, tor1), (255, fabric.ps)}, {tor0, tor1}
    )
    assert fabric.tables("tor0", sid_narrow).sources == {
        (0, ("127.0.1.9", 41004)),
        (1, ("127.0.1.9", 41005)),
        (255, fabric.ps),
    }
    cancel = fabric.client.post(f"/jobs/{wide['id']}/cancel", headers=fabric.auth())
    assert cancel.status_code == 200, cancel.text
    wait_for(lambda: not fabric.holding("spine") and not fabric.holding("tor1"), "removal")
    assert fabric.holding("tor0") == {sid_narrow}


def test_switch_lists_every_switch_of_the_fabric(fabric: Fabric) -> None:
    view = fabric.client.get("/switch", headers=fabric.auth()).json()
    assert [s["name"] for s in view["switches"]] == list(SWITCHES)
    assert [s["aggregators"] for s in view["switches"]] == [128, 128, 256]
    assert view["aggregators"] == 128  # the scheduler places on the smallest pool
    tor1 = view["switches"][2]
    assert tor1["data"] == "{host}:{port}".format(**_data(fabric, "tor1"))
    assert tor1["lost"] == "" and tor1["unavailable"] == ""


def test_a_switch_going_away_fails_the_jobs_of_its_tree_only(fabric: Fabric) -> None:
    wide, narrow = fabric.submit(2), fabric.submit(2)
    assert fabric.join(wide, "127.0.1.1", 41001).status_code == 201
    sid_wide = fabric.join(wide, "127.0.2.1", 41002).json()["switch_job_id"]
    for port in (41003, 41004):
        assert fabric.join(narrow, "127.0.1.2", port).status_code == 201
    assert sid_wide in fabric.holding("spine")
    fabric.processes["tor1"].kill()
    wait_for(lambda: fabric.job(wide)["state"] == "failed", "the wide job failing")
    reason = str(fabric.job(wide)["reason"])
    assert reason.startswith("switch tor1 of its tree went away"), reason
    wait_for(lambda: sid_wide not in fabric.holding("tor0"), "its memory freed on tor0")
    assert fabric.holding("spine") == set()
    assert fabric.job(narrow)["state"] == "running"
    view = fabric.client.get("/switch", headers=fabric.auth()).json()
    lost = {s["name"]: s["lost"] for s in view["switches"]}
    assert lost["tor1"] and not lost["tor0"] and not lost["spine"]


def test_metrics_label_every_switch(fabric: Fabric) -> None:
    job = fabric.submit(2)
    assert fabric.join(job, "127.0.1.1", 41001).status_code == 201
    assert fabric.join(job, "127.0.2.1", 41002).status_code == 201
    fabric.processes["tor1"].kill()
    wait_for(lambda: fabric.job(job)["state"] == "failed", "the job failing")
    text = fabric.client.get("/metrics", headers=fabric.auth()).text
    for name, size in (("spine", 128), ("tor0", 128), ("tor1", 256)):
        assert f'inasched_switch_aggregators{{switch="{name}"}} {size}' in text
        assert f'inasched_switch_aggregated_total{{switch="{name}"}} 0' in text
    assert 'inasched_switch_aggregators_used{switch="tor0",state="partial"} 0' in text
    assert 'inasched_switch_lost{switch="tor1"} 1' in text
    assert 'inasched_switch_lost{switch="tor0"} 0' in text
