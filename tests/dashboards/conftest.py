"""Fixtures for the dashboard's browser tests: Debian's chromium driven by Playwright, a page
that records console errors, and a place for screenshots (``artifacts/dashboards/``)."""

from __future__ import annotations

import contextlib
import pathlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

CHROMIUM = pathlib.Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LAPTOP = {"width": 1366, "height": 768}
ARTIFACTS = pathlib.Path(__file__).resolve().parents[2] / "artifacts" / "dashboards"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve(app: Any) -> Iterator[str]:
    """Runs `app` under uvicorn in a thread; yields its base URL."""
    import uvicorn

    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


# One browser per test file: Playwright's sync API leaves its event loop marked running in the
# main thread while it is open, and the test files that run after it in the same process
# (pytest-xdist deals out files in any order) call asyncio.run().
@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@dataclass
class Console:
    """What the page said: console messages of type error and uncaught exceptions."""

    errors: list[str] = field(default_factory=list)


@pytest.fixture
def console() -> Console:
    return Console()


@pytest.fixture
def page(chromium: Any, console: Console) -> Iterator[Any]:
    context = chromium.new_context(viewport=LAPTOP)
    page = context.new_page()
    page.set_default_timeout(10_000)

    def on_console(message: Any) -> None:
        if message.type == "error":
            console.errors.append(message.text)

    page.on("console", on_console)
    page.on("pageerror", lambda e: console.errors.append(f"uncaught: {e}"))
    yield page
    context.close()


@pytest.fixture(scope="session")
def artifacts() -> pathlib.Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
