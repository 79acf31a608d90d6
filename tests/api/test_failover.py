"""Two services on one store: the one holding the store's lock leads, the other stands by,
serving reads and refusing writes (503, naming the leader), and takes over when the leader goes,
with a higher lease epoch, which is its P4Runtime election id.

In process on SQLite and PostgreSQL; and with real processes on PostgreSQL (skipped without
``INASCHED_TEST_POSTGRES_URL``): an external soft switch (``inasched switch``), two ``inasched up``
(the second ``--standby``), real ``inasched worker`` processes training a job through the switch,
and a forwarder in front of both services that sends each new connection to the one whose
``GET /leader`` answers 200, as an operator's load balancer would. The leader is killed with
SIGKILL in the middle of the job."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from p4ctl.backend import InMemorySwitch
from p4ctl.client import SwitchClient
from p4ctl.softswitch import SoftSwitch

from api.http.app import RETRY_AFTER_S, create_app
from api.settings import Settings
from api.store.crud import create_tenant_token
from api.store.lock import StoreInUse
from scheduler.workload import model_table
from tests.api.conftest import (
    PG_ENV,
    LiveServer,
    end_lock_session,
    free_port,
    listening,
    postgres_schema_url,
    stop_processes,
    updated,
    wait_for,
)

AGGREGATORS = 64
# The premise: workers and the switch outlast the takeover, so nothing times out on the way.
HEARTBEAT_TIMEOUT_S = "60"


def _role(url: str) -> tuple[int, dict[str, Any]]:
    answer = httpx.get(f"{url}/leader", timeout=10)
    body: dict[str, Any] = answer.json()
    return answer.status_code, body


def _leads(url: str, epoch: int) -> bool:
    """Whether the service at `url` leads, in term `epoch` (the lease row names a new term as
    soon as it starts; the service answers 200 once it leads it)."""
    code, body = _role(url)
    return code == 200 and body["epoch"] == epoch


def _state(url: str, job_id: int, auth: dict[str, str]) -> str:
    return str(httpx.get(f"{url}/jobs/{job_id}", headers=auth, timeout=30).json()["state"])


def _standby_reads_and_refuses_writes(
    leader_url: str, standby_url: str, auth: dict[str, str], body: dict[str, Any]
) -> None:
    code, leader = _role(leader_url)
    assert (code, leader["role"]) == (200, "leader")
    code, standby = _role(standby_url)
    assert (code, standby["role"]) == (503, "standby")
    assert standby["epoch"] == leader["epoch"] and f"pid {os.getpid()}" in standby["leader"]
    job = httpx.post(f"{leader_url}/jobs", json=body, headers=auth, timeout=30).json()
    # Reads are served by the standby, from the same store.
    listed = httpx.get(f"{standby_url}/jobs", headers=auth, timeout=30).json()
    assert [j["id"] for j in listed["items"]] == [job["id"]]
    refused = httpx.post(f"{standby_url}/jobs", json=body, headers=auth, timeout=30)
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == str(RETRY_AFTER_S)
    detail = refused.json()["detail"]
    assert "standby" in detail and leader["leader"] in detail
    assert f"term {leader['epoch']}" in detail
    cancel = httpx.post(f"{standby_url}/jobs/{job['id']}/cancel", headers=auth, timeout=30)
    assert cancel.status_code == 503


def test_a_standby_reads_refuses_writes_naming_the_leader_and_takes_over(
    settings: Settings,
) -> None:
    settings = updated(settings, standby={"enabled": True, "poll_s": 0.05})
    first = create_app(
        settings, backend=InMemorySwitch(settings.switch.aggregators, settings.switch.lanes)
    )
    with first.state.service.sessions() as s:
        token = create_tenant_token(s, tenant="alice")
    auth = {"Authorization": f"Bearer {token}"}
    body = {"name": "job", "n_workers": 1, "iterations": 3, "gradient_bytes": 4096}
    second = create_app(
        settings, backend=InMemorySwitch(settings.switch.aggregators, settings.switch.lanes)
    )
    leading = LiveServer(first)
    leader_url = leading.__enter__()
    try:
        with LiveServer(second) as standby_url:
            _standby_reads_and_refuses_writes(leader_url, standby_url, auth, body)
            leader = _role(leader_url)[1]
            job = httpx.get(f"{standby_url}/jobs", headers=auth, timeout=30).json()["items"][0]
            leading.__exit__(None, None, None)
            # The leader stopped: the standby takes the lock and leads a new term.
            wait_for(lambda: _role(standby_url)[0] == 200, "the standby to take over")
            code, taken = _role(standby_url)
            assert taken["role"] == "leader" and taken["epoch"] == leader["epoch"] + 1
            answer = httpx.post(f"{standby_url}/jobs", json=body, headers=auth, timeout=30)
            assert answer.status_code == 201, answer.text
            # The job the old leader took is scheduled by the new one.
            wait_for(lambda: _state(standby_url, job["id"], auth) == "admitted", "the job admitted")

    finally:
        leading.__exit__(None, None, None)


def test_without_standby_a_second_service_is_still_refused(settings: Settings) -> None:
    first = create_app(
        settings, backend=InMemorySwitch(settings.switch.aggregators, settings.switch.lanes)
    )
    with LiveServer(first), pytest.raises(StoreInUse):
        create_app(
            settings, backend=InMemorySwitch(settings.switch.aggregators, settings.switch.lanes)
        )


# ---------------------------------------------------------------------- real processes


class LeaderForwarder:
    """A TCP forwarder on loopback that sends each new connection to the backend whose
    ``GET /leader`` answers 200 (none: the connection is closed, and the client retries)."""

    def __init__(self, backends: list[str]) -> None:
        self.backends = backends
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _leader(self) -> str | None:
        for backend in self.backends:
            try:
                if httpx.get(f"{backend}/leader", timeout=2).status_code == 200:
                    return backend
            except httpx.HTTPError:
                continue
        return None

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        leader = self._leader()
        if leader is None:
            client.close()
            return
        host, port = leader.removeprefix("http://").rsplit(":", 1)
        try:
            upstream = socket.create_connection((host, int(port)), timeout=5)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self._stop.set()
        self.listener.close()


class Deployment:
    """`inasched switch`, two `inasched up` on one PostgreSQL store (the second a standby),
    workers, and a `LeaderForwarder` in front of the services."""

    def __init__(self, tmp: Path, database_url: str) -> None:
        self.tmp = tmp
        self.database_url = database_url
        self.procs: list[subprocess.Popen[bytes]] = []
        self.p4rt = f"127.0.0.1:{free_port(socket.SOCK_STREAM)}"
        self.data = f"127.0.0.1:{free_port(socket.SOCK_DGRAM)}"
        self._start(
            "switch", "--p4runtime", self.p4rt, "--data", self.data,
            "--aggregators", str(AGGREGATORS), log=tmp / "switch.log",
        )  # fmt: skip
        grpc_port = int(self.p4rt.rsplit(":", 1)[1])
        wait_for(lambda: listening(grpc_port), "the switch to listen", 120)
        self.services: dict[str, tuple[subprocess.Popen[bytes], str]] = {}
        self.token = ""

    def _start(self, *argv: str, log: Path) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("INASCHED_")}
        env["INASCHED_HEARTBEAT_TIMEOUT_S"] = HEARTBEAT_TIMEOUT_S
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "cli", *argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )
        self.procs.append(proc)
        return proc

    def up(self, name: str, *extra: str) -> str:
        port = free_port(socket.SOCK_STREAM)
        log = self.tmp / f"{name}.log"
        proc = self._start(
            "up", "--port", str(port), "--database-url", self.database_url,
            "--switch", self.p4rt, "--switch-data", self.data, "--policy", "static",
            "--aggregators", str(AGGREGATORS), "--data-dir", str(self.tmp / name), *extra,
            log=log,
        )  # fmt: skip
        wait_for(
            lambda: proc.poll() is not None or "token: " in log.read_text(),
            f"{name} to start",
            120,
        )
        assert proc.poll() is None, log.read_text()
        if not self.token:
            self.token = log.read_text().split("token: ", 1)[1].split()[0]
        url = f"http://127.0.0.1:{port}"
        self.services[name] = (proc, url)
        return url

    def worker(self, url: str, job: dict[str, Any], n: int) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.tmp / f"worker{job['id']}-{n}.log"
        argv = ("--service", url, "worker", "--job", str(job["id"]), "--token", job["join_token"])
        # ResNet-50's compute time (a third of a second per iteration), on the job's gradient.
        scale = job["gradient_bytes"] / model_table()["ResNet-50"][0]
        argv += ("--model", "ResNet-50", "--scale", repr(scale), "--timeout", "60")
        return self._start(*argv, "--log-level", "INFO", log=log), log

    def close(self) -> None:
        stop_processes(self.procs)


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    base = os.environ.get(PG_ENV)
    if not base:
        pytest.skip(f"{PG_ENV} is not set: the failover test needs a PostgreSQL server")
    for url in postgres_schema_url(base):
        made = Deployment(tmp_path, url)
        try:
            yield made
        finally:
            made.close()


def _run_job(
    d: Deployment, url: str, auth: dict[str, str], iterations: int
) -> tuple[dict[str, Any], list[tuple[subprocess.Popen[bytes], Path]]]:
    body = {"name": "ride", "n_workers": 2, "iterations": iterations, "gradient_bytes": 4096}
    answer = httpx.post(f"{url}/jobs", json=body, headers=auth, timeout=30)
    assert answer.status_code == 201, answer.text
    job: dict[str, Any] = answer.json()
    return job, [d.worker(url, job, n) for n in range(2)]


@pytest.mark.postgres
@pytest.mark.slow
def test_the_standby_takes_over_from_a_killed_leader_and_the_job_finishes(
    deployment: Deployment,
) -> None:
    d = deployment
    leader_url = d.up("first")
    standby_url = d.up("second", "--standby")
    front = LeaderForwarder([leader_url, standby_url])
    try:
        auth = {"Authorization": f"Bearer {d.token}"}
        code, first = _role(leader_url)
        assert (code, first["role"]) == (200, "leader")
        assert _role(standby_url)[0] == 503
        # About a third of a second of compute per iteration: the leader dies mid-job.
        job, workers = _run_job(d, front.url, auth, iterations=30)

        def done() -> int:
            answer = httpx.get(f"{front.url}/jobs/{job['id']}", headers=auth, timeout=10)
            return int(answer.json()["iterations_done"]) if answer.status_code == 200 else -1

        wait_for(lambda: done() > 0, "the job to train", 120)
        d.services["first"][0].kill()  # SIGKILL: no clean stop, no lock released by hand
        killed_at = time.monotonic()
        d.services["first"][0].wait()
        wait_for(lambda: _role(standby_url)[0] == 200, "the standby to take over", 60)
        took = time.monotonic() - killed_at
        code, second = _role(standby_url)
        assert second["epoch"] > first["epoch"]  # a higher P4Runtime election id
        print(f"takeover: the standby led {took:.2f} s after SIGKILL of the leader")
        before = done()
        assert 0 <= before < 30, "the job ended before the leader was killed"
        for proc, worker_log in workers:
            assert proc.wait(timeout=240) == 0, worker_log.read_text()
        wait_for(lambda: done() == 30, "the job's last progress", 60)
        assert _state(front.url, job["id"], auth) == "finished"
        # A job submitted after the takeover runs through the new leader.
        after, workers = _run_job(d, front.url, auth, iterations=3)
        for proc, worker_log in workers:
            assert proc.wait(timeout=240) == 0, worker_log.read_text()
        wait_for(lambda: _state(standby_url, after["id"], auth) == "finished", "the second job", 60)
        # Nothing leaked: no job left active, no aggregator held, no job on the switch.
        jobs = httpx.get(f"{standby_url}/jobs", headers=auth, timeout=10).json()["items"]
        assert {j["state"] for j in jobs} == {"finished"}, jobs

        def switch_free() -> bool:
            view = httpx.get(f"{standby_url}/switch", headers=auth, timeout=30).json()
            return bool(view["runs"] == [])

        wait_for(switch_free, "every aggregator to be free", 60)
        with SwitchClient(d.p4rt, election_id=None) as reader:
            assert not reader.is_primary
            assert reader.installed_jobs() == set()
            assert not any(reader.occupancy().state)
    finally:
        front.close()


def test_a_leader_whose_lock_session_ends_steps_down_and_leads_a_new_term(
    settings: Settings,
) -> None:
    if not settings.resolved_database_url.startswith("postgresql"):
        pytest.skip("a file lock cannot be taken away from a live process")
    settings = updated(settings, standby={"poll_s": 0.05})
    app = create_app(
        settings, backend=InMemorySwitch(settings.switch.aggregators, settings.switch.lanes)
    )
    with LiveServer(app) as url:
        code, first = _role(url)
        assert (code, first["role"]) == (200, "leader")
        end_lock_session(settings.resolved_database_url)
        # Nobody else wants the store: the service takes the lock again, in a new term.
        wait_for(lambda: _leads(url, first["epoch"] + 1), "a new term")


def test_a_leader_whose_switch_restarts_leads_a_new_term_and_reinstalls_its_jobs(
    settings: Settings,
) -> None:
    first = SoftSwitch(aggregators=settings.switch.aggregators, lanes=settings.switch.lanes).start()
    p4rt, data = first.p4runtime_address, first.data_address
    host, port = p4rt.rsplit(":", 1)
    switch = {"target": p4rt, "data": f"{data[0]}:{data[1]}"}
    settings = updated(settings, switch=switch, standby={"poll_s": 0.05})
    app = create_app(settings)
    with app.state.service.sessions() as s:
        token = create_tenant_token(s, tenant="alice")
    auth = {"Authorization": f"Bearer {token}"}
    body = {"name": "job", "n_workers": 1, "iterations": 3, "gradient_bytes": 4096}
    restarted: SoftSwitch | None = None
    try:
        with LiveServer(app) as url:
            epoch = _role(url)[1]["epoch"]
            job = httpx.post(f"{url}/jobs", json=body, headers=auth, timeout=30).json()

            wait_for(lambda: _state(url, job["id"], auth) == "admitted", "the job installed")
            first.stop()  # the switch restarts: empty, no pipeline, no session
            restarted = SoftSwitch(
                aggregators=settings.switch.aggregators,
                lanes=settings.switch.lanes,
                p4runtime=(host, int(port)),
                data=data,
            ).start()
            wait_for(lambda: _leads(url, epoch + 1), "a new term")
            with SwitchClient(p4rt, election_id=None) as reader:
                assert len(reader.installed_jobs()) == 1
            assert _state(url, job["id"], auth) == "admitted"
    finally:
        first.stop()
        if restarted is not None:
            restarted.stop()
