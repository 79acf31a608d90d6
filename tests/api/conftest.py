"""Fixtures of the service tests: a real database per test (SQLite always, PostgreSQL when
``INASCHED_TEST_POSTGRES_URL`` is set), an app on the in-memory switch, tenants with tokens."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import uvicorn
from fastapi import FastAPI
from p4ctl.backend import InMemorySwitch
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from api.http.app import create_app
from api.settings import Settings
from api.store.crud import create_tenant_token

PG_ENV = "INASCHED_TEST_POSTGRES_URL"


def _backends() -> list[object]:
    pg = pytest.param("postgres", marks=pytest.mark.postgres)
    return ["sqlite", pg] if os.environ.get(PG_ENV) else ["sqlite"]


def postgres_schema_url(base: str) -> Iterator[str]:
    """A URL on `base` whose search_path is a fresh schema, dropped afterwards."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    url = make_url(base)
    plain = url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield url.update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(
            hide_password=False
        )
    finally:
        with psycopg.connect(plain, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture(params=_backends())
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'inasched.db'}"
    else:
        yield from postgres_schema_url(os.environ[PG_ENV])


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    return Settings(
        data_dir=tmp_path,
        tick_s=0.05,
        heartbeat_timeout_s=30.0,
        database={"url": database_url},
        switch={"target": "memory", "aggregators": 256},
        policy={"policy": "esa"},
    )


def end_lock_session(database_url: str) -> None:
    """End this process's store lock session on PostgreSQL at `database_url`, as a restart of
    the server does (the pools reconnect; the lock does not come back by itself)."""
    base = make_url(database_url).set(drivername="postgresql", query={})
    with psycopg.connect(base.render_as_string(hide_password=False), autocommit=True) as c:
        ended = c.execute(
            "SELECT pg_terminate_backend(l.pid) FROM pg_locks l JOIN pg_stat_activity a "
            "ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
            "AND a.application_name LIKE %s",
            (f"inasched pid {os.getpid()} %",),
        ).fetchall()
    assert ended == [(True,)]


def wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    """Poll `predicate` until true; fail naming `what` after `timeout_s` (never a timing
    assertion: the limit only keeps a broken run from hanging)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def free_port(kind: socket.SocketKind) -> int:
    """A loopback port of `kind` (``SOCK_STREAM``, ``SOCK_DGRAM``) that is free right now."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listening(port: int) -> bool:
    """Whether something accepts TCP connections on loopback `port`."""
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def stop_processes(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each of `procs` still running, last started first; kill one that has not
    stopped 30 s later."""
    for proc in reversed(procs):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def undecided(job: dict[str, object]) -> bool:
    """True while no decision round has seen `job` (a ``JobPublic`` body) and committed: POST
    /jobs answers before the round that admits the job or says why it waits."""
    reason = job.get("queue_reason")
    if job["state"] != "queued" or not isinstance(reason, dict):
        return False
    # The round records why a job waits as it decides and stores it when it commits.
    return reason["kind"] == "scheduling" or job.get("reason") != reason["message"]


def decided(
    client: httpx.Client, job: dict[str, object], headers: dict[str, str]
) -> dict[str, object]:
    """`job` (POST /jobs's answer) as the first decision round about it left it, with the
    answer's join token."""
    seen: dict[str, object] = job

    def look() -> bool:
        nonlocal seen
        seen = client.get(f"/jobs/{job['id']}", headers=headers).json()
        return not undecided(seen)

    wait_for(look, f"a decision round about job {job['id']}")
    return {**seen, "join_token": job.get("join_token")}


class LiveServer:
    """`app` served by uvicorn on an ephemeral loopback port in a thread (its lifespan runs)."""

    def __init__(self, app: FastAPI, port: int = 0) -> None:
        config = uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the server did not start")
            self.thread.join(0.01)
        host, port = self.server.servers[0].sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@dataclass
class Api:
    """A running app on the in-memory switch, tokens of two tenants and an admin token."""

    client: httpx.Client
    switch: InMemorySwitch
    token: str
    other_token: str
    admin_token: str
    sessions: sessionmaker[Session]

    def auth(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.token}"}

    def submit(self, *, answer: bool = False, **fields: object) -> dict[str, object]:
        """The job once a decision round has seen it (with its join token); with `answer`,
        POST /jobs's own answer."""
        body = {"name": "job", "n_workers": 2, "iterations": 3, "gradient_bytes": 4096}
        body.update(fields)
        body = {k: v for k, v in body.items() if v is not None}
        response = self.client.post("/jobs", json=body, headers=self.auth())
        assert response.status_code == 201, response.text
        result: dict[str, object] = response.json()
        return result if answer else decided(self.client, result, self.auth())


def updated(settings: Settings, **changes: Any) -> Settings:
    """`settings` with `changes`: a top-level value, or a dict of fields for a section
    (``tenant={"max_jobs": 1}``); what was not given before stays not given."""
    given = settings.model_dump(exclude_unset=True)
    for name, value in changes.items():
        given[name] = {**given.get(name, {}), **value} if isinstance(value, dict) else value
    return Settings(**given)


def make_api(settings: Settings) -> Iterator[Api]:
    switch = InMemorySwitch(settings.switch.aggregators, settings.switch.lanes)
    app = create_app(settings, backend=switch)
    sessions = app.state.service.sessions
    with sessions() as s:
        token = create_tenant_token(s, tenant="alice")
        other = create_tenant_token(s, tenant="bob")
        admin = create_tenant_token(s, tenant="root", admin=True)
    with LiveServer(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        yield Api(
            client=client,
            switch=switch,
            token=token,
            other_token=other,
            admin_token=admin,
            sessions=sessions,
        )


@pytest.fixture
def api(settings: Settings) -> Iterator[Api]:
    yield from make_api(settings)
