"""Policy, switch view, metrics, events, benchmark runs, the store's schema and start-up."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
from sqlalchemy import create_engine, inspect

from api.settings import Settings
from api.store.db import migrate
from api.store.models import Base
from tests.api.conftest import Api, make_api, updated, wait_for


def test_policy_change_applies_to_jobs_admitted_afterwards(api: Api) -> None:
    before = api.submit()
    current = api.client.get("/policy", headers=api.auth()).json()
    assert current["policy"] == "esa"
    changed = api.client.put(
        "/policy", json={"policy": "static"}, headers=api.auth(api.admin_token)
    )
    assert changed.status_code == 200
    assert "admitted from now on" in changed.json()["applies_to"]
    after = api.submit(window=8)
    # The esa job hashes into the whole pool: a private partition there would overwrite its
    # partial sums, so the static job waits until the esa job leaves.
    assert after["state"] == "queued"
    assert api.client.get(f"/jobs/{before['id']}", headers=api.auth()).json()["policy"] == "esa"
    api.client.post(f"/jobs/{before['id']}/cancel", headers=api.auth())

    def admitted_static() -> bool:
        job = api.client.get(f"/jobs/{after['id']}", headers=api.auth()).json()
        return bool(job["policy"] == "static" and job["state"] == "admitted")

    wait_for(admitted_static, "the static job to be admitted once the esa job left")
    bad = api.client.put("/policy", json={"policy": "fifo"}, headers=api.auth(api.admin_token))
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["body", "policy"]


def test_static_job_gets_a_private_partition_in_its_join(api: Api) -> None:
    api.client.put("/policy", json={"policy": "static"}, headers=api.auth(api.admin_token))
    job = api.submit(n_workers=1, window=8)
    joined = api.client.post(
        f"/jobs/{job['id']}/workers",
        json={"data_host": "127.0.0.1", "data_port": 40001},
        headers=api.auth(str(job["join_token"])),
    ).json()
    assert joined["placement"] == {"kind": "static", "part_base": 0, "part_size": 8}
    assert joined["window"] == 8


def test_switch_view_names_service_job_ids(api: Api) -> None:
    job = api.submit(n_workers=1)
    view = api.client.get("/switch", headers=api.auth()).json()
    assert view["aggregators"] == 256 and view["lanes"] == 64
    assert view["runs"] == []
    assert "unknown_job" in view["counters"]["drops"]
    assert api.client.get("/switch").status_code == 401
    assert job["id"] >= 1


def test_metrics_are_prometheus_text(api: Api) -> None:
    api.submit()
    text = api.client.get("/metrics").text
    assert 'inasched_jobs{state="admitted"} 1' in text
    assert "# TYPE inasched_jct_seconds histogram" in text
    assert "inasched_switch_aggregators 256" in text
    assert 'inasched_switch_drops_total{reason="unknown_job"} 0' in text


def test_event_stream_sends_switch_then_the_tenants_job_events(api: Api) -> None:
    url = f"/events?token={api.token}"
    with api.client.stream("GET", url) as stream:
        lines = stream.iter_lines()
        assert next(lines) == "event: switch"
        assert json.loads(next(lines).removeprefix("data: "))["aggregators"] == 256
        job = api.submit()
        for line in lines:
            if line == "event: job":
                data = json.loads(next(lines).removeprefix("data: "))
                if data["id"] == job["id"]:
                    break
    assert api.client.get("/events").status_code == 401


def test_bench_runs_are_stored_listed_and_read(api: Api) -> None:
    body = {
        "workload": "synthetic-8",
        "backend": "sim",
        "summary": {"policies": {"esa": {"avg_jct": 1.0}}},
        "jobs": [{"job_id": 0, "policy": "esa", "jct_s": 1.0}],
    }
    created = api.client.post("/bench/runs", json=body, headers=api.auth())
    assert created.status_code == 201
    run_id = created.json()["id"]
    listed = api.client.get("/bench/runs", headers=api.auth()).json()
    assert [r["id"] for r in listed] == [run_id] and "jobs" not in listed[0]
    detail = api.client.get(f"/bench/runs/{run_id}", headers=api.auth()).json()
    assert detail["jobs"] == body["jobs"]
    assert api.client.get("/bench/runs/999", headers=api.auth()).status_code == 404


def test_migrations_create_exactly_the_models_tables(database_url: str) -> None:
    engine = create_engine(database_url)
    migrate(engine)
    inspector = inspect(engine)
    for table in Base.metadata.sorted_tables:
        columns = {c["name"] for c in inspector.get_columns(table.name)}
        assert columns == set(table.columns.keys()), table.name
    engine.dispose()


def test_unreachable_database_is_one_line_and_nonzero_exit() -> None:
    cmd = [sys.executable, "-m", "cli", "token", "create", "x"]
    cmd += ["--database-url", "postgresql+psycopg://nobody@127.0.0.1:1/none"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 3  # cli.jobs.ExitCode.UNREACHABLE
    errors = [line for line in done.stderr.splitlines() if line.startswith("inasched:")]
    assert len(errors) == 1 and "cannot use the database" in errors[0]
    assert "Traceback" not in done.stderr


def test_healthz(api: Api) -> None:
    assert api.client.get("/healthz").json() == {"status": "ok"}
    assert isinstance(api.client, httpx.Client)


def test_a_waiting_jobs_new_reason_reaches_the_event_stream(settings: Settings) -> None:
    # A round writes a queued job's new reason without loading the job; the stream still
    # carries the job with it.
    for api in make_api(updated(settings, tenant={"max_jobs": 1})):
        with api.client.stream("GET", f"/events?token={api.token}") as stream:
            lines = stream.iter_lines()
            assert next(lines) == "event: switch"
            api.submit(answer=True)
            waiting = api.submit(answer=True)
            deadline = time.monotonic() + 20  # checked at each line: job events, keepalives
            for line in lines:
                assert time.monotonic() < deadline, "no event with the job's new reason"
                if line == "event: job":
                    data = json.loads(next(lines).removeprefix("data: "))
                    reason = data["queue_reason"] or {}
                    if data["id"] == waiting["id"] and reason.get("kind") == "tenant_quota":
                        break
