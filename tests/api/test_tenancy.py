"""Roles, the token lifecycle, what one tenant sees of another, and every schemathesis check
on every route with a tenant's and an admin's token.

Every test talks HTTP to a live service on a real store (SQLite, and PostgreSQL when
``INASCHED_TEST_POSTGRES_URL`` is set) with two tenants, alice and bob, and an admin, root.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from p4ctl.backend import InMemorySwitch
from pydantic import SecretStr
from sqlalchemy.orm import Session, sessionmaker

from api.coordinator.counters import OTHER_TENANTS
from api.http.app import create_app
from api.settings import Settings
from api.store.crud import create_tenant_token
from api.store.models import Job
from cli.main import main
from tests.api.conftest import LiveServer, decided, updated, wait_for

METRICS_TOKEN = "scrape-secret-0123456789"


@dataclass
class Service:
    client: httpx.Client
    switch: InMemorySwitch
    sessions: sessionmaker[Session]
    settings: Settings
    tokens: dict[str, str]

    def auth(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens.get(who, who)}"}

    def submit(self, who: str, name: str = "job") -> dict[str, Any]:
        body = {"name": name, "n_workers": 2, "iterations": 3, "gradient_bytes": 4096}
        response = self.client.post("/jobs", json=body, headers=self.auth(who))
        assert response.status_code == 201, response.text
        created: dict[str, Any] = decided(self.client, response.json(), self.auth(who))
        return created

    def switch_job_id(self, job_id: int) -> int:
        with self.sessions() as s:
            job = s.get(Job, job_id)
            assert job is not None and job.switch_job_id is not None, "job not admitted"
            return job.switch_job_id

    def occupy(self, job_id: int, aggregators: range, *, aggregated: int) -> None:
        """Leave `aggregators` partial sums of `job_id` in the switch's registers, and count
        `aggregated` fragments for it, as its packets would have."""
        sid = self.switch_job_id(job_id)
        pipe = self.switch.pipeline
        for i in aggregators:
            pipe.registers.agg_job[i] = sid
            pipe.registers.agg_state[i] = 1  # partial
        pipe.job_packets["job_aggregated"][sid] = aggregated


@pytest.fixture
def service(settings: Settings) -> Iterator[Service]:
    settings = updated(settings, metrics={"token": SecretStr(METRICS_TOKEN)})
    switch = InMemorySwitch(settings.switch.aggregators, settings.switch.lanes)
    app = create_app(settings, backend=switch)
    sessions = app.state.service.sessions
    with sessions() as s:
        tokens = {
            "alice": create_tenant_token(s, tenant="alice"),
            "bob": create_tenant_token(s, tenant="bob"),
            "root": create_tenant_token(s, tenant="root", admin=True),
        }
    with LiveServer(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        yield Service(client, switch, sessions, settings, tokens)


# ---------------------------------------------------------------------------- roles


def test_a_tenant_token_cannot_change_the_policy(service: Service) -> None:
    refused = service.client.put(
        "/policy", json={"policy": "static"}, headers=service.auth("alice")
    )
    assert refused.status_code == 403
    assert "admin token" in refused.json()["detail"]
    assert service.client.get("/policy", headers=service.auth("alice")).json()["policy"] == "esa"
    changed = service.client.put("/policy", json={"policy": "static"}, headers=service.auth("root"))
    assert changed.status_code == 200
    assert service.client.get("/policy", headers=service.auth("bob")).json()["policy"] == "static"


def test_an_admin_sees_every_tenants_jobs_and_a_tenant_only_its_own(service: Service) -> None:
    job = service.submit("alice")
    listed = service.client.get("/jobs", headers=service.auth("root")).json()
    assert [j["id"] for j in listed["items"]] == [job["id"]] and listed["total"] == 1
    assert service.client.get(f"/jobs/{job['id']}", headers=service.auth("root")).status_code == 200
    assert service.client.get("/jobs", headers=service.auth("bob")).json()["total"] == 0
    assert service.client.get(f"/jobs/{job['id']}", headers=service.auth("bob")).status_code == 404


# ---------------------------------------------------------------------------- token lifecycle


def test_only_an_admin_manages_tokens(service: Service) -> None:
    for method, path in (
        ("GET", "/tokens"),
        ("POST", "/tokens"),
        ("DELETE", "/tenants/bob/tokens"),
    ):
        body = {"tenant": "eve", "admin": True} if method == "POST" else None
        answer = service.client.request(method, path, json=body, headers=service.auth("alice"))
        assert answer.status_code == 403, (method, path)
        assert "admin token" in answer.json()["detail"]
    assert service.client.get("/jobs", headers=service.auth("bob")).status_code == 200


def test_a_revoked_token_is_refused_at_once(service: Service) -> None:
    created = service.client.post("/tokens", json={"tenant": "carol"}, headers=service.auth("root"))
    assert created.status_code == 201
    carol = created.json()
    assert carol["tenant"] == "carol" and carol["admin"] is False
    assert service.client.get("/jobs", headers=service.auth(carol["token"])).status_code == 200
    listed = service.client.get("/tokens", headers=service.auth("root")).json()
    assert {(t["tenant"], t["admin"], t["revoked_at"]) for t in listed} == {
        ("alice", False, None),
        ("bob", False, None),
        ("root", True, None),
        ("carol", False, None),
    }
    assert all("token" not in t for t in listed)
    revoked = service.client.delete("/tenants/carol/tokens", headers=service.auth("root"))
    assert revoked.status_code == 200
    assert [t["id"] for t in revoked.json()] == [carol["id"]]
    refused = service.client.get("/jobs", headers=service.auth(carol["token"]))
    assert refused.status_code == 401 and "revoked" in refused.json()["detail"]
    listed = service.client.get("/tokens", headers=service.auth("root")).json()
    assert [t["revoked_at"] is not None for t in listed if t["tenant"] == "carol"] == [True]
    missing = service.client.delete("/tenants/nobody/tokens", headers=service.auth("root"))
    assert missing.status_code == 404


def test_the_last_admin_token_is_not_revoked_over_http(service: Service) -> None:
    refused = service.client.delete("/tenants/root/tokens", headers=service.auth("root"))
    assert refused.status_code == 409 and "last admin token" in refused.json()["detail"]
    assert service.client.get("/tokens", headers=service.auth("root")).status_code == 200


@pytest.mark.parametrize("name", ["", " ", "x" * 65, "a/b", "-a"])
def test_a_token_for_a_bad_tenant_name_is_refused(service: Service, name: str) -> None:
    answer = service.client.post("/tokens", json={"tenant": name}, headers=service.auth("root"))
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["body", "tenant"]


def _store_args(settings: Settings) -> list[str]:
    return ["--data-dir", str(settings.data_dir), "--database-url", settings.resolved_database_url]


def test_cli_admin_token_changes_the_policy_and_revoke_refuses_it(
    service: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    store = _store_args(service.settings)
    assert main(["token", "create", "ops", "--admin", *store]) == 0
    ops = capsys.readouterr().out.strip()
    changed = service.client.put("/policy", json={"policy": "atp"}, headers=service.auth(ops))
    assert changed.status_code == 200
    assert main(["token", "list", *store]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "TENANT", "ROLE", "CREATED", "REVOKED"]
    assert [line.split()[1:3] for line in lines[1:]] == [
        ["alice", "tenant"], ["bob", "tenant"], ["root", "admin"], ["ops", "admin"]
    ]  # fmt: skip
    assert main(["token", "revoke", "ops", *store]) == 0
    assert "revoked 1 token" in capsys.readouterr().out
    assert service.client.get("/policy", headers=service.auth(ops)).status_code == 401
    assert main(["token", "revoke", "nobody", *store]) == 1


@pytest.mark.parametrize("name", ["", "x" * 65])
def test_cli_refuses_an_empty_or_over_long_tenant_name(
    service: Service, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    assert main(["token", "create", name, *_store_args(service.settings)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("inasched: the tenant name is") and "Traceback" not in error
    listed = service.client.get("/tokens", headers=service.auth("root")).json()
    assert len(listed) == 3


def test_cli_does_not_create_a_store_unless_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("INASCHED_DATABASE_URL", raising=False)
    empty = tmp_path / "typo"
    assert main(["token", "create", "ops", "--admin", "--data-dir", str(empty)]) == 2
    error = capsys.readouterr().err
    assert "no inasched store" in error and "--init" in error
    assert not (empty / "inasched.db").exists()
    assert main(["token", "create", "ops", "--admin", "--init", "--data-dir", str(empty)]) == 0
    token = capsys.readouterr().out.strip()
    assert (empty / "inasched.db").is_file()
    # The store made by --init is one a service opens, and the token is its first admin.
    settings = Settings(data_dir=empty, tick_s=0.05, switch={"target": "memory", "aggregators": 64})
    app = create_app(settings, backend=InMemorySwitch(64, 64))
    with LiveServer(app) as url:
        auth = {"Authorization": f"Bearer {token}"}
        assert httpx.get(f"{url}/tokens", headers=auth, timeout=30).status_code == 200


# ---------------------------------------------------------------------------- what others see


def _alice_and_bob_on_the_switch(service: Service) -> tuple[int, int]:
    mine, theirs = service.submit("alice")["id"], service.submit("bob")["id"]
    service.occupy(mine, range(0, 4), aggregated=7)
    service.occupy(theirs, range(4, 10), aggregated=11)
    return mine, theirs


def test_switch_shows_a_tenant_its_own_jobs_and_others_as_anonymous(service: Service) -> None:
    mine, theirs = _alice_and_bob_on_the_switch(service)
    view = service.client.get("/switch", headers=service.auth("alice")).json()
    assert view["runs"] == [[0, 4, mine, 1], [4, 6, OTHER_TENANTS, 1]]
    assert list(view["counters"]["jobs"]) == [str(mine)]
    assert view["counters"]["jobs"][str(mine)]["job_aggregated"] == 7
    assert "unknown_job" in view["counters"]["drops"]
    admin = service.client.get("/switch", headers=service.auth("root")).json()
    assert admin["runs"] == [[0, 4, mine, 1], [4, 6, theirs, 1]]
    assert set(admin["counters"]["jobs"]) == {str(mine), str(theirs)}


def _switch_events(service: Service, who: str, seen: Any) -> dict[str, Any]:
    """The first ``event: switch`` on `who`'s stream for which `seen(data)` holds."""
    token = service.tokens[who]
    with service.client.stream("GET", f"/events?token={token}") as stream:
        lines = stream.iter_lines()
        for line in lines:
            if line == "event: switch":
                data: dict[str, Any] = json.loads(next(lines).removeprefix("data: "))
                if seen(data):
                    return data
    raise AssertionError("the stream ended")


