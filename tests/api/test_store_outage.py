"""A PostgreSQL restart under a training job costs it nothing: the leader loses the store's
lock and stands by, but its embedded switch and PS keep forwarding, every route answers 503
"store unreachable" meanwhile, and when the server is back the same service leads a new term on
the same switch, with its workers' heartbeat clocks restarted, and the job finishes.

The test runs a PostgreSQL server of its own (``initdb`` and ``pg_ctl`` on a temporary
directory and port), so stopping it stops nobody else's."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.http.app import create_app
from api.settings import Settings
from api.store.crud import create_tenant_token
from api.store.lock import StoreInUse, lock_store
from scheduler.workload import model_table
from tests.api.conftest import (
    LiveServer,
    end_lock_session,
    free_port,
    stop_processes,
    wait_for,
)

HEARTBEAT_TIMEOUT_S = 10.0
# Shorter than the heartbeat timeout: an outage up to it must cost no running job.
OUTAGE_S = 7.0
# The workers' own limit on a missing result (`inasched worker --timeout`), shorter than the
# outage: a data plane that went away with the store would fail them.
WORKER_TIMEOUT_S = 4.0
ITERATIONS = 60


@dataclass
class PostgresServer:
    """A PostgreSQL server of this test's own; `stop` and `start` restart it."""

    bin: Path
    data: Path
    port: int
    user: list[str]

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def settings(self, data_dir: Path, **extra: Any) -> Settings:
        """A service's settings on this server, with the embedded switch."""
        return Settings(
            data_dir=data_dir,
            database={"url": self.url},
            switch={"target": "embedded", "aggregators": 256},
            **extra,
        )

    def _ctl(self, *args: str) -> None:
        subprocess.run(
            [*self.user, str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", *args],
            check=True,
            capture_output=True,
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self.data.parent} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._ctl("-o", options, "-l", str(self.data.parent / "server.log"), "start")

    def stop(self) -> None:
        self._ctl("-m", "fast", "stop")


@pytest.fixture
def postgres_server() -> Iterator[PostgresServer]:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb")) or [shutil.which("initdb")]
    if not found or found[-1] is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) on this machine")
    bin_dir = Path(found[-1]).parent
    # initdb refuses to run as root: the server then runs as the postgres user.
    user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    home = Path(tempfile.mkdtemp(prefix="inasched-pg-"))
    if user:
        shutil.chown(home, "postgres")
    server = PostgresServer(bin_dir, home / "data", free_port(socket.SOCK_STREAM), user)
    try:
        subprocess.run(
            [*user, str(bin_dir / "initdb"), "-D", str(server.data), "-A", "trust"]
            + ["-U", "postgres", "--no-sync"],
            check=True,
            capture_output=True,
        )
        server.start()
        yield server
    finally:
        if (server.data / "postmaster.pid").exists():
            server._ctl("-m", "immediate", "stop")
        shutil.rmtree(home, ignore_errors=True)


def _worker(
    url: str, job: dict[str, Any], n: int, tmp: Path
) -> tuple[subprocess.Popen[bytes], Path]:
    log = tmp / f"worker{n}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("INASCHED_")}
    # ResNet-50's compute time (a third of a second per iteration), on the job's gradient.
    scale = job["gradient_bytes"] / model_table()["ResNet-50"][0]
    argv = ["--service", url, "worker", "--job", str(job["id"]), "--token", job["join_token"]]
    argv += ["--model", "ResNet-50", "--scale", repr(scale), "--timeout", str(WORKER_TIMEOUT_S)]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli", *argv], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    return proc, log


@pytest.mark.postgres
@pytest.mark.slow
def test_a_postgres_restart_under_a_training_job_costs_it_nothing(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    settings = postgres_server.settings(
        tmp_path, policy={"policy": "esa"}, heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S
    )
    app = create_app(settings)
    service = app.state.service
    with service.sessions() as s:
        auth = {"Authorization": f"Bearer {create_tenant_token(s, tenant='alice')}"}
    workers: list[tuple[subprocess.Popen[bytes], Path]] = []
    with LiveServer(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        try:
            first = client.get("/leader").json()
            body = {"name": "ride", "n_workers": 2, "iterations": ITERATIONS}
            job = client.post("/jobs", json={**body, "gradient_bytes": 65536}, headers=auth)
            assert job.status_code == 201, job.text
            workers = [_worker(url, job.json(), n, tmp_path) for n in range(2)]
            job_url = f"/jobs/{job.json()['id']}"

            def done() -> int:
                return int(client.get(job_url, headers=auth).json()["iterations_done"])

            wait_for(lambda: done() > 0, "the job to train", 120)
            switch_data = service.plane.switch_data
            before = done()
            postgres_server.stop()
            try:
                stopped = time.monotonic()
                wait_for(lambda: not service.leading, "the leader to notice the outage")
                # Every route says what is wrong, with Retry-After; none says nobody led.
                for answer in (
                    client.get("/jobs", headers=auth),
                    client.post("/jobs", json={**body, "gradient_bytes": 4096}, headers=auth),
                ):
                    assert answer.status_code == 503, answer.text
                    assert answer.json()["store"] == "unreachable", answer.text
                    assert "store unreachable" in answer.json()["detail"]
                    assert int(answer.headers["Retry-After"]) > 0
                # /leader says why this service stands by; /metrics keeps answering.
                leader = client.get("/leader")
                assert leader.status_code == 503, leader.text
                assert leader.json()["store"]["state"] == "unreachable", leader.text
                assert leader.json()["store"]["since"] is not None
                scraped = client.get("/metrics")
                assert scraped.status_code == 200, scraped.text
                assert 'inasched_store_fault_seconds{kind="unreachable"} 0.000' not in scraped.text
                time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - stopped)))
            finally:
                postgres_server.start()
            wait_for(lambda: service.leading, "the same service to lead again", 60)
            again = client.get("/leader").json()
            assert again["epoch"] == first["epoch"] + 1
            assert again["store"]["state"] == "reachable", again
            # The same data plane: the workers' switch never moved, and they trained on.
            assert service.plane.switch_data == switch_data
            for proc, log in workers:
                assert proc.wait(timeout=240) == 0, log.read_text()
            wait_for(lambda: done() == ITERATIONS, "the job's last progress", 60)
            final = client.get(job_url, headers=auth).json()
            assert final["state"] == "finished", final
            assert before < ITERATIONS
        finally:
            stop_processes([proc for proc, _ in workers])


@pytest.mark.postgres
def test_a_leader_that_finds_another_leading_after_losing_the_lock_stops_its_data_plane(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    settings = postgres_server.settings(tmp_path, standby={"poll_s": 2.0})
    app = create_app(settings)
    service = app.state.service
    with LiveServer(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        epoch = client.get("/leader").json()["epoch"]
        data_port = service.plane.switch_data.port
        end_lock_session(postgres_server.url)
        # Another service takes the lock before this one's next check notices the loss.
        other = None

        def taken() -> bool:
            nonlocal other
            try:
                other = lock_store(postgres_server.url, owner="another inasched service")
            except StoreInUse:
                return False
            return True

        wait_for(taken, "the lock to be free for another service")
        assert other is not None
        try:
            wait_for(lambda: service.plane is None, "the old leader to stop its data plane")
            assert not service.leading
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.bind(("127.0.0.1", data_port))  # the embedded switch let its port go
        finally:
            other.release()
        wait_for(lambda: service.leading, "a new term")
        assert client.get("/leader").json()["epoch"] == epoch + 1
        assert service.plane is not None
