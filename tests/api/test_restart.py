"""A restart of the service: the embedded switch's data port stays, so a service back within
the heartbeat timeout keeps its jobs running; jobs of a clean stop that outlasted the timeout
end with "service stopped".

A live service on a real store (SQLite, and PostgreSQL when ``INASCHED_TEST_POSTGRES_URL`` is
set), stopped and started again on the same store; the switch is the embedded soft switch.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from p4ctl.backend import InMemorySwitch

from api.http.app import create_app
from api.settings import Settings
from api.store.crud import create_tenant_token
from tests.api.conftest import LiveServer, updated


@contextmanager
def serving(settings: Settings, *, embedded: bool) -> Iterator[httpx.Client]:
    backend = (
        None if embedded else InMemorySwitch(settings.switch.aggregators, settings.switch.lanes)
    )
    app = create_app(settings, backend=backend)
    with LiveServer(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        yield client


def _token(settings: Settings) -> dict[str, str]:
    app = create_app(settings, backend=InMemorySwitch(64, 64))
    with app.state.service.sessions() as s:
        token = create_tenant_token(s, tenant="alice")
    app.state.service.engine.dispose()
    return {"Authorization": f"Bearer {token}"}


def _running_job(client: httpx.Client, auth: dict[str, str], worker: socket.socket) -> Any:
    body = {"name": "job", "n_workers": 1, "iterations": 5, "gradient_bytes": 4096}
    job = client.post("/jobs", json=body, headers=auth).json()
    joined = _join(client, job, worker)
    assert client.get(f"/jobs/{job['id']}", headers=auth).json()["state"] == "running"
    return job, joined


def _join(client: httpx.Client, job: Any, worker: socket.socket) -> Any:
    answer = client.post(
        f"/jobs/{job['id']}/workers",
        json={"data_host": "127.0.0.1", "data_port": worker.getsockname()[1]},
        headers={"Authorization": f"Bearer {job['join_token']}"},
    )
    assert answer.status_code == 201, answer.text
    return answer.json()


def test_a_restarted_service_keeps_its_switch_data_port_and_its_running_job(
    settings: Settings,
) -> None:
    settings = updated(settings, switch={"target": "embedded"})
    auth = _token(settings)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as worker:
        worker.bind(("127.0.0.1", 0))
        with serving(settings, embedded=True) as client:
            job, before = _running_job(client, auth, worker)
        with serving(settings, embedded=True) as client:
            state = client.get(f"/jobs/{job['id']}", headers=auth).json()
            assert state["state"] == "running", state
            after = _join(client, job, worker)  # the same worker, joining again
    assert after["switch"] == before["switch"]
    assert after["worker_id"] == before["worker_id"]


def test_jobs_running_at_a_clean_stop_longer_than_the_heartbeat_timeout_end_as_service_stopped(
    settings: Settings,
) -> None:
    settings = settings.model_copy(update={"heartbeat_timeout_s": 2.0})
    auth = _token(settings)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as worker:
        worker.bind(("127.0.0.1", 0))
        with serving(settings, embedded=False) as client:
            job, _ = _running_job(client, auth, worker)
            beat = client.post(
                f"/jobs/{job['id']}/workers/0/heartbeat",
                headers={"Authorization": f"Bearer {job['join_token']}"},
            )
            assert beat.status_code == 200, beat.text
    time.sleep(settings.heartbeat_timeout_s + 0.5)  # the service stays away that long
    with serving(settings, embedded=False) as client:
        state = client.get(f"/jobs/{job['id']}", headers=auth).json()
    assert state["state"] == "failed", state
    assert state["reason"] == "service stopped"
