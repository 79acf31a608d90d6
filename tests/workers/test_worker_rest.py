"""`inasched worker` through the REST rendezvous: joins, heartbeats, reports progress, and
stops with status 3 when the service says the job was cancelled. The service is a minimal
stand-in speaking the contract of docs/CONTRACTS.md over real HTTP."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from p4ctl.backend import Endpoint
from p4ctl.protocol import Policy

from workers import worker
from workers.rendezvous import parse_join


class FakeService(ThreadingHTTPServer):
    def __init__(self, rig: Any, job: int, cancel_after: int | None) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.rig, self.job, self.cancel_after = rig, job, cancel_after
        self.progress: list[dict[str, int]] = []
        self.heartbeats = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    @property
    def cancelled(self) -> bool:
        done = self.progress[-1]["iterations_done"] if self.progress else 0
        return self.cancel_after is not None and done >= self.cancel_after


class Handler(BaseHTTPRequestHandler):
    server: FakeService

    def log_message(self, *args: Any) -> None:
        pass  # keep test output clean

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        svc = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        if self.headers.get("Authorization") != "Bearer tok":
            return self._reply(401, {"detail": "bad token"})
        if self.path == f"/jobs/{svc.job}/workers":
            svc.rig.control.add_worker(svc.job, 0, Endpoint(body["data_host"], body["data_port"]))
            join = svc.rig.join_body(svc.job, 0, 1, Policy.ATP)
            join.update(iterations=8, gradient_bytes=20_000, model="", heartbeat_interval_s=0.05)
            return self._reply(201, join)
        if re.fullmatch(rf"/jobs/{svc.job}/workers/0/(heartbeat|progress)", self.path):
            if self.path.endswith("progress"):
                svc.progress.append(body)
            else:
                svc.heartbeats += 1
            if svc.cancelled:
                return self._reply(409, {"detail": "cancelled by user", "state": "cancelled"})
            return self._reply(200, {"state": "running"})
        return self._reply(404, {"detail": "not found"})


@pytest.fixture
def start_service(make_rig: Any) -> Iterator[Any]:
    servers: list[FakeService] = []

    def start(cancel_after: int | None) -> FakeService:
        rig = make_rig(aggregators=64)
        rig.install(7, 1, Policy.ATP)
        svc = FakeService(rig, 7, cancel_after)
        threading.Thread(target=svc.serve_forever, daemon=True).start()
        servers.append(svc)
        return svc

    yield start
    for svc in servers:
        svc.shutdown()
        svc.server_close()


def test_worker_joins_and_reports_every_iteration(start_service: Any) -> None:
    svc = start_service(None)
    status = worker.main(["--job", "7", "--token", "tok", "--service", svc.url])
    assert status == 0
    assert [p["iterations_done"] for p in svc.progress] == list(range(1, 9))
    assert svc.progress[-1]["bytes_ps"] > 0  # atp: every sum comes back from the PS


def test_cancelled_job_stops_the_worker_with_status_3(
    start_service: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    svc = start_service(cancel_after=2)
    status = worker.main(
        ["--job", "7", "--token", "tok", "--service", svc.url, "--iterations", "100000"]
    )
    assert status == 3
    assert "job 7 has ended (cancelled): cancelled by user" in capsys.readouterr().err


def test_bad_token_is_a_join_error(start_service: Any, capsys: pytest.CaptureFixture[str]) -> None:
    svc = start_service(None)
    assert worker.main(["--job", "7", "--token", "wrong", "--service", svc.url]) == 5
    assert "refused (401): bad token" in capsys.readouterr().err


def test_heartbeats_stop_once_the_service_says_the_job_ended(start_service: Any) -> None:
    svc = start_service(cancel_after=0)  # every heartbeat is answered 409
    body = svc.rig.join_body(7, 0, 1, Policy.ATP)
    body.update(heartbeat_interval_s=0.01)
    told = threading.Event()
    reporter = worker.Reporter(svc.url, parse_join(body), "tok", lambda ended: told.set())
    try:
        assert told.wait(30)
        reporter._thread.join(30)  # the heartbeat thread ends by itself
        assert not reporter._thread.is_alive()
        assert reporter.ended is not None and reporter.ended.state == "cancelled"
        assert svc.heartbeats == 1
    finally:
        reporter.close()
