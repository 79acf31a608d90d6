"""/docs and /redoc in a real browser with every request off the service refused: Swagger UI
and ReDoc still render the API, and "Authorize" offers the two bearer tokens.
Screenshots go to artifacts/dashboards/."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
from p4ctl.backend import InMemorySwitch

from api.http.app import create_app
from api.settings import Settings
from tests.dashboards.conftest import Console, serve

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def service_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("docs"), switch={"target": "memory", "aggregators": 256}
    )
    with serve(create_app(settings, backend=InMemorySwitch(256, 64))) as url:
        yield url


def offline(page: Any, base: str) -> list[str]:
    """Refuse every request that does not go to `base`; returns the list of refused URLs."""
    refused: list[str] = []

    def route(request_route: Any) -> None:
        url = request_route.request.url
        if url.startswith(base + "/"):
            request_route.continue_()
        else:
            refused.append(url)
            request_route.abort()

    page.route("**/*", route)
    return refused


def test_swagger_ui_renders_offline_and_authorize_offers_both_tokens(
    page: Any, console: Console, service_url: str, artifacts: pathlib.Path
) -> None:
    refused = offline(page, service_url)
    page.goto(f"{service_url}/docs")
    page.locator(".opblock").first.wait_for()
    assert page.locator(".opblock").count() >= 12
    # Each protected route carries a lock; /metrics and /healthz are open.
    assert page.locator(".opblock .authorization__btn").count() >= 12
    page.get_by_role("button", name="Authorize").first.click()
    dialog = page.locator(".dialog-ux")
    dialog.wait_for()
    text = dialog.inner_text()
    assert "tenantToken" in text and "joinToken" in text and "Bearer" in text
    page.screenshot(path=str(artifacts / "api-docs-swagger.png"))
    assert refused == []
    assert console.errors == []


def test_redoc_renders_offline(
    page: Any, console: Console, service_url: str, artifacts: pathlib.Path
) -> None:
    refused = offline(page, service_url)
    page.goto(f"{service_url}/redoc")
    page.locator("h2", has_text="submit a job").first.wait_for()
    # Under each operation: "Authorizations: tenantToken" (or joinToken for the worker routes).
    assert page.locator("text=Authorizations").count() >= 12
    assert page.get_by_text("joinToken").count() >= 1
    page.screenshot(path=str(artifacts / "api-docs-redoc.png"))
    assert refused == []
    assert console.errors == []
