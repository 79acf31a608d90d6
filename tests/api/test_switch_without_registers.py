"""The service on a switch whose P4Runtime server refuses registers, as PI (BMv2's
``simple_switch_grpc``) does: it starts, installs jobs whole with their priorities as
``job_table`` data, changes priorities, and removes jobs; with BMv2's Thrift runtime it shows
occupancy and reclaims, and without it it says what the dashboard cannot show."""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from p4ctl.client import SwitchClient
from p4ctl.protocol import AggState, Kind, Packet, encode
from p4ctl.register_access import PI_READS_REFUSED
from p4ctl.softswitch import SoftSwitch

from api.http.app import create_app
from api.settings import Settings
from api.store.crud import create_tenant_token
from cli.main import main
from tests.api.conftest import LiveServer, free_port, listening, wait_for

AGGREGATORS, LANES = 256, 64
JOB = {"name": "on-pi", "n_workers": 2, "gradient_bytes": 4096}


@pytest.fixture(params=["p4runtime-only", "thrift"])
def refusing(request: pytest.FixtureRequest) -> Iterator[SoftSwitch]:
    if request.param == "thrift":
        pytest.importorskip("bm_runtime.standard")
    thrift = ("127.0.0.1", 0) if request.param == "thrift" else None
    with SoftSwitch(
        aggregators=AGGREGATORS, lanes=LANES, serve_registers=False, thrift=thrift
    ) as switch:
        yield switch


def _settings(switch: SoftSwitch, tmp_path: Path, thrift: bool) -> Settings:
    return Settings(
        data_dir=tmp_path,
        tick_s=0.05,
        switch={
            "target": switch.p4runtime_address,
            "data": "{}:{}".format(*switch.data_address),
            "thrift": switch.thrift_address if thrift else None,
            "aggregators": AGGREGATORS,
            "lanes": LANES,
        },
        policy={"policy": "esa"},
    )


def _admitted(client: httpx.Client, auth: dict[str, str], job: dict[str, Any]) -> bool:
    return str(client.get(f"/jobs/{job['id']}", headers=auth).json()["state"]) == "admitted"


def _first_fragment(switch: SoftSwitch, joined: dict[str, Any], sock: socket.socket) -> int:
    """Worker 0's first fragment, over UDP; returns the aggregator it goes to."""
    index = 5
    pkt = Packet(
        kind=Kind.GRADIENT,
        job=joined["switch_job_id"],
        worker=joined["worker_id"],
        fan_in=joined["fan_in"],
        agg_index=index,
        bitmap=1 << joined["worker_id"],
        lanes=np.ones(LANES, np.int32),
    )
    sock.sendto(encode(pkt), switch.data_address)
    return index


