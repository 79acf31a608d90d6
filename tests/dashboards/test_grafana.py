"""dashboards/grafana/inasched.json: every series it plots is one /metrics serves, and every
family /metrics serves has a panel."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from p4ctl.backend import InMemorySwitch

from api.http.app import create_app
from api.settings import Settings
from tests.api.conftest import LiveServer

DASHBOARD = Path(__file__).resolve().parents[2] / "dashboards" / "grafana" / "inasched.json"
METRIC = re.compile(r"\binasched_[a-z0-9_]+")
TYPE_LINE = re.compile(r"^# TYPE (\w+) (counter|gauge|histogram|summary|untyped)$", re.M)


@pytest.fixture(scope="module")
def exposition(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The /metrics text of a live service with an embedded PS (so every family is there)."""
    data = tmp_path_factory.mktemp("grafana")
    settings = Settings(
        data_dir=data, switch={"target": "memory", "data": "127.0.0.1:1", "aggregators": 256}
    )
    app = create_app(settings, backend=InMemorySwitch(256, 64))
    with LiveServer(app) as url:
        yield httpx.get(f"{url}/metrics", timeout=30).text


def served_names(text: str) -> dict[str, set[str]]:
    """``{family: names a query may use}``: a histogram's series are its _bucket, _sum and
    _count; any other family's is its own name."""
    names: dict[str, set[str]] = {}
    for family, kind in TYPE_LINE.findall(text):
        suffixes = ("_bucket", "_sum", "_count") if kind in ("histogram", "summary") else ("",)
        names[family] = {family + s for s in suffixes}
    return names


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found += panel.get("panels", [])
    return found


def queried(dashboard: dict[str, Any]) -> set[str]:
    return {
        name
        for panel in panels(dashboard)
        for target in panel.get("targets", [])
        for name in METRIC.findall(target["expr"])
    }


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def test_every_series_the_dashboard_queries_is_served(
    dashboard: dict[str, Any], exposition: str
) -> None:
    served = set().union(*served_names(exposition).values())
    used = queried(dashboard)
    assert used, "the dashboard queries nothing"
    assert used <= served, f"not served by /metrics: {sorted(used - served)}"


def test_every_served_family_has_a_panel(dashboard: dict[str, Any], exposition: str) -> None:
    used = queried(dashboard)
    missing = [family for family, names in served_names(exposition).items() if not names & used]
    assert missing == [], f"no panel plots {missing}"


def test_panels_are_importable(dashboard: dict[str, Any]) -> None:
    ids = [panel["id"] for panel in panels(dashboard)]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "instance"} <= variables
    for panel in panels(dashboard):
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["w"] > 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["description"], panel["title"]
        for target in panel["targets"]:
            # Every series is filtered by the dashboard's service selector.
            for name in METRIC.findall(target["expr"]):
                assert f'{name}{{instance=~"$instance"}}' in target["expr"], (panel["title"], name)
