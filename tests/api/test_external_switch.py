"""`inasched switch` with its defaults, then the service on it with ``--switch``: the two agree
on the P4 program's sizing (the committed P4Info) and on the device id."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4ctl.client import SwitchClient
from p4ctl.errors import SwitchError
from p4ctl.p4info import COMMITTED_P4INFO, DEFAULT_AGGREGATORS, MAX_AGGREGATORS
from p4ctl.softswitch import SoftSwitch
from p4ctl.softswitch import main as switch_main

from api.http.app import create_app
from api.settings import Settings
from api.store.crud import create_tenant_token
from cli.main import main
from tests.api.conftest import LiveServer, free_port, listening, wait_for

DEVICE_ID = 3


@pytest.fixture
def switch_process() -> Iterator[tuple[str, str]]:
    """``inasched switch`` with no sizing flags, as a user starts it: (P4Runtime, data)."""
    grpc_port, data_port = free_port(socket.SOCK_STREAM), free_port(socket.SOCK_DGRAM)
    p4rt, data = f"127.0.0.1:{grpc_port}", f"127.0.0.1:{data_port}"
    argv = ["switch", "--p4runtime", p4rt, "--data", data, "--device-id", str(DEVICE_ID)]
    proc = subprocess.Popen([sys.executable, "-m", "cli", *argv])
    try:
        wait_for(lambda: proc.poll() is not None or listening(grpc_port), "the switch to listen")
        assert proc.poll() is None, "inasched switch exited"
        yield p4rt, data
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


@pytest.mark.slow
def test_switch_defaults_are_the_p4_programs_and_up_with_switch_runs_on_them(
    switch_process: tuple[str, str], tmp_path: Path
) -> None:
    p4rt, data = switch_process
    settings = Settings(
        data_dir=tmp_path, switch={"target": p4rt, "data": data, "device_id": DEVICE_ID}
    )
    app = create_app(settings)
    with app.state.service.sessions() as session:
        token = create_tenant_token(session, tenant="alice")
    auth = {"Authorization": f"Bearer {token}"}
    with LiveServer(app) as url, httpx.Client(base_url=url, timeout=60) as client:
        assert client.get("/switch", headers=auth).json()["aggregators"] == DEFAULT_AGGREGATORS
        body = {"name": "on-switch", "n_workers": 2, "iterations": 3, "gradient_bytes": 4096}
        job = client.post("/jobs", json=body, headers=auth).json()
        wait_for(
            lambda: client.get(f"/jobs/{job['id']}", headers=auth).json()["state"] == "admitted",
            "the job to be installed on the switch",
        )
    committed = text_format.Parse(COMMITTED_P4INFO.read_text(), p4info_pb2.P4Info())
    with SwitchClient(p4rt, device_id=DEVICE_ID, election_id=(0, 9)) as reader:
        assert reader.shell.get_p4info() == committed


def test_another_device_id_is_refused(switch_process: tuple[str, str]) -> None:
    p4rt, _ = switch_process
    with pytest.raises(SwitchError, match="device"):
        SwitchClient(p4rt, device_id=DEVICE_ID + 1).close()


def test_switch_refuses_a_pool_too_large_before_allocating_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        switch_main(["--aggregators", "1000000000", "--p4runtime", "127.0.0.1:0"])
    assert exit_info.value.code == 2
    assert f"aggregators must be 1..{MAX_AGGREGATORS}" in capsys.readouterr().err
    with pytest.raises(ValueError, match="aggregators must be"):
        SoftSwitch(aggregators=0)
    assert SoftSwitch(lanes=64).aggregators == DEFAULT_AGGREGATORS


def test_up_refuses_a_pool_too_large_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["up", "--aggregators", "1000000000", "--data-dir", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad setting switch.aggregators" in err
    assert str(MAX_AGGREGATORS) in err


@pytest.mark.slow
def test_demo_on_an_external_switch_ends_with_its_jobs_removed(
    switch_process: tuple[str, str], tmp_path: Path
) -> None:
    p4rt, data = switch_process
    argv = ["demo", "--switch", p4rt, "--switch-data", data, "--switch-device-id", str(DEVICE_ID)]
    argv += ["--port", str(free_port(socket.SOCK_STREAM)), "--data-dir", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, "-m", "cli", *argv], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(": finished, JCT") == 3, done.stdout
    assert "demo done: removing its jobs from the switch" in done.stdout
    assert "not removed yet" not in done.stderr and "Traceback" not in done.stderr
    with SwitchClient(p4rt, device_id=DEVICE_ID, election_id=(0, 9)) as reader:
        assert reader.installed_jobs() == set()
        assert not any(reader.occupancy().state)
