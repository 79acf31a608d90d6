"""A job held by its tenant's quota, in a real browser: the live page's queue summary gives
the service's reason and what a tenant quota means."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.dashboards.conftest import serve
from tests.dashboards.test_dashboard_queue_live import sign_in, submit

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """``(url, tenant token)`` of a service that admits one job per tenant at a time."""
    from p4ctl.backend import InMemorySwitch

    from api.http.app import create_app
    from api.settings import Settings
    from api.store.crud import create_tenant_token

    settings = Settings(
        data_dir=tmp_path_factory.mktemp("service"),
        tick_s=0.2,
        switch={"target": "memory", "aggregators": 1024},
        policy={"policy": "esa"},
        tenant={"max_jobs": 1},
    )
    app = create_app(
        settings, backend=InMemorySwitch(settings.switch.aggregators, settings.switch.lanes)
    )
    with app.state.service.sessions() as session:
        token = create_tenant_token(session, tenant="alice")
    with serve(app) as url:
        yield url, token


def test_a_job_held_by_its_tenant_quota_says_so(
    page: Any, console: Any, service: tuple[str, str]
) -> None:
    url, token = service
    first = submit(url, token, "first", window=64)
    second = submit(url, token, "second", window=64)
    assert (first["state"], second["state"]) == ("admitted", "queued")
    sign_in(page, url, token)
    item = '#queue-summary li[data-kind="tenant_quota"]'
    page.wait_for_selector(item)
    assert "Your tenant's limits" in page.inner_text(item)
    why = page.inner_text(f'#jobs-table tr[data-job-id="{second["id"]}"] .why')
    assert why == second["queue_reason"]["message"]
