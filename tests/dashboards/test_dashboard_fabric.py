"""The live page on a fabric of soft switch processes, in a real browser: one heatmap per
switch under the fabric's, each named with its data address, and a lost switch said so."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from tests.dashboards.conftest import serve
from tests.dashboards.test_dashboard_queue_live import sign_in

pytestmark = pytest.mark.browser
LOOPBACK = pathlib.Path(__file__).resolve().parents[2] / "scheduler/data/topology-loopback.json"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Any]]:
    """``(url, tenant token, the service's fabric)`` of a service on the loopback fabric."""
    from api.http.app import create_app
    from api.settings import Settings
    from api.store.crud import create_tenant_token

    settings = Settings(
        data_dir=tmp_path_factory.mktemp("service"),
        tick_s=0.2,
        switch={"target": "embedded", "topology": LOOPBACK},
        policy={"policy": "atp"},
    )
    app = create_app(settings)
    with app.state.service.sessions() as session:
        token = create_tenant_token(session, tenant="alice")
    with serve(app) as url:
        yield url, token, app.state.service.plane.fabric


def test_each_switch_of_the_fabric_has_its_heatmap(
    page: Any, console: Any, service: tuple[str, str, Any], artifacts: pathlib.Path
) -> None:
    url, token, fabric = service
    sign_in(page, url, token)
    page.wait_for_selector("#fabric-heatmaps canvas[data-switch='tor1']")
    names = page.eval_on_selector_all(
        "#fabric-heatmaps canvas", "nodes => nodes.map(n => n.dataset.switch)"
    )
    assert names == ["spine", "tor0", "tor1"]
    heads = page.inner_text("#fabric-heatmaps")
    for name, (_, data) in fabric.switches.items():
        assert f"{name} {data.host}:{data.port} · 0 / 4,096 aggregators in use" in heads
    page.screenshot(path=str(artifacts / "live-fabric.png"), full_page=True)
    fabric.processes["tor1"].kill()
    page.wait_for_selector("#fabric-heatmaps .fabric-switch.lost")
    assert "tor1" in page.inner_text("#fabric-heatmaps .fabric-switch.lost")
    assert page.locator("#fabric-heatmaps .fabric-switch.lost").count() == 1
    assert console.errors == []
