"""A job's end is never a hang: once the service says a job ended (finished with its final
progress report, cancelled, failed), a pending allreduce and every later one fail with
`JobEnded` naming the state, instead of retransmitting to a switch that keeps nothing of the
job until the client's own timeout. Real service (embedded soft switch and PS), real UDP,
real worker clients and heartbeats; the clients' timeout is far longer than any test runs, so
a hang would show as a test timeout, not as a pass."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from api.http.app import create_app
from api.settings import Settings
from api.store.crud import create_tenant_token
from tests.api.conftest import LiveServer, wait_for
from workers.client import AllreduceClient, open_socket
from workers.errors import AllreduceTimeout, JobEnded
from workers.options import ClientOptions
from workers.rendezvous import join
from workers.worker import Reporter

# Far beyond the test's run: an allreduce that ends by this timeout has hung.
NEVER_S = 600.0
ITERATIONS = 2


@dataclass
class Rank:
    """One worker of the job: its client and its heartbeats."""

    client: AllreduceClient
    reporter: Reporter


@dataclass
class Job:
    url: str
    http: httpx.Client
    body: dict[str, Any]
    ranks: list[Rank]
    at_once: Callable[[Callable[[int], Any], int], list[Any]]

    def state(self) -> str:
        return str(self.http.get(f"/jobs/{self.body['id']}").json()["state"])

    def on_every_rank(self, work: Callable[[Rank], Any]) -> list[Any]:
        """`work(rank)` on every rank at once; what each returned or raised."""
        return self.at_once(lambda i: work(self.ranks[i]), len(self.ranks))


@pytest.fixture
def job(tmp_path: Path, each_at_once: Any) -> Iterator[Job]:
    """A running job of two workers, each joined with a client and heartbeats every 0.2 s."""
    settings = Settings(
        data_dir=tmp_path, aggregators=256, port=0, tick_s=0.05, heartbeat_interval_s=0.2,
        heartbeat_timeout_s=60.0,
    )  # fmt: skip
    app = create_app(settings)
    with app.state.service.sessions() as s:
        token = create_tenant_token(s, tenant="alice")
    headers = {"Authorization": f"Bearer {token}"}
    with LiveServer(app) as url, httpx.Client(base_url=url, headers=headers, timeout=30) as http:
        body = {"name": "end", "n_workers": 2, "iterations": ITERATIONS, "gradient_bytes": 4096}
        response = http.post("/jobs", json=body)
        assert response.status_code == 201, response.text
        submitted = response.json()
        ranks = []
        for _ in range(2):
            sock = open_socket()
            joined = join(url, submitted["id"], submitted["join_token"], sock.getsockname()[:2])
            client = AllreduceClient(joined, sock=sock, options=ClientOptions(timeout_s=NEVER_S))
            reporter = Reporter(url, joined, submitted["join_token"], client.end)
            ranks.append(Rank(client, reporter))
        try:
            yield Job(url, http, submitted, ranks, each_at_once)
        finally:
            for rank in ranks:
                rank.reporter.close()
                rank.client.close()


def _train(rank: Rank) -> None:
    for it in range(ITERATIONS):
        rank.client.allreduce(np.ones(1024, np.float32))
        rank.reporter.progress(it + 1, rank.client)


def test_an_allreduce_after_the_final_report_fails_naming_the_finished_job(job: Job) -> None:
    assert job.on_every_rank(_train) == [None, None]
    assert job.state() == "finished"
    outcomes = job.on_every_rank(lambda rank: rank.client.allreduce(np.ones(8, np.float32)))
    for outcome in outcomes:
        assert isinstance(outcome, JobEnded), outcome
        assert outcome.state == "finished"
        assert f"job {job.body['id']} has ended (finished)" in str(outcome)
    # ... and so does every later one, at once.
    with pytest.raises(JobEnded, match="finished"):
        job.ranks[0].client.allreduce_async(np.ones(8, np.float32))


def test_a_pending_allreduce_fails_when_the_job_is_cancelled(job: Job) -> None:
    # One rank alone: the switch waits for the other, so the allreduce stays pending.
    pending = job.ranks[0].client.allreduce_async(np.ones(1024, np.float32))
    wait_for(lambda: job.state() == "running", "the job to run")
    assert job.http.post(f"/jobs/{job.body['id']}/cancel").status_code == 200
    with pytest.raises(JobEnded, match=r"has ended \(cancelled\)") as raised:
        pending.wait(NEVER_S)
    assert not isinstance(raised.value, AllreduceTimeout)
    assert job.ranks[0].reporter.ended is not None