def test_event_stream_shows_a_tenant_its_own_jobs_and_others_as_anonymous(
    service: Service,
) -> None:
    mine, theirs = _alice_and_bob_on_the_switch(service)
    # The stream samples the switch on its own clock, so a sample may fall between the two
    # jobs' cells being occupied: wait for one that shows both.
    data = _switch_events(service, "alice", lambda d: len(d["runs"]) == 2)
    assert data["runs"] == [[0, 4, mine, 1], [4, 6, OTHER_TENANTS, 1]]
    assert list(data["counters"]["jobs"]) == [str(mine)]
    data = _switch_events(service, "root", lambda d: len(d["runs"]) == 2)
    assert data["runs"] == [[0, 4, mine, 1], [4, 6, theirs, 1]]


def test_event_stream_of_an_admin_carries_every_tenants_job_events(service: Service) -> None:
    with service.client.stream("GET", f"/events?token={service.tokens['root']}") as stream:
        lines = stream.iter_lines()
        assert next(lines) == "event: switch"
        job = service.submit("bob")
        for line in lines:
            if line == "event: job" and json.loads(next(lines)[6:])["id"] == job["id"]:
                break


def test_bench_runs_belong_to_the_tenant_that_stored_them(service: Service) -> None:
    body = {"workload": "w", "backend": "sim", "summary": {}, "jobs": [{"job_id": 0}]}
    created = service.client.post("/bench/runs", json=body, headers=service.auth("alice"))
    assert created.status_code == 201
    run_id = created.json()["id"]
    assert [
        r["id"] for r in service.client.get("/bench/runs", headers=service.auth("alice")).json()
    ] == [run_id]
    assert service.client.get("/bench/runs", headers=service.auth("bob")).json() == []
    assert (
        service.client.get(f"/bench/runs/{run_id}", headers=service.auth("bob")).status_code == 404
    )
    assert (
        service.client.get(f"/bench/runs/{run_id}", headers=service.auth("root")).status_code == 200
    )
    assert len(service.client.get("/bench/runs", headers=service.auth("root")).json()) == 1