def test_service_schedules_on_a_switch_that_refuses_registers(
    refusing: SoftSwitch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    thrift = refusing._thrift is not None
    app = create_app(_settings(refusing, tmp_path, thrift))
    with app.state.service.sessions() as session:
        token = create_tenant_token(session, tenant="alice")
    auth = {"Authorization": f"Bearer {token}"}
    pipe = refusing.pipeline
    with (
        caplog.at_level(logging.WARNING, logger="p4ctl.client"),
        LiveServer(app) as url,
        httpx.Client(base_url=url, timeout=60) as client,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as worker,
    ):
        worker.bind(("127.0.0.1", 0))
        # Two jobs of different lengths: esa ranks them, and each admission writes a level.
        jobs = [
            client.post("/jobs", json={**JOB, "iterations": n}, headers=auth).json()
            for n in (40, 3)
        ]
        for job in jobs:
            wait_for(lambda job=job: _admitted(client, auth, job), "the job to be installed")
        levels = sorted(client.get(f"/jobs/{j['id']}", headers=auth).json()["priority_level"]
                        for j in jobs)  # fmt: skip
        wait_for(lambda: sorted(c.priority for c in pipe.jobs.values()) == levels, "the levels")
        assert any(levels), "esa gave some job a non-zero level: a MODIFY of its entry"
        joined = client.post(
            f"/jobs/{jobs[0]['id']}/workers",
            json={"data_host": "127.0.0.1", "data_port": worker.getsockname()[1]},
            headers={"Authorization": f"Bearer {jobs[0]['join_token']}"},
        )
        assert joined.status_code == 201, joined.text
        index = _first_fragment(refusing, joined.json(), worker)
        wait_for(lambda: pipe.registers.agg_state[index] == AggState.PARTIAL, "the claim")
        view = client.get("/switch", headers=auth)
        assert view.status_code == 200
        runs = view.json()["runs"]
        if thrift:
            assert runs == [[index, 1, jobs[0]["id"], AggState.PARTIAL]]
            assert view.json()["unavailable"] == ""
        else:
            assert runs == []
            assert PI_READS_REFUSED in view.json()["unavailable"]  # what the dashboard shows
            said = [r.getMessage() for r in caplog.records]
            assert any(PI_READS_REFUSED in m and "occupancy" in m for m in said), said
        for job in jobs:
            assert client.post(f"/jobs/{job['id']}/cancel", headers=auth).status_code == 200
        wait_for(
            lambda: not (pipe.jobs or pipe.sources or pipe.endpoints or pipe.groups),
            "the jobs to leave the switch, every entry of theirs",
        )
        if thrift:
            wait_for(lambda: pipe.registers.agg_state[index] == AggState.FREE, "the reclaim")
        else:
            # Nothing could reclaim it: the documented limit without a register transport.
            assert pipe.registers.agg_state[index] == AggState.PARTIAL


def test_up_on_a_switch_with_no_program_says_how_to_load_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with SoftSwitch(aggregators=AGGREGATORS, lanes=LANES, needs_device_config=True) as switch:
        argv = ["up", "--switch", switch.p4runtime_address, "--data-dir", str(tmp_path)]
        argv += ["--switch-data", "{}:{}".format(*switch.data_address), "--port", "0"]
        argv += ["--aggregators", str(AGGREGATORS)]
        assert main(argv) != 0
    err = capsys.readouterr().err
    assert "cannot start" in err and "runs no P4 program" in err
    assert "--p4-config PATH" in err


@pytest.mark.slow
def test_demo_on_a_switch_that_answers_as_bmv2_ends_with_its_aggregators_reclaimed(
    tmp_path: Path,
) -> None:
    pytest.importorskip("bm_runtime.standard")
    grpc_port, thrift_port = free_port(socket.SOCK_STREAM), free_port(socket.SOCK_STREAM)
    data = f"127.0.0.1:{free_port(socket.SOCK_DGRAM)}"
    p4rt, thrift = f"127.0.0.1:{grpc_port}", f"127.0.0.1:{thrift_port}"
    switch = ["switch", "--p4runtime", p4rt, "--data", data, "--thrift", thrift]
    switch += ["--refuse-registers", "--needs-device-config", "--aggregators", str(AGGREGATORS)]
    proc = subprocess.Popen([sys.executable, "-m", "cli", *switch])
    try:
        wait_for(lambda: proc.poll() is not None or listening(grpc_port), "the switch")
        program = tmp_path / "inasched.json"
        program.write_text('{"program": "inasched.p4"}')
        demo = ["demo", "--switch", p4rt, "--switch-data", data, "--switch-thrift", thrift]
        demo += ["--p4-config", str(program), "--data-dir", str(tmp_path)]
        demo += ["--aggregators", str(AGGREGATORS)]
        demo += ["--port", str(free_port(socket.SOCK_STREAM))]
        done = subprocess.run(
            [sys.executable, "-m", "cli", *demo], capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.count(": finished, JCT") == 3, done.stdout
        assert "Traceback" not in done.stderr and "not reclaimed" not in done.stderr
        with SwitchClient(p4rt, election_id=(0, 9), register_thrift=thrift) as reader:
            assert reader.installed_jobs() == set()
            assert reader.registers is not None and not any(reader.occupancy().state)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
