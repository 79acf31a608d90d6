"""Per-tenant quotas and the join deadline: no tenant's jobs lock the others out of the switch.

Every test talks HTTP to a live service on a real store (SQLite, and PostgreSQL when
``INASCHED_TEST_POSTGRES_URL`` is set) with two tenants, alice and bob, and an admin, root.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from p4ctl.backend import InMemorySwitch
from sqlalchemy.orm import Session, sessionmaker

from api.coordinator.scheduling import Coordinator
from api.http.app import create_app
from api.settings import Settings
from api.store.crud import create_tenant_token
from api.store.models import Job
from tests.api.conftest import LiveServer, decided, updated, wait_for


@dataclass
class Service:
    client: httpx.Client
    switch: InMemorySwitch
    sessions: sessionmaker[Session]
    tokens: dict[str, str]
    coordinator: Coordinator

    def auth(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def submit(self, who: str, **fields: object) -> dict[str, Any]:
        body = {"name": "job", "n_workers": 2, "iterations": 3, "gradient_bytes": 4096, **fields}
        response = self.client.post("/jobs", json=body, headers=self.auth(who))
        assert response.status_code == 201, response.text
        created: dict[str, Any] = decided(self.client, response.json(), self.auth(who))
        return created

    def job(self, job_id: int) -> dict[str, Any]:
        response = self.client.get(f"/jobs/{job_id}", headers=self.auth("root"))
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def row(self, job_id: int) -> Job:
        with self.sessions() as s:
            job = s.get(Job, job_id)
            assert job is not None
            return job


ServiceFactory = Callable[..., Service]


@pytest.fixture
def make_service(settings: Settings) -> Iterator[ServiceFactory]:
    servers: list[tuple[LiveServer, httpx.Client]] = []

    def make(**overrides: object) -> Service:
        configured = updated(settings, **overrides)
        switch = InMemorySwitch(configured.switch.aggregators, configured.switch.lanes)
        app = create_app(configured, backend=switch)
        sessions = app.state.service.sessions
        with sessions() as s:
            tokens = {
                "alice": create_tenant_token(s, tenant="alice"),
                "bob": create_tenant_token(s, tenant="bob"),
                "root": create_tenant_token(s, tenant="root", admin=True),
            }
        server = LiveServer(app)
        client = httpx.Client(base_url=server.__enter__(), timeout=30)
        servers.append((server, client))
        return Service(client, switch, sessions, tokens, app.state.service.coordinator)

    yield make
    for server, client in servers:
        client.close()
        server.__exit__(None, None, None)


def test_a_tenant_at_its_job_limit_waits_and_the_others_are_admitted(
    make_service: ServiceFactory,
) -> None:
    service = make_service(tenant={"max_jobs": 2})
    alice = [service.submit("alice")["id"] for _ in range(3)]
    theirs = service.submit("bob")["id"]
    assert [service.job(j)["state"] for j in alice[:2]] == ["admitted", "admitted"]
    waiting = service.job(alice[2])
    assert waiting["state"] == "queued"
    assert waiting["queue_reason"]["kind"] == "tenant_quota"
    assert "tenant quota" in waiting["queue_reason"]["message"]
    assert "2 of its 2 admitted jobs" in waiting["queue_reason"]["message"]
    assert service.job(theirs)["state"] == "admitted"
    # A job of alice's that ends makes room for the one that waited.
    cancelled = service.client.post(f"/jobs/{alice[0]}/cancel", headers=service.auth("alice"))
    assert cancelled.status_code == 200, cancelled.text
    wait_for(lambda: service.job(alice[2])["state"] == "admitted", "alice's third job to run")


def test_an_admin_sets_a_tenants_limit_over_rest(make_service: ServiceFactory) -> None:
    service = make_service()
    url = "/tenants/alice/limits"
    assert service.client.get(url, headers=service.auth("root")).json() == {
        "tenant": "alice",
        "max_jobs": 256,
        "aggregator_share": 1.0,
        "max_priority_class": 7,
        "submit_rate": 20.0,
        "submit_burst": 200,
        "own": {
            "max_jobs": None,
            "aggregator_share": None,
            "max_priority_class": None,
            "submit_rate": None,
            "submit_burst": None,
        },
    }
    refused = service.client.put(url, json={"max_jobs": 1}, headers=service.auth("alice"))
    assert refused.status_code == 403 and "admin" in refused.text
    assert service.client.get(url, headers=service.auth("bob")).status_code == 403
    missing = service.client.put(
        "/tenants/nobody/limits", json={"max_jobs": 1}, headers=service.auth("root")
    )
    assert missing.status_code == 404
    for bad in ({"max_jobs": 0}, {"max_jobs": "1"}, {"aggregator_share": 1.5}, {"jobs": 1}):
        answer = service.client.put(url, json=bad, headers=service.auth("root"))
        assert answer.status_code == 422, (bad, answer.text)

    limited = service.client.put(url, json={"max_jobs": 1}, headers=service.auth("root"))
    assert limited.status_code == 200, limited.text
    assert limited.json()["max_jobs"] == 1 and limited.json()["own"]["max_jobs"] == 1
    first, second = service.submit("alice")["id"], service.submit("alice")["id"]
    assert service.job(first)["state"] == "admitted"
    assert service.job(second)["queue_reason"]["kind"] == "tenant_quota"
    assert service.job(service.submit("bob")["id"])["state"] == "admitted"
    # Back to the default: the waiting job is admitted by the round the change asks for.
    reset = service.client.put(url, json={"max_jobs": None}, headers=service.auth("root"))
    assert reset.json()["max_jobs"] == 256
    assert service.job(second)["state"] == "admitted"


def test_a_tenants_partitions_stay_within_its_share_of_aggregators(
    make_service: ServiceFactory,
) -> None:
    # static, 256 aggregators, window 32: each job's partition is 32 slots of two aggregators,
    # so alice's share of a half (128 aggregators) holds two jobs.
    service = make_service(policy={"policy": "static"}, tenant={"aggregator_share": 0.5})
    alice = [service.submit("alice", window=32)["id"] for _ in range(3)]
    theirs = service.submit("bob", window=32)["id"]
    assert [service.job(j)["state"] for j in alice] == ["admitted", "admitted", "queued"]
    reason = service.job(alice[2])["queue_reason"]
    assert reason["kind"] == "tenant_quota" and "share (0.5) is 128" in reason["message"]
    assert service.job(theirs)["state"] == "admitted"


def test_a_tenants_hashed_jobs_hash_into_its_share_of_the_pool(
    make_service: ServiceFactory,
) -> None:
    service = make_service(policy={"policy": "esa"})
    service.client.put(
        "/tenants/alice/limits", json={"aggregator_share": 0.25}, headers=service.auth("root")
    )
    mine, theirs = service.submit("alice")["id"], service.submit("bob")["id"]
    assert service.job(mine)["state"] == service.job(theirs)["state"] == "admitted"
    assert service.row(mine).shared_pool == 64
    assert service.row(theirs).shared_pool in (None, 256)


def test_an_admitted_job_whose_workers_do_not_join_fails_and_frees_its_switch_id(
    make_service: ServiceFactory,
) -> None:
    service = make_service(tenant={"max_jobs": 1})
    first = service.submit("alice")["id"]
    second = service.submit("alice")["id"]
    sid = service.row(first).switch_job_id
    assert sid is not None and sid in service.switch.installed_jobs()
    assert service.job(second)["queue_reason"]["kind"] == "tenant_quota"
    # The deadline starts only now, so a slow machine cannot fail the job before it is read.
    service.coordinator.join_timeout_s = 0.5

    wait_for(lambda: service.job(first)["state"] == "failed", "the join deadline")
    failed = service.job(first)
    assert failed["reason"] == "0 of its 2 workers joined within 0.5 s (join_timeout_s)"
    wait_for(lambda: service.row(first).switch_job_id is None, "its switch job id to be freed")
    wait_for(lambda: sid not in service.switch.installed_jobs(), "the switch to drop it")
    # Its place went to the job that waited behind the quota.
    wait_for(lambda: service.row(second).admitted_at is not None, "the waiting job's admission")


def test_a_job_whose_workers_all_joined_is_not_failed_by_the_join_deadline(
    make_service: ServiceFactory,
) -> None:
    service = make_service()
    job = service.submit("alice", n_workers=1)
    join = service.client.post(
        f"/jobs/{job['id']}/workers",
        json={"data_host": "127.0.0.1", "data_port": 999},
        headers={"Authorization": f"Bearer {job['join_token']}"},
    )
    assert join.status_code == 201, join.text
    assert service.job(job["id"])["state"] == "running"
    service.coordinator.join_timeout_s = 0.5  # from now: a slow join cannot fail it first
    late = service.submit("alice")
    wait_for(lambda: service.job(late["id"])["state"] == "failed", "the other job's deadline")
    assert service.job(job["id"])["state"] == "running"