def test_metrics_have_tenant_labels_only_for_the_scrape_token(service: Service) -> None:
    service.submit("alice")
    service.submit("bob")
    wait_for(
        lambda: 'inasched_jobs{state="admitted"} 2' in service.client.get("/metrics").text,
        "two admitted jobs",
    )
    open_text = service.client.get("/metrics").text
    assert "tenant=" not in open_text and "alice" not in open_text
    for token in ("alice", "root"):  # tenant and admin API tokens are not the scrape token
        assert service.client.get("/metrics", headers=service.auth(token)).status_code == 401
    scraped = service.client.get("/metrics", headers=service.auth(METRICS_TOKEN))
    assert scraped.status_code == 200
    assert 'inasched_tenant_jobs{tenant="alice",state="admitted"} 1' in scraped.text
    assert 'inasched_tenant_jobs{tenant="bob",state="admitted"} 1' in scraped.text


@pytest.mark.parametrize("who", ["alice", "root"])
def test_every_check_of_schemathesis_passes_on_every_route(
    service: Service, who: str, tmp_path: Path
) -> None:
    token = service.tokens[who]
    st = Path(sys.executable).with_name("st")
    command = [str(st), "run"]
    command += [f"{str(service.client.base_url).rstrip('/')}/openapi.json"]
    command += ["--checks", "all", "-H", f"Authorization: Bearer {token}"]
    command += ["--max-examples", "10", "--seed", "1", "--no-color"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    summary = run.stdout[run.stdout.find("=== FAILURES") :] or run.stdout[-3000:]
    assert run.returncode == 0, summary + run.stderr
    selected = re.search(r"Selected: (\d+)/(\d+)\s+Tested: (\d+)", run.stdout)
    assert selected is not None, run.stdout[-3000:]
    assert selected[1] == selected[2] == selected[3], selected[0]  # every route, each tested
