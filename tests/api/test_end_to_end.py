"""End to end on loopback with real processes: a soft switch, a PS and worker processes, and
the service (in this process) programming the switch over P4Runtime."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from api.http.app import create_app
from api.settings import Settings
from api.store.crud import create_tenant_token
from tests.api.conftest import LiveServer, updated, wait_for

pytestmark = pytest.mark.slow
CLI = [sys.executable, "-m", "cli"]
TERMINAL = ("finished", "failed", "cancelled")
# The external PS serves the jobs the service registers over its control channel, signed
# with the secret both were given.
PS_SECRET = "end-to-end-shared-secret"
PS_ENV = {"INASCHED_PS_SECRET": PS_SECRET}


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(
    args: list[str], log: Path, ready: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``inasched ARGS`` (with `env` added to the environment); returns once its log
    shows `ready`."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            CLI + args, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
    wait_for(
        lambda: ready in log.read_text(errors="replace") or proc.poll() is not None,
        f"{args[0]} to start",
        timeout_s=120,
    )
    assert proc.poll() is None, log.read_text()
    return proc


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class DataPlane:
    p4runtime: str
    data: str
    ps: str
    ps_control: str


@pytest.fixture
def dataplane(tmp_path: Path) -> Iterator[DataPlane]:
    grpc, data, ps = free_port(), free_port(socket.SOCK_DGRAM), free_port(socket.SOCK_DGRAM)
    control = free_port()
    plane = DataPlane(
        f"127.0.0.1:{grpc}", f"127.0.0.1:{data}", f"127.0.0.1:{ps}", f"127.0.0.1:{control}"
    )
    procs = []
    try:
        procs.append(
            start(
                ["switch", "--p4runtime", plane.p4runtime, "--data", plane.data,
                 "--aggregators", "1024"],
                tmp_path / "switch.log",
                "soft switch: P4Runtime on",
            )
        )  # fmt: skip
        ps_args = ["ps", "--port", str(ps), "--control-port", str(control)]
        procs.append(start(ps_args, tmp_path / "ps.log", "control channel on", PS_ENV))
        yield plane
    finally:
        stop(procs)


def service_settings(tmp_path: Path, plane: DataPlane, port: int = 0) -> Settings:
    return Settings(
        data_dir=tmp_path,
        heartbeat_timeout_s=60.0,
        switch={"target": plane.p4runtime, "data": plane.data, "aggregators": 1024},
        ps={"address": plane.ps, "control": plane.ps_control, "secret": PS_SECRET},
        policy={"policy": "esa"},
        http={"port": port},
    )


def spawn_workers(
    url: str, job: dict[str, object], log: Path, extra: tuple[str, ...] = ()
) -> list[subprocess.Popen[bytes]]:
    cmd = CLI + ["worker", "--service", url, "--job", str(job["id"])]
    cmd += ["--token", str(job["join_token"]), "--timeout", "60", *extra]
    with open(log, "ab") as out:
        return [
            subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
            for _ in range(int(str(job["n_workers"])))
        ]


def submit(http: httpx.Client, name: str, iterations: int, grad: int) -> dict[str, object]:
    body = {"name": name, "n_workers": 2, "iterations": iterations, "gradient_bytes": grad}
    response = http.post("/jobs", json=body)
    assert response.status_code == 201, response.text
    created: dict[str, object] = response.json()
    return created


def job_state(http: httpx.Client, job_id: object) -> dict[str, object]:
    body: dict[str, object] = http.get(f"/jobs/{job_id}").json()
    return body


def test_three_jobs_run_to_completion_and_leave_no_switch_state(
    tmp_path: Path, dataplane: DataPlane
) -> None:
    app = create_app(service_settings(tmp_path, dataplane))
    service = app.state.service
    with service.sessions() as s:
        token = create_tenant_token(s, tenant="e2e")
    workers: list[subprocess.Popen[bytes]] = []
    with (
        LiveServer(app) as url,
        httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as http,
    ):
        try:
            jobs = [submit(http, f"e2e-{i}", 8, 16 * 1024 * (i + 1)) for i in range(3)]
            for job in jobs:
                workers += spawn_workers(url, job, tmp_path / "workers.log")

            def all_ended() -> bool:
                return all(job_state(http, j["id"])["state"] in TERMINAL for j in jobs)

            wait_for(all_ended, "the three jobs to end", timeout_s=180)
            ended = [job_state(http, j["id"]) for j in jobs]
            log = (tmp_path / "workers.log").read_text(errors="replace")
            assert [j["state"] for j in ended] == ["finished"] * 3, log
            assert all(float(str(j["jct_s"])) > 0 for j in ended)
            assert all(int(str(j["bytes_switch"])) + int(str(j["bytes_ps"])) > 0 for j in ended)
            assert all(p.wait(timeout=60) == 0 for p in workers), log
            backend = service.backend
            assert backend is not None
            # A job reads "finished" a moment before its switch state is reclaimed.
            wait_for(lambda: backend.installed_jobs() == set(), "the switch to forget the jobs")
            assert backend.occupancy().runs() == []
        finally:
            stop(workers)


def test_service_restart_while_a_job_runs_and_the_job_completes(
    tmp_path: Path, dataplane: DataPlane
) -> None:
    port = free_port()
    settings = service_settings(tmp_path, dataplane, port)
    app = create_app(settings)
    with app.state.service.sessions() as s:
        token = create_tenant_token(s, tenant="e2e")
    headers = {"Authorization": f"Bearer {token}"}
    workers: list[subprocess.Popen[bytes]] = []
    try:
        with LiveServer(app, port) as url, httpx.Client(base_url=url, headers=headers) as http:
            job = submit(http, "survivor", 60, 32 * 1024)
            workers = spawn_workers(url, job, tmp_path / "workers.log")

            def underway() -> bool:
                return int(str(job_state(http, job["id"])["iterations_done"])) >= 3

            wait_for(underway, "the job to make progress", timeout_s=120)
        # The service is down here; the switch, the PS and the workers keep going.
        app = create_app(settings)
        with LiveServer(app, port) as url, httpx.Client(base_url=url, headers=headers) as http:

            def ended() -> bool:
                return job_state(http, job["id"])["state"] in TERMINAL

            wait_for(ended, "the job to end after the restart", timeout_s=180)
            final = job_state(http, job["id"])
            log = (tmp_path / "workers.log").read_text(errors="replace")
            assert final["state"] == "finished", (final, log)
            assert final["iterations_done"] == 60
            backend = app.state.service.backend
            assert backend is not None
            wait_for(lambda: backend.installed_jobs() == set(), "the switch to forget the job")
    finally:
        stop(workers)


def test_workers_of_a_queued_job_wait_for_memory_and_then_run(
    tmp_path: Path, dataplane: DataPlane
) -> None:
    # static with a pool of one partition (window 512: 512 slots of two aggregators, the
    # switch's 1024): the second job queues until the first finishes, and its workers wait
    # instead of giving up.
    settings = updated(
        service_settings(tmp_path, dataplane), policy={"policy": "static"}, window=512
    )
    app = create_app(settings)
    with app.state.service.sessions() as s:
        token = create_tenant_token(s, tenant="e2e")
    workers: list[subprocess.Popen[bytes]] = []
    headers = {"Authorization": f"Bearer {token}"}
    with LiveServer(app) as url, httpx.Client(base_url=url, headers=headers, timeout=30) as http:
        try:
            first = submit(http, "holds-the-pool", 5, 16 * 1024)
            second = submit(http, "queued", 5, 16 * 1024)
            assert job_state(http, second["id"])["state"] == "queued"
            waiting = tmp_path / "queued.log"
            workers += spawn_workers(url, second, waiting, ("--log-level", "INFO"))

            def asked_again() -> bool:
                return "queued for switch memory; asking again" in waiting.read_text("utf-8")

            # Past the service's own hold of a join (JOIN_WAIT_S): the worker's loop waits.
            wait_for(asked_again, "the queued job's workers to ask again", timeout_s=60)
            assert all(p.poll() is None for p in workers), waiting.read_text("utf-8")
            workers += spawn_workers(url, first, tmp_path / "first.log")

            def both_ended() -> bool:
                return all(job_state(http, j["id"])["state"] in TERMINAL for j in (first, second))

            wait_for(both_ended, "both jobs to end", timeout_s=180)
            log = waiting.read_text("utf-8")
            assert [job_state(http, j["id"])["state"] for j in (first, second)] == [
                "finished",
                "finished",
            ], log
            assert all(p.wait(timeout=60) == 0 for p in workers), log
        finally:
            stop(workers)
