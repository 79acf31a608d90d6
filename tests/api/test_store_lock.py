"""One running service per job store: a second one is refused, naming the first, before it
touches the store; a port in use says which flag picks another.

The store is real (SQLite, and PostgreSQL when ``INASCHED_TEST_POSTGRES_URL`` is set); the
second ``inasched up`` is a real process.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from p4ctl.backend import InMemorySwitch

from api.http.app import create_app
from api.settings import Settings
from api.store.lock import StoreInUse
from tests.api.conftest import LiveServer

# A refused `inasched up` exits at once; the limit only ends a run that did not refuse.
UP_TIMEOUT_S = 60


def _up(args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INASCHED_")}
    command = [sys.executable, "-m", "cli", "up", "--switch", "memory", *args]
    try:
        return subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=UP_TIMEOUT_S
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"`inasched up` was not refused: {exc.stdout!r}") from exc


def test_a_second_service_on_the_same_store_is_refused_naming_the_first(
    settings: Settings,
) -> None:
    first = create_app(
        settings, backend=InMemorySwitch(settings.switch.aggregators, settings.switch.lanes)
    )
    with LiveServer(first) as url:
        with pytest.raises(StoreInUse) as refused:
            create_app(
                settings, backend=InMemorySwitch(settings.switch.aggregators, settings.switch.lanes)
            )
        message = str(refused.value)
        assert f"inasched pid {os.getpid()} on {socket.gethostname()}" in message
        assert "--data-dir" in message and "INASCHED_DATABASE_URL" in message
        assert httpx.get(f"{url}/healthz", timeout=30).status_code == 200
    # Stopped, the first service leaves the store to the next one.
    again = create_app(
        settings, backend=InMemorySwitch(settings.switch.aggregators, settings.switch.lanes)
    )
    with LiveServer(again) as url:
        assert httpx.get(f"{url}/healthz", timeout=30).status_code == 200


def test_a_second_up_on_the_same_data_dir_exits_naming_the_running_one(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path, tick_s=0.05, switch={"target": "memory", "aggregators": 64}
    )
    first = create_app(settings, backend=InMemorySwitch(64, 64))
    with LiveServer(first):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        second = _up(["--data-dir", str(tmp_path), "--port", str(port)])
    assert second.returncode == 3, second.stderr
    assert f"in use by inasched pid {os.getpid()}" in second.stderr
    assert "inasched is up" not in second.stdout


def test_up_on_a_port_in_use_names_the_flag_that_picks_another(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        answer = _up(["--data-dir", str(tmp_path), "--port", str(port)])
    assert answer.returncode == 3, answer.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in answer.stderr
    assert "--port (INASCHED_HTTP_PORT) picks another port" in answer.stderr
