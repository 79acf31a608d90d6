"""Data through two levels of soft switch processes started by the service: a job across two
racks and a job inside one rack allreduce exactly in every policy, each worker told its own
ToR's data address at join; the in-rack job never reaches the spine."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from api.http.app import create_app
from api.settings import Settings
from api.store.crud import create_tenant_token
from tests.api.conftest import LiveServer, wait_for
from workers.client import AllreduceClient, open_socket
from workers.rendezvous import join

LOOPBACK = Path(__file__).resolve().parents[2] / "scheduler" / "data" / "topology-loopback.json"
ROUNDS = 5
LENGTH = 3000  # several fragments of 64 lanes per allreduce


@pytest.fixture(params=["static", "atp", "esa"])
def service(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    settings = Settings(
        data_dir=tmp_path,
        tick_s=0.05,
        switch={"target": "embedded", "topology": LOOPBACK},
        policy={"policy": request.param},
    )
    app = create_app(settings)
    with app.state.service.sessions() as s:
        token = create_tenant_token(s, tenant="alice", admin=True)
    with LiveServer(app) as url:
        yield url, token


def _allreduce(
    url: str, token: str, hosts: list[str], results: dict[int, list[np.ndarray]]
) -> tuple[int, list[tuple[str, int]]]:
    """Submit a job of one worker per host, join them all, then allreduce `ROUNDS` times in
    threads; ``(job id, the switch each worker was told)``; results by worker id."""
    with httpx.Client(base_url=url, timeout=30) as http:
        body = {"name": "fabric", "n_workers": len(hosts), "iterations": ROUNDS,
                "gradient_bytes": 4 * LENGTH}  # fmt: skip
        job = http.post("/jobs", json=body, headers={"Authorization": f"Bearer {token}"}).json()
    socks = [open_socket(host) for host in hosts]
    joins = [
        join(url, job["id"], job["join_token"], sock.getsockname(), queue_wait_s=30)
        for sock in socks
    ]

    def work(index: int) -> None:
        me = joins[index]
        with AllreduceClient(me, sock=socks[index]) as client:
            results[me.worker_id] = [
                client.allreduce(_gradient(me.worker_id, r), key="g") for r in range(ROUNDS)
            ]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(hosts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return int(job["id"]), [j.switch for j in joins]


def _gradient(worker: int, round_: int) -> np.ndarray:
    """Whole numbers, so that every order of summing gives the same float32 sum."""
    return (np.arange(LENGTH, dtype=np.float32) % 97) * (worker + 1) + round_


def test_two_racks_and_one_rack_allreduce_exactly(service: tuple[str, str]) -> None:
    url, token = service
    fabric = json.loads(LOOPBACK.read_text())
    assert [s["name"] for s in fabric["switches"]] == ["spine", "tor0", "tor1"]
    wide: dict[int, list[np.ndarray]] = {}
    narrow: dict[int, list[np.ndarray]] = {}
    hosts = ["127.0.1.1", "127.0.1.2", "127.0.2.1", "127.0.2.2"]
    wide_job, told = _allreduce(url, token, hosts, wide)
    with httpx.Client(base_url=url, timeout=30) as http:
        switches = http.get("/switch", headers={"Authorization": f"Bearer {token}"}).json()
    data = {s["name"]: s["data"] for s in switches["switches"]}
    assert [f"{h}:{p}" for h, p in told] == [data["tor0"]] * 2 + [data["tor1"]] * 2
    narrow_job, _ = _allreduce(url, token, ["127.0.2.7", "127.0.2.8"], narrow)
    for results, n in ((wide, 4), (narrow, 2)):
        assert sorted(results) == list(range(n))
        for round_ in range(ROUNDS):
            expected = sum(_gradient(w, round_) for w in range(n))
            for worker in range(n):
                np.testing.assert_array_equal(results[worker][round_], expected)
    # The wide job's sums met at the spine; the in-rack job's packets never reached it.
    with httpx.Client(base_url=url, timeout=30) as http:
        wait_for(lambda: _counted(http, token, wide_job, "spine") > 0, "the spine's counters")
        wait_for(lambda: _counted(http, token, narrow_job, "tor1") > 0, "tor1's counters")
        assert _counted(http, token, narrow_job, "spine") == 0


def _counted(http: httpx.Client, token: str, job_id: int, switch: str) -> int:
    view = http.get("/switch", headers={"Authorization": f"Bearer {token}"}).json()
    one = next(s for s in view["switches"] if s["name"] == switch)
    return sum(one["counters"]["jobs"].get(str(job_id), {}).values())
