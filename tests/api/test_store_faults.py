"""A full or absent store gets a clear answer: 503, Retry-After, a body that says what is wrong,
and one log line per episode, on every route."""

from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from api.http.app import create_app
from api.settings import Settings
from api.store.crud import create_tenant_token
from tests.api.conftest import LiveServer

JOB = {"name": "job", "n_workers": 1, "iterations": 3, "gradient_bytes": 4096}


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
        database_url=f"sqlite:///{database}",
        switch="memory",
        aggregators=256,
        tick_s=0.05,
    )
    app = create_app(settings)
    with app.state.service.sessions() as s:
        auth = {"Authorization": f"Bearer {create_tenant_token(s, tenant='alice')}"}
    with LiveServer(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        assert client.post("/jobs", json=JOB, headers=auth).status_code == 201
        filler = tiny_disk / "filler"
        _fill(filler)
        caplog.clear()
        refused = [client.post("/jobs", json=JOB, headers=auth) for _ in range(20)]
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
        assert len(client.get("/jobs", headers=auth).json()["items"]) == 2
    with sqlite3.connect(database) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
