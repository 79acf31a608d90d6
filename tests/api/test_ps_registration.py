"""A job is never admitted without its PS: over HTTP against the real service, with the embedded
soft switch and a PS of its own (real UDP) whose control channel is closed at first. A job
waits queued with the reason, nothing of it on the switch nor in the scheduler's memory map,
one log line for the whole outage; once the PS answers, the job is admitted and runs to
finished through the switch and the PS. Runs on SQLite, and PostgreSQL when
``INASCHED_TEST_POSTGRES_URL`` is set."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI

from api.http.app import create_app
from api.settings import Settings
from api.store.crud import create_tenant_token
from cli.main import main
from tests.api.conftest import LiveServer, decided, free_port, updated, wait_for
from workers.client import AllreduceClient
from workers.ps import ParameterServer
from workers.ps_control import PsControlServer
from workers.rendezvous import parse_join

SECRET = "ps-registration-test-secret"
# 4096 bytes are 16 fragments of 64 lanes an iteration; a pool of 8 aggregators cannot hold
# them all, so some go to the PS (bypassed or evicted) and it must answer for the job.
GRADIENT_BYTES = 4096
ITERATIONS = 2
AWAY = "does not take jobs"
BACK = "takes jobs again"


@dataclass
class Ps:
    """A PS in this process on real UDP; its control channel listens only while `up`."""

    server: ParameterServer
    control_port: int
    control: PsControlServer | None = None

    def up(self) -> None:
        self.control = PsControlServer(self.server, SECRET.encode(), port=self.control_port).start()

    def down(self) -> None:
        if self.control is not None:
            self.control.stop()
            self.control = None


@dataclass
class Service:
    app: FastAPI
    http: httpx.Client
    url: str
    token: str
    live: LiveServer
    workers: list[AllreduceClient] = field(default_factory=list)

    def stop(self) -> None:
        """Stop the service (a clean stop: its embedded switch stops with it); the workers'
        clients stay."""
        self.http.close()
        self.live.__exit__(None, None, None)

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def submit(self, name: str) -> dict[str, Any]:
        body = {
            "name": name,
            "n_workers": 2,
            "iterations": ITERATIONS,
            "gradient_bytes": GRADIENT_BYTES,
        }
        response = self.http.post("/jobs", json=body, headers=self.auth)
        assert response.status_code == 201, response.text
        return decided(self.http, response.json(), self.auth)

    def job(self, job: dict[str, Any]) -> dict[str, Any]:
        shown: dict[str, Any] = self.http.get(f"/jobs/{job['id']}", headers=self.auth).json()
        return shown

    def installed(self) -> set[int]:
        """The switch job ids in the switch's job table, read over P4Runtime."""
        backend = self.app.state.service.backend
        assert backend is not None
        return set(backend.installed_jobs())

    def holds_nothing(self) -> bool:
        """The switch holds no job and no aggregator (read over P4Runtime)."""
        backend = self.app.state.service.backend
        assert backend is not None
        return not backend.installed_jobs() and not backend.occupancy().runs()

    def metric(self, name: str) -> float:
        for line in self.http.get("/metrics").text.splitlines():
            if line.startswith(f"{name} "):
                return float(line.split()[1])
        raise AssertionError(f"no {name} on /metrics")

    def run_to_finished(self, job: dict[str, Any]) -> None:
        """Join both workers over HTTP, allreduce every iteration over real UDP, report."""
        workers = self.join_both(job)
        for _ in range(ITERATIONS):
            iterate(workers)
        self.finish(job, workers)

    def join_both(self, job: dict[str, Any]) -> list[AllreduceClient]:
        workers = [self._join(job) for _ in range(2)]
        self.workers += workers
        return workers

    def finish(self, job: dict[str, Any], workers: list[AllreduceClient]) -> None:
        """Both workers report every iteration done; returns once the job is finished."""
        for worker in workers:
            response = self.http.post(
                f"/jobs/{job['id']}/workers/{worker.join.worker_id}/progress",
                json={"iterations_done": ITERATIONS, "bytes_switch": 0, "bytes_ps": 0},
                headers={"Authorization": f"Bearer {job['join_token']}"},
            )
            assert response.status_code == 200, response.text
        wait_for(lambda: self.job(job)["state"] == "finished", f"job {job['id']} to finish")

    def _join(self, job: dict[str, Any]) -> AllreduceClient:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))
        answer = self.http.post(
            f"/jobs/{job['id']}/workers",
            json={"data_host": "127.0.0.1", "data_port": sock.getsockname()[1]},
            headers={"Authorization": f"Bearer {job['join_token']}"},
        )
        assert answer.status_code == 201, answer.text
        return AllreduceClient(parse_join(answer.json()), sock=sock)


