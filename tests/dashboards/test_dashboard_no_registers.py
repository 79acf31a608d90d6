"""The live page on a switch that serves no register reads (PI, BMv2's ``simple_switch_grpc``,
as the soft switch answers with ``serve_registers=False``), in a real browser: it says that
occupancy cannot be shown and why, instead of drawing an empty pool that reads "all free"."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from tests.dashboards.conftest import serve
from tests.dashboards.test_dashboard_queue_live import sign_in, submit

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """``(url, tenant token)`` of a running service on a soft switch that refuses registers."""
    from p4ctl.softswitch import SoftSwitch

    from api.http.app import create_app
    from api.settings import Settings
    from api.store.crud import create_tenant_token

    with SoftSwitch(aggregators=1024, lanes=64, serve_registers=False) as switch:
        settings = Settings(
            data_dir=tmp_path_factory.mktemp("service"),
            tick_s=0.2,
            switch={
                "target": switch.p4runtime_address,
                "data": "{}:{}".format(*switch.data_address),
                "aggregators": 1024,
                "lanes": 64,
            },
            policy={"policy": "esa"},
        )
        app = create_app(settings)
        with app.state.service.sessions() as session:
            token = create_tenant_token(session, tenant="alice")
        with serve(app) as url:
            yield url, token


def test_the_page_says_occupancy_cannot_be_shown_on_a_switch_without_register_reads(
    page: Any, console: Any, service: tuple[str, str], artifacts: pathlib.Path
) -> None:
    url, token = service
    submit(url, token, "on-pi", window=64)
    sign_in(page, url, token)
    page.wait_for_selector("#switch-unavailable:not([hidden])")
    notice = page.inner_text("#switch-unavailable")
    assert notice.startswith("Occupancy cannot be shown: ")
    assert "Register reads are not supported yet" in notice
    assert page.inner_text("#c-used") == "? / 1,024"
    assert not page.is_visible("#heatmap")  # no grid of "free" cells
    page.screenshot(path=str(artifacts / "live-no-registers.png"), full_page=True)
