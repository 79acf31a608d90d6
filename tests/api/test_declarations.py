"""A declared size cannot buy srtf priority, over HTTP against the real service with real workers
whose gradients pass through the embedded soft switch over UDP: a job declared with one
iteration whose workers run many and report nothing until the end loses the top priority once
the switch's counters show it passed its declaration."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import httpx
import numpy as np
import pytest

from api.coordinator.progress import Claim, Overrun, ProgressCheck
from api.http.app import create_app
from api.settings import Settings
from api.store.crud import create_tenant_token
from tests.api.conftest import LiveServer, decided, updated, wait_for
from workers.client import AllreduceClient
from workers.rendezvous import parse_join

# 4096 bytes in fragments of 64 lanes of 4 bytes: 16 packets per iteration of one worker.
GRADIENT_BYTES = 4096


@dataclass
class Service:
    client: httpx.Client
    auth: dict[str, str]

    def submit(self, name: str, iterations: int) -> dict[str, Any]:
        body = {
            "name": name,
            "n_workers": 1,
            "iterations": iterations,
            "gradient_bytes": GRADIENT_BYTES,
        }
        response = self.client.post("/jobs", json=body, headers=self.auth)
        assert response.status_code == 201, response.text
        return decided(self.client, response.json(), self.auth)

    def job(self, job: dict[str, Any]) -> dict[str, Any]:
        shown: dict[str, Any] = self.client.get(f"/jobs/{job['id']}", headers=self.auth).json()
        return shown

    def worker(self, job: dict[str, Any]) -> AllreduceClient:
        """Worker 0 of `job`, joined over HTTP with a bound UDP socket."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))
        answer = self.client.post(
            f"/jobs/{job['id']}/workers",
            json={"data_host": "127.0.0.1", "data_port": sock.getsockname()[1]},
            headers={"Authorization": f"Bearer {job['join_token']}"},
        )
        assert answer.status_code == 201, answer.text
        return AllreduceClient(parse_join(answer.json()), sock=sock)

    def report(self, job: dict[str, Any], iterations_done: int) -> None:
        response = self.client.post(
            f"/jobs/{job['id']}/workers/0/progress",
            json={"iterations_done": iterations_done, "bytes_switch": 0, "bytes_ps": 0},
            headers={"Authorization": f"Bearer {job['join_token']}"},
        )
        assert response.status_code == 200, response.text


@pytest.fixture
def service(settings: Settings) -> Iterator[Service]:
    app = create_app(
        updated(
            settings, switch={"target": "embedded"}, policy={"policy": "esa", "priority": "srtf"}
        )
    )
    with app.state.service.sessions() as s:
        token = create_tenant_token(s, tenant="alice")
    with LiveServer(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        yield Service(client=client, auth={"Authorization": f"Bearer {token}"})


def overran_total(service: Service) -> int:
    for line in service.client.get("/metrics").text.splitlines():
        if line.startswith("inasched_jobs_overran_declaration_total "):
            return int(line.split()[1])
    raise AssertionError("no inasched_jobs_overran_declaration_total on /metrics")


def test_a_job_that_runs_past_its_declared_iterations_loses_the_priority_it_bought(
    service: Service,
) -> None:
    liar = service.submit("liar", iterations=1)
    honest = service.submit("honest", iterations=40)
    gradient = np.ones(GRADIENT_BYTES // 4, dtype=np.float32)
    with service.worker(liar) as liar_worker, service.worker(honest) as honest_worker:

        def levels() -> tuple[int, int]:
            return service.job(liar)["priority_level"], service.job(honest)["priority_level"]

        # srtf: one declared iteration left against forty.
        wait_for(lambda: levels() == (15, 7), "the liar to rank on top by its declaration")
        honest_worker.allreduce(gradient)
        service.report(honest, 1)
        # Many iterations' worth of allreduces, and no progress report.
        for _ in range(20):
            result = liar_worker.allreduce(gradient)
            assert np.array_equal(result, gradient)
        wait_for(lambda: levels() == (7, 15), "the liar to rank below the honest job")
        shown = service.job(liar)
        assert shown["overran_declaration"] and shown["state"] == "running", shown
        assert not service.job(honest)["overran_declaration"]
        assert overran_total(service) == 1
        # Its final report finishes it as declared; the event was counted once.
        service.report(liar, 1)
        wait_for(lambda: service.job(liar)["state"] == "finished", "the liar to finish")
        assert overran_total(service) == 1


def test_an_overrun_is_found_once_per_job_and_logged_in_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    check = ProgressCheck(lanes=64)
    liar = Claim(1, 5, 0, 1, GRADIENT_BYTES, {"job_aggregated": 10}, iterations=1)
    honest = Claim(2, 6, 1, 1, GRADIENT_BYTES, {}, iterations=1)
    # The liar's switch job id counted 10 before it got the id: 16 more are one iteration.
    read = {5: {"job_aggregated": 10 + 16}, 6: {"job_aggregated": 16, "job_resent": 99}}
    with caplog.at_level(logging.WARNING, logger="api.coordinator.progress"):
        assert check.observe([liar, honest], read).overran == ()
        read[5] = {"job_aggregated": 10 + 16 * 3, "job_bypassed": 5}
        seen = check.observe([liar, honest], read)
        assert seen.overran == (Overrun(1, declared=1, counted=3, packets_per_iteration=16),)
        assert seen.changed
        read[5] = {"job_aggregated": 10 + 16 * 9}
        assert check.observe([liar, honest], read).overran == ()
        # As its row says after the service stored it (or after a restart): not again.
        assert check.observe([replace(liar, overran=True), honest], read).overran == ()
    assert check.overran_total == 1
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "job 1 over-ran its declaration" in lines[0], lines
    assert "declared 1 iterations" in lines[0] and "counted packets for 3" in lines[0]


def test_a_job_a_little_past_its_declaration_keeps_it() -> None:
    # One extra fragment per iteration (a bucket's padding, a loss allreduced besides the
    # gradient): 17 packets per declared iteration of 16, over all 40 iterations.
    check = ProgressCheck(lanes=64)
    job = Claim(1, 5, 40, 1, GRADIENT_BYTES, {}, iterations=40)
    assert check.observe([job], {5: {"job_aggregated": 40 * 17}}).overran == ()
    assert check.overran_total == 0