def iterate(workers: list[AllreduceClient]) -> None:
    """One iteration: both workers' allreduce at once, through the switch (and the PS)."""
    gradients = [np.full(GRADIENT_BYTES // 4, w + 1.0, dtype=np.float32) for w in range(2)]
    with ThreadPoolExecutor(2) as pool:
        sums = list(pool.map(lambda w, g: w.allreduce(g), workers, gradients))
    assert all(np.array_equal(s, gradients[0] + gradients[1]) for s in sums)


@pytest.fixture
def ps() -> Iterator[Ps]:
    server = ParameterServer("127.0.0.1", 0).start()
    away = Ps(server, free_port(socket.SOCK_STREAM))
    try:
        yield away
    finally:
        away.down()
        server.stop()


def ps_settings(settings: Settings, ps: Ps, *, policy: str, aggregators: int) -> Settings:
    host, port = ps.server.address
    return updated(
        settings,
        switch={"target": "embedded", "aggregators": aggregators},
        policy={"policy": policy},
        ps={
            "address": f"{host}:{port}",
            "control": f"127.0.0.1:{ps.control_port}",
            "secret": SECRET,
        },
    )


@pytest.fixture
def serve() -> Iterator[Any]:
    """``serve(settings)``: a started `Service`; every one still running stops at the end."""
    started: list[Service] = []

    def start(settings: Settings) -> Service:
        app = create_app(settings)
        with app.state.service.sessions() as s:
            token = create_tenant_token(s, tenant="alice")
        live = LiveServer(app)
        url = live.__enter__()
        service = Service(app, httpx.Client(base_url=url, timeout=30), url, token, live)
        started.append(service)
        return service

    yield start
    for service in reversed(started):
        service.stop()


def lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def test_a_job_waits_queued_while_its_ps_is_away_and_runs_once_it_is_back(
    settings: Settings,
    ps: Ps,
    serve: Any,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.WARNING, logger="api.coordinator.pslink")
    service: Service = serve(ps_settings(settings, ps, policy="esa", aggregators=8))
    job = service.submit("waits")
    where = f"127.0.0.1:{ps.control_port}"
    shown = service.job(job)
    assert shown["state"] == "queued", shown
    assert shown["queue_reason"]["kind"] == "ps_unavailable", shown
    assert shown["reason"].startswith("its PS did not take the job: ")
    assert where in shown["reason"] and "refused" in shown["reason"], shown
    # Nothing of it on the switch, nothing held for it in the scheduler's state.
    assert service.installed() == set()
    coordinator = service.app.state.service.coordinator
    assert coordinator.applier.ids.owners == {}
    assert coordinator.applier.memory.shared() == {} == coordinator.applier.memory.partitions()
    # The operator's listing says why.
    assert main(["jobs", "--service", service.url, "--token", service.token, "list"]) == 0
    assert "its PS did not take the job" in capsys.readouterr().out
    # Retries go on (the first after 1 s, the next 2 s later); the outage is logged once.
    wait_for(lambda: service.metric("inasched_ps_away_seconds") > 3.5, "two retries")
    second = service.submit("also waits")
    assert service.job(second)["queue_reason"]["kind"] == "ps_unavailable"
    assert service.job(job)["state"] == "queued" and service.installed() == set()
    assert len(lines(caplog, AWAY)) == 1, caplog.text
    assert lines(caplog, where)

    ps.up()
    for waiting in (job, second):
        wait_for(lambda j=waiting: service.job(j)["state"] == "admitted", "admission")
    assert len(service.installed()) == 2
    assert len(lines(caplog, BACK)) == 1 and len(lines(caplog, AWAY)) == 1, caplog.text
    assert service.metric("inasched_ps_away_seconds") == 0
    received = ps.server.counters().received
    service.run_to_finished(job)
    service.run_to_finished(second)
    assert ps.server.counters().received > received  # the PS served the jobs' fragments
    wait_for(service.holds_nothing, "the switch to forget the finished jobs")


def test_a_job_cancelled_while_its_ps_is_away_leaves_its_memory_to_the_next(
    settings: Settings, ps: Ps, serve: Any
) -> None:
    """static: the pool holds one job's partition. The first job waits for its PS and is
    cancelled; the partition it was offered was given back, so the second job gets it once
    the PS is back, and runs."""
    service: Service = serve(ps_settings(settings, ps, policy="static", aggregators=64))
    first = service.submit("cancelled")
    assert service.job(first)["queue_reason"]["kind"] == "ps_unavailable"
    second = service.submit("next")
    response = service.http.post(f"/jobs/{first['id']}/cancel", headers=service.auth)
    assert response.status_code == 200, response.text
    assert service.installed() == set()
    memory = service.app.state.service.coordinator.applier.memory
    assert memory.partitions() == {}
    ps.up()
    wait_for(lambda: service.job(second)["state"] == "admitted", "the second job's admission")
    assert service.job(first)["state"] == "cancelled"
    service.run_to_finished(second)


def test_a_restarted_service_keeps_a_running_job_while_its_ps_is_away_and_registers_it_again(
    settings: Settings, ps: Ps, serve: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The PS restarts (it forgets every job) while the service restarts; the service comes
    back first. The running job is neither lost nor failed: it stays on the switch, its
    registration is owed and made once the PS answers, and it finishes through the new PS."""
    caplog.set_level(logging.WARNING, logger="api.coordinator.pslink")
    settings = ps_settings(settings, ps, policy="esa", aggregators=8)
    ps.up()
    first: Service = serve(settings)
    job = first.submit("survivor")
    assert first.job(job)["state"] == "admitted"
    workers = first.join_both(job)
    iterate(workers)
    first.stop()
    ps.down()
    host, port = ps.server.address
    ps.server.stop()
    ps.server = ParameterServer(host, port).start()  # the PS restarted: it knows no job

    second: Service = serve(settings)
    assert second.job(job)["state"] == "running"
    assert len(second.installed()) == 1
    assert len(lines(caplog, AWAY)) == 1, caplog.text
    ps.up()
    wait_for(lambda: len(lines(caplog, BACK)) == 1, "the owed registration")
    received = ps.server.counters().received
    iterate(workers)
    assert ps.server.counters().received > received
    second.finish(job, workers)
    wait_for(second.holds_nothing, "the switch to forget the job")
    assert len(lines(caplog, AWAY)) == 1, caplog.text


def test_a_job_that_ends_while_its_ps_is_away_leaves_the_switch_all_the_same(
    settings: Settings, ps: Ps, serve: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The PS's drop of the job fails: the switch forgets the job and its aggregators, its
    switch job id is free again, and the next job, once the PS is back, runs."""
    caplog.set_level(logging.WARNING, logger="api.coordinator.pslink")
    ps.up()
    service: Service = serve(ps_settings(settings, ps, policy="esa", aggregators=8))
    job = service.submit("ends")
    workers = service.join_both(job)
    iterate(workers)
    ps.down()
    iterate(workers)  # the data path needs no control channel
    service.finish(job, workers)
    wait_for(service.holds_nothing, "the switch to forget the job")
    coordinator = service.app.state.service.coordinator
    wait_for(lambda: coordinator.applier.ids.owners == {}, "its switch job id to be free")
    assert len(lines(caplog, AWAY)) == 1, caplog.text
    ps.up()
    after = service.submit("after")
    wait_for(lambda: service.job(after)["state"] == "admitted", "the next job's admission")
    service.run_to_finished(after)
    assert len(lines(caplog, BACK)) == 1, caplog.text
