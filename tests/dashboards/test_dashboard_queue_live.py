"""Why jobs wait or fail, as the real service's scheduler says it, in a real browser: a
``static`` pool that one job's partition fills while it has no traffic (so the heatmap reads
"0 / 1,024" while another job waits), and a window too large for the pool."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.api.conftest import undecided, wait_for
from tests.dashboards.conftest import serve

pytestmark = pytest.mark.browser

PARTITION = "waiting for a partition of 256 slots (512 aggregators)"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """``(url, tenant token)`` of a running service with the static policy and 1,024
    aggregators on the in-memory switch."""
    from p4ctl.backend import InMemorySwitch

    from api.http.app import create_app
    from api.settings import Settings
    from api.store.crud import create_tenant_token

    settings = Settings(
        data_dir=tmp_path_factory.mktemp("service"),
        tick_s=0.2,
        switch={"target": "memory", "aggregators": 1024},
        policy={"policy": "static"},
    )
    app = create_app(
        settings, backend=InMemorySwitch(settings.switch.aggregators, settings.switch.lanes)
    )
    with app.state.service.sessions() as session:
        token = create_tenant_token(session, tenant="alice")
    with serve(app) as url:
        yield url, token


def submit(url: str, token: str, name: str, window: int) -> dict[str, Any]:
    body = {"name": name, "n_workers": 2, "iterations": 10, "gradient_bytes": 4096}
    response = httpx.post(
        f"{url}/jobs",
        json={**body, "window": window},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert response.status_code == 201, response.text
    # POST /jobs answers before the decision round about the job: return the job as that
    # round left it (admitted, queued with its reason, or failed).
    job: dict[str, Any] = response.json()
    headers = {"Authorization": f"Bearer {token}"}

    def look() -> bool:
        nonlocal job
        job = httpx.get(f"{url}/jobs/{job['id']}", headers=headers, timeout=30).json()
        return not undecided(job)

    wait_for(look, f"a decision round about job {job['id']}")
    return job


def sign_in(page: Any, url: str, token: str, route: str = "") -> None:
    page.goto(f"{url}/{route}")
    page.fill("#token-input", token)
    page.click("#token-form button")
    page.wait_for_selector("#stream-status.live")


def test_a_job_waiting_for_a_partition_says_so_while_memory_looks_free(
    page: Any, console: Any, service: tuple[str, str], artifacts: pathlib.Path
) -> None:
    url, token = service
    # 512 slots of two aggregators each: the whole pool, reserved though no worker sends.
    holder = submit(url, token, "holds-the-pool", window=512)
    waiting = submit(url, token, "waits", window=256)
    assert (holder["state"], waiting["state"]) == ("admitted", "queued")

    sign_in(page, url, token)
    why = f'#jobs-table tr[data-job-id="{waiting["id"]}"] .why'
    page.wait_for_selector(why)
    assert page.inner_text(why) == PARTITION
    page.wait_for_selector('#queue-summary li[data-kind="partition"]')
    assert PARTITION in page.inner_text("#queue-summary")
    page.wait_for_function("() => document.querySelector('#c-used').textContent === '0 / 1,024'")
    page.screenshot(path=str(artifacts / "live-queued-for-partition.png"))

    # Cancelling the holder frees the partition: the waiting job is admitted.
    holder_row = f'#jobs-table tr[data-job-id="{holder["id"]}"]'
    page.click(f"{holder_row} button.danger")
    page.click(f"{holder_row} button.danger.armed")
    page.wait_for_selector(f'#jobs-table tr[data-job-id="{waiting["id"]}"][data-state="admitted"]')
    assert page.inner_text(why) == "waiting for its workers to join"
    page.wait_for_selector("#queue-summary", state="hidden")
    page.screenshot(path=str(artifacts / "live-admitted-after-cancel.png"))
    httpx.post(
        f"{url}/jobs/{waiting['id']}/cancel",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert console.errors == []


def test_a_job_the_pool_can_never_hold_fails_with_the_schedulers_reason(
    page: Any, console: Any, service: tuple[str, str], artifacts: pathlib.Path
) -> None:
    url, token = service
    job = submit(url, token, "too-wide", window=1024)
    assert job["state"] == "failed"
    reason = str(job["reason"])
    assert reason.startswith("window 1024 needs a partition of 1024 slots")

    sign_in(page, url, token)
    why = f'#jobs-table tr[data-job-id="{job["id"]}"] .why'
    page.wait_for_selector(why)
    assert page.inner_text(why) == reason
    page.click(f'#jobs-table tr[data-job-id="{job["id"]}"] a')
    page.wait_for_selector("#view-job .callout-failed")
    assert page.inner_text("#view-job .callout-failed") == f"Failed: {reason}"
    page.screenshot(path=str(artifacts / "live-failed-detail.png"))
    assert console.errors == []
