"""A full or absent store gets a clear answer: 503, Retry-After, a body that says what is wrong,
and one log line per episode, on every route."""

from __future__ import annotations

import logging
import os
import socket
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg
import pytest
from sqlalchemy.exc import DBAPIError

from api.http.app import create_app
from api.settings import Settings
from api.store.crud import create_tenant_token
from api.store.health import store_fault
from tests.api.conftest import LiveServer

JOB = {"name": "job", "n_workers": 1, "iterations": 3, "gradient_bytes": 4096}
HEARTBEAT_TIMEOUT_S = 2.0


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs, unmounted afterwards (skips where this user cannot mount one)."""
    where = tmp_path / "tiny"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def _fill(path: Path) -> None:
    """Write `path` until its filesystem is full."""
    with path.open("wb") as out:
        try:
            while True:
                out.write(os.urandom(16384))
                out.flush()
        except OSError:
            pass


def _messages(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if text in r.getMessage()]


def test_a_full_store_answers_503_store_full_logs_once_and_keeps_its_integrity(
    tiny_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    database = tiny_disk / "inasched.db"
    settings = Settings(
        data_dir=tiny_disk,
        database={"url": f"sqlite:///{database}"},
        switch={"target": "memory", "aggregators": 256},
        tick_s=0.05,
        heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S,
    )
    app = create_app(settings)
    with app.state.service.sessions() as s:
        auth = {"Authorization": f"Bearer {create_tenant_token(s, tenant='alice')}"}
    with (
        LiveServer(app) as url,
        httpx.Client(base_url=url, timeout=30) as client,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as worker,
    ):
        worker.bind(("127.0.0.1", 0))
        job = client.post("/jobs", json=JOB, headers=auth).json()
        joined = client.post(
            f"/jobs/{job['id']}/workers",
            json={"data_host": "127.0.0.1", "data_port": worker.getsockname()[1]},
            headers={"Authorization": f"Bearer {job['join_token']}"},
        )
        assert joined.status_code == 201, joined.text
        beat = f"/jobs/{job['id']}/workers/0/heartbeat"
        join_auth = {"Authorization": f"Bearer {job['join_token']}"}
        filler = tiny_disk / "filler"
        _fill(filler)
        caplog.clear()
        refused = [client.post("/jobs", json=JOB, headers=auth) for _ in range(20)]
        # The worker's heartbeats are refused for longer than the heartbeat timeout.
        deadline = time.monotonic() + 2 * HEARTBEAT_TIMEOUT_S
        while time.monotonic() < deadline:
            refused.append(client.post(beat, headers=join_auth))
            time.sleep(0.2)
        for answer in refused:
            assert answer.status_code == 503, answer.text
            assert answer.json()["store"] == "full"
            assert answer.json()["detail"].startswith("store full: ")
            assert int(answer.headers["Retry-After"]) > 0
        # Reads still answer (a full disk takes no writes; what it holds can be read).
        listed = client.get("/jobs", headers=auth)
        assert listed.status_code in (200, 503), listed.text
        if listed.status_code == 503:
            assert listed.json()["store"] == "full"
        assert len(_messages(caplog, "store full")) == 1
        assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
        filler.unlink()
        answer = client.post("/jobs", json=JOB, headers=auth)
        assert answer.status_code == 201, answer.text
        assert len(_messages(caplog, "answers again")) == 1
        # Reaper passes after the space returned, before the worker's next heartbeat: the
        # heartbeats the store could not take are not held against it.
        time.sleep(HEARTBEAT_TIMEOUT_S / 2)
        state = client.get(f"/jobs/{job['id']}", headers=auth).json()
        assert state["state"] == "running", state
        assert client.post(beat, headers=join_auth).status_code == 200
        assert len(client.get("/jobs", headers=auth).json()["items"]) == 2
    with sqlite3.connect(database) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


def _sample(text: str, series: str) -> float:
    """The value of `series` (name and labels, as served) in the exposition `text`."""
    line = next(line for line in text.splitlines() if line.startswith(series + " "))
    return float(line.rsplit(" ", 1)[1])


def test_a_full_store_shows_on_leader_and_metrics(tiny_disk: Path) -> None:
    settings = Settings(
        data_dir=tiny_disk,
        database={"url": f"sqlite:///{tiny_disk / 'inasched.db'}"},
        switch={"target": "memory", "aggregators": 256},
        tick_s=0.05,
    )
    app = create_app(settings)
    with app.state.service.sessions() as s:
        auth = {"Authorization": f"Bearer {create_tenant_token(s, tenant='alice')}"}
    full, unreachable = 'kind="full"}', 'kind="unreachable"}'
    with LiveServer(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        leader = client.get("/leader")
        assert leader.status_code == 200, leader.text
        assert leader.json()["store"] == {"state": "reachable", "since": None, "detail": None}
        text = client.get("/metrics").text
        assert _sample(text, "inasched_store_fault_seconds{" + full) == 0
        assert _sample(text, "inasched_store_faults_total{" + full) == 0
        filler = tiny_disk / "filler"
        _fill(filler)
        started = datetime.now(UTC)
        refused = [client.post("/jobs", json=JOB, headers=auth) for _ in range(5)]
        assert [r.status_code for r in refused] == [503] * 5
        time.sleep(0.1)  # the open episode's age moves on (no figure is asserted)
        leader = client.get("/leader")
        assert leader.status_code == 200, leader.text  # a full store leaves the leader leading
        store = leader.json()["store"]
        assert store["state"] == "full" and store["detail"], store
        assert datetime.fromisoformat(store["since"]) >= started - timedelta(seconds=1)
        scraped = client.get("/metrics")
        assert scraped.status_code == 200, scraped.text
        assert _sample(scraped.text, "inasched_store_fault_seconds{" + full) > 0
        assert _sample(scraped.text, "inasched_store_fault_seconds{" + unreachable) == 0
        assert _sample(scraped.text, "inasched_store_faults_total{" + full) >= 5
        assert _sample(scraped.text, "inasched_store_faults_total{" + unreachable) == 0
        filler.unlink()
        assert client.post("/jobs", json=JOB, headers=auth).status_code == 201
        assert client.get("/leader").json()["store"]["state"] == "reachable"
        text = client.get("/metrics").text
        assert _sample(text, "inasched_store_fault_seconds{" + full) == 0
        assert _sample(text, "inasched_store_faults_total{" + full) >= 5


def test_metrics_answer_while_the_store_does_not(tmp_path: Path) -> None:
    """The store's own families lose their samples; the rest, and the fault gauge, stay."""
    database = tmp_path / "inasched.db"
    settings = Settings(
        data_dir=tmp_path,
        database={"url": f"sqlite:///{database}"},
        switch={"target": "memory", "aggregators": 256},
    )
    app = create_app(settings)
    service = app.state.service
    with LiveServer(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        assert 'inasched_jobs{state="queued"} 0' in client.get("/metrics").text
        # A directory where the file was: every new connection fails as an absent store's.
        database.rename(tmp_path / "moved.db")
        database.mkdir()
        service.sessions.kw["bind"].dispose()
        try:
            scraped = client.get("/metrics")
            leader = client.get("/leader").json()
        finally:
            database.rmdir()
            (tmp_path / "moved.db").rename(database)
        assert scraped.status_code == 200, scraped.text
        assert "# TYPE inasched_jobs gauge" in scraped.text
        assert "inasched_jobs{" not in scraped.text
        assert "inasched_switch_aggregators 256" in scraped.text
        assert _sample(scraped.text, 'inasched_store_faults_total{kind="unreachable"}') >= 1
        assert leader["store"]["state"] == "unreachable", leader


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (psycopg.errors.DiskFull("could not extend file: No space left on device"), "full"),
        (psycopg.errors.AdminShutdown("terminating connection"), "unreachable"),
        (psycopg.OperationalError("connection refused"), "unreachable"),
        (psycopg.errors.UniqueViolation("duplicate key"), None),
    ],
)
def test_postgres_errors_read_as_store_faults_and_others_stay_bugs(
    error: Exception, kind: str | None
) -> None:
    fault = store_fault(DBAPIError("SELECT 1", {}, error))
    assert (fault.kind if fault else None) == kind
