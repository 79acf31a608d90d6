"""A worker rides out what a running service does to it: a join answered "queued" until the
job is admitted, a service that restarts (on the same data directory and port) while the
worker trains, and a service that is down when the worker sends its last progress report.

Real processes on loopback: ``inasched up`` killed and started again, on an external soft
switch (``inasched switch``) or on its embedded one (whose data port the service keeps across
restarts), and ``inasched worker``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from p4ctl.client import SwitchClient

from tests.api.conftest import free_port, listening, stop_processes, wait_for
from workers import rendezvous
from workers.errors import RendezvousError
from workers.rendezvous import join

# The premise of the restart tests: the service is back well within the heartbeat timeout.
HEARTBEAT_TIMEOUT_S = "60"
AGGREGATORS = 64


def _cli(*argv: str, log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "cli", *argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )


class Rig:
    """A service process that can be killed and restarted, on an external soft switch or on
    its embedded one (which keeps its data port across restarts)."""

    def __init__(self, tmp: Path, *, embedded: bool = False) -> None:
        self.tmp = tmp
        self.embedded = embedded
        self.p4rt = f"127.0.0.1:{free_port(socket.SOCK_STREAM)}"
        self.data = f"127.0.0.1:{free_port(socket.SOCK_DGRAM)}"
        self.port = free_port(socket.SOCK_STREAM)
        self.url = f"http://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []
        if not embedded:
            self._start(
                "switch", "--p4runtime", self.p4rt, "--data", self.data,
                "--aggregators", str(AGGREGATORS), log=tmp / "switch.log",
            )  # fmt: skip
            grpc_port = int(self.p4rt.rsplit(":", 1)[1])
            wait_for(lambda: listening(grpc_port), "the switch to listen", 120)
        self.service: subprocess.Popen[bytes] | None = None
        self.token = ""
        self.start_service()

    def _start(self, *argv: str, log: Path, env: dict[str, str] | None = None) -> Any:
        proc = _cli(*argv, log=log, env=env)
        self.procs.append(proc)
        return proc

    def start_service(self) -> None:
        log = self.tmp / f"service{len(self.procs)}.log"
        switch = [] if self.embedded else ["--switch", self.p4rt, "--switch-data", self.data]
        self.service = self._start(
            "up", "--port", str(self.port), "--data-dir", str(self.tmp / "data"), *switch,
            "--policy", "static", "--aggregators", str(AGGREGATORS),
            log=log, env={"INASCHED_HEARTBEAT_TIMEOUT_S": HEARTBEAT_TIMEOUT_S},
        )  # fmt: skip
        service = self.service
        wait_for(
            lambda: service.poll() is not None or "token: " in log.read_text(),
            "the service to start",
            120,
        )
        assert service.poll() is None, log.read_text()
        if not self.token:  # the first start's tenant token stays valid across restarts
            self.token = log.read_text().split("token: ", 1)[1].split()[0]

    def kill_service(self) -> None:
        assert self.service is not None
        self.service.kill()  # a crash: nothing is cleaned up on the way out
        self.service.wait()

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def submit(self, **fields: Any) -> dict[str, Any]:
        size = {} if "model" in fields else {"gradient_bytes": 4096}
        body = {"name": "job", "n_workers": 1, "iterations": 5, **size, **fields}
        response = httpx.post(f"{self.url}/jobs", json=body, headers=self.auth(), timeout=30)
        assert response.status_code == 201, response.text
        job: dict[str, Any] = response.json()
        return job

    def job(self, job_id: int) -> dict[str, Any]:
        body: dict[str, Any] = httpx.get(
            f"{self.url}/jobs/{job_id}", headers=self.auth(), timeout=30
        ).json()
        return body

    def worker(self, job: dict[str, Any], *argv: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.tmp / f"worker{job['id']}-{len(self.procs)}.log"
        argv = ("--job", str(job["id"]), "--token", job["join_token"], *argv)
        proc = self._start("--service", self.url, "worker", *argv, "--log-level", "INFO", log=log)
        return proc, log

    def holds_nothing(self) -> bool:
        """Whether the switch has no job installed and every aggregator free (the embedded
        switch is read through the service, which shows only non-free aggregators)."""
        if self.embedded:
            view = httpx.get(f"{self.url}/switch", headers=self.auth(), timeout=30).json()
            return view["runs"] == []
        with SwitchClient(self.p4rt, election_id=(0, 9)) as reader:
            return reader.installed_jobs() == set() and not any(reader.occupancy().state)

    def close(self) -> None:
        stop_processes(self.procs)


@pytest.fixture(params=["external"])
def rig(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Rig]:
    made = Rig(tmp_path, embedded=request.param == "embedded")
    try:
        yield made
    finally:
        made.close()


@pytest.mark.parametrize("rig", ["external", "embedded"], indirect=True)
def test_a_worker_trains_on_while_its_service_restarts(rig: Rig) -> None:
    job = rig.submit(iterations=100_000)
    worker, log = rig.worker(job, "--timeout", "60")
    wait_for(lambda: rig.job(job["id"])["iterations_done"] > 0, "the worker to train", 120)
    rig.kill_service()
    rig.start_service()
    before = rig.job(job["id"])["iterations_done"]
    wait_for(
        lambda: rig.job(job["id"])["iterations_done"] > before, "progress after the restart", 120
    )
    assert rig.job(job["id"])["state"] == "running"
    assert worker.poll() is None, log.read_text()
    cancelled = httpx.post(f"{rig.url}/jobs/{job['id']}/cancel", headers=rig.auth(), timeout=30)
    assert cancelled.status_code == 200
    assert worker.wait(timeout=120) == 3, log.read_text()
    wait_for(rig.holds_nothing, "the switch to forget the job")


def test_the_last_progress_report_waits_for_a_service_that_is_down(rig: Rig) -> None:
    job = rig.submit(iterations=20, model="ResNet-50")
    # A third of a second of compute per iteration: the service is down long before the end.
    worker, log = rig.worker(job, "--model", "ResNet-50", "--scale", "0.0001", "--timeout", "60")
    wait_for(lambda: rig.job(job["id"])["iterations_done"] > 0, "the worker to train", 120)
    rig.kill_service()
    # The data path needs no service: the worker trains to the end, then waits for it.
    wait_for(lambda: "waiting for the service" in log.read_text(), "the worker to wait", 120)
    assert worker.poll() is None, log.read_text()
    rig.start_service()
    assert worker.wait(timeout=120) == 0, log.read_text()
    done = rig.job(job["id"])
    assert done["state"] == "finished" and done["iterations_done"] == 20
    wait_for(rig.holds_nothing, "the switch to forget the job")


def test_a_queued_worker_joins_once_memory_frees(rig: Rig) -> None:
    # A static partition of the whole pool (two copies per slot): the next job must queue.
    holder = rig.submit(iterations=100_000, window=AGGREGATORS // 2)
    waiting = rig.submit(iterations=3, window=AGGREGATORS // 2)
    assert waiting["state"] == "queued"
    impatient, impatient_log = rig.worker(waiting, "--queue-wait", "0")
    assert impatient.wait(timeout=120) == 5
    assert "still queued after 0 s" in impatient_log.read_text()
    worker, log = rig.worker(waiting, "--timeout", "60")
    wait_for(lambda: "queued for switch memory" in log.read_text(), "the worker to queue", 120)
    assert (
        httpx.post(f"{rig.url}/jobs/{holder['id']}/cancel", headers=rig.auth()).status_code == 200
    )
    assert worker.wait(timeout=120) == 0, log.read_text()
    assert rig.job(waiting["id"])["state"] == "finished"


def test_a_queued_join_rides_out_a_service_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rendezvous, "_QUEUED_POLL_S", 0.0)
    answers = iter(["queued", "down", "down", "joined"])

    def handler(request: httpx.Request) -> httpx.Response:
        answer = next(answers)
        if answer == "down":
            raise httpx.ConnectError("connection refused", request=request)
        if answer == "queued":
            return httpx.Response(409, json={"detail": "no free range", "state": "queued"})
        return httpx.Response(201, json=JOIN)

    with httpx.Client(base_url="http://svc", transport=httpx.MockTransport(handler)) as client:
        joined = join("http://svc", 3, "tok", ("127.0.0.1", 1), client=client, queue_wait_s=60)
    assert joined.job_id == 3


def test_a_service_never_reached_is_a_join_error_at_once() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with (
        httpx.Client(base_url="http://svc", transport=httpx.MockTransport(handler)) as client,
        pytest.raises(RendezvousError, match="cannot reach the service"),
    ):
        join("http://svc", 3, "tok", ("127.0.0.1", 1), client=client)


JOIN = {
    "job_id": 3, "switch_job_id": 3, "worker_id": 0, "fan_in": 1, "policy": "atp",
    "switch": {"host": "127.0.0.1", "port": 9555}, "ps": {"host": "127.0.0.1", "port": 9556},
    "lanes": 64, "window": 32, "placement": {"kind": "hashed", "seed": 7, "pool": 4096},
}  # fmt: skip
