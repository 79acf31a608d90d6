"""The dashboard against a fake service that serves the contract's JSON with moving data.

The real-service tests (test_dashboard_live.py) cover the end-to-end path; these add what a
short demo run does not produce: every shade of the heatmap, preemption and drop counters,
another tenant's memory, the state filter, the job-detail charts and a stored benchmark run.
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from dashboards import static_dir
from tests.dashboards.conftest import serve
from tests.dashboards.fixture_service import TOKEN, FakeService, create_fixture_app
from tests.dashboards.helpers import FREE_RGB, cell_colours, legend_rgb, row_progress, same_hue


def test_static_dir_holds_the_page_and_every_module_it_imports() -> None:
    root = static_dir()
    assert (root / "index.html").is_file()
    modules = sorted((root / "js").glob("*.js"))
    assert modules
    for module in modules:
        for target in re.findall(r'from "\./([\w.]+)"', module.read_text()):
            assert (root / "js" / target).is_file(), f"{module.name} imports missing {target}"


def test_dashboard_loads_nothing_from_the_internet() -> None:
    for path in static_dir().rglob("*"):
        if path.suffix in {".html", ".js", ".css"}:
            urls = re.findall(r"https?://[^\s\"'`)]+", path.read_text())
            assert [u for u in urls if not u.startswith("http://www.w3.org/")] == [], path


@pytest.fixture(scope="module")
def fake_url() -> Iterator[str]:
    with serve(create_fixture_app()) as url:
        yield url


def sign_in(page: Any, url: str, route: str = "") -> None:
    page.goto(f"{url}/{route}")
    page.fill("#token-input", TOKEN)
    page.click("#token-form button")
    page.wait_for_selector("#stream-status.live")


@pytest.mark.browser
def test_without_a_token_the_page_asks_for_one_and_sends_nothing(
    page: Any, console: Any, fake_url: str
) -> None:
    requested: list[str] = []
    page.on("request", lambda r: requested.append(r.url))
    page.goto(fake_url)
    page.wait_for_selector("#jobs-empty:not([hidden])")
    assert "tenant token" in page.inner_text("#jobs-empty")
    api_calls = [u for u in requested if re.match(r"/(jobs|switch|events|bench)", urlsplit(u).path)]
    assert api_calls == []
    assert console.errors == []


@pytest.mark.browser
def test_heatmap_colours_each_jobs_aggregators_and_counts_move(
    page: Any, console: Any, fake_url: str, artifacts: pathlib.Path
) -> None:
    sign_in(page, fake_url)
    page.wait_for_selector('#legend-jobs li[data-job-id="7"]')
    # Job 1 holds 0..299 (partial, complete, flushed thirds), job 2 300..499, another
    # tenant's job 7 700..799; the rest is free.
    for job_id, indices in ((1, [5, 150, 250]), (2, [305, 450]), (7, [710])):
        expected = legend_rgb(page, job_id)
        for rgb in cell_colours(page, indices):
            assert same_hue(rgb, expected), (job_id, rgb, expected)
    shades = cell_colours(page, [5, 150, 250])
    assert len(set(shades)) == 3, "partial, complete and flushed look the same"
    assert cell_colours(page, [600, 1000]) == [FREE_RGB, FREE_RGB]
    assert page.inner_text("#c-used") == "600 / 1,024"
    first = int(page.get_attribute("#c-preemptions", "data-value"))
    page.wait_for_function(
        f"Number(document.querySelector('#c-preemptions').dataset.value) > {first}"
    )
    assert "other-tenant" not in page.inner_text("#jobs-table")
    page.screenshot(path=str(artifacts / "fixture-live.png"))
    assert console.errors == []


@pytest.mark.browser
def test_counter_rates_fall_to_zero_when_the_switch_stands_still(page: Any, console: Any) -> None:
    # The stream sends the switch view only when it changed: a view that stops coming means
    # nothing was counted, not that the last rate goes on.
    with serve(create_fixture_app(lambda: FakeService(moving_ticks=40))) as url:
        sign_in(page, url)
        moving = "document.querySelector('#c-preemptions').title"
        page.wait_for_function(f"/^[1-9][0-9.]* per second$/.test({moving})")
        page.wait_for_function(f"{moving} === '0.0 per second'", timeout=15_000)
        assert "; 0.0 per second" in page.get_attribute("#c-drops", "title")
    assert console.errors == []


@pytest.mark.browser
def test_rows_follow_the_stream_and_cancel_frees_the_memory(
    page: Any, console: Any, fake_url: str, artifacts: pathlib.Path
) -> None:
    sign_in(page, fake_url)
    page.wait_for_selector('#jobs-table tr[data-job-id="2"]')
    before = row_progress(page, 2)
    page.wait_for_function(
        "n => Number(document.querySelector('#jobs-table tr[data-job-id=\"2\"] .progress-text')"
        ".textContent.split('/')[0]) > n",
        arg=before,
    )
    assert cell_colours(page, [350]) != [FREE_RGB]
    row = page.locator('#jobs-table tr[data-job-id="2"]')
    row.locator("button.danger").click()
    row.locator("button.danger.armed").click()
    page.wait_for_selector('#jobs-table tr[data-job-id="2"][data-state="cancelled"]')
    assert row.locator("button").count() == 0
    page.wait_for_function("() => document.querySelector('#c-used').textContent.startsWith('400 ')")
    assert cell_colours(page, [305, 350, 450]) == [FREE_RGB] * 3
    page.select_option("#state-filter", "cancelled")
    page.wait_for_function("() => document.querySelectorAll('#jobs-table tbody tr').length === 1")
    assert page.locator("#jobs-table tbody tr").get_attribute("data-job-id") == "2"
    page.screenshot(path=str(artifacts / "fixture-cancelled.png"))
    assert console.errors == []


@pytest.mark.browser
def test_job_detail_shows_priority_throughput_preemptions_and_workers(
    page: Any, console: Any, fake_url: str, artifacts: pathlib.Path
) -> None:
    sign_in(page, fake_url)
    page.click('#jobs-table tr[data-job-id="1"] a')
    page.wait_for_selector("#view-job .workers tbody tr")
    text = page.inner_text("#view-job")
    for label in ("priority level", "throughput", "preemptions caused", "preemptions suffered"):
        assert label in text
    assert page.locator("#view-job .workers tbody tr").count() == 4
    assert page.locator('#view-job svg path[data-series="priority"]').count() == 1
    page.wait_for_selector('#view-job svg path[data-series="bytes/s"]', timeout=8000)
    page.screenshot(path=str(artifacts / "fixture-job-detail.png"))
    assert console.errors == []


@pytest.mark.browser
def test_benchmarks_compare_policies(
    page: Any, console: Any, fake_url: str, artifacts: pathlib.Path
) -> None:
    sign_in(page, fake_url, "#/bench")
    page.wait_for_selector('.stats-table tr[data-policy="esa"]')
    assert [
        page.locator(".stats-table tbody tr").nth(i).get_attribute("data-policy") for i in range(3)
    ] == ["static", "atp", "esa"]
    assert page.locator("svg.chart path.series").count() == 3
    # Ratios as bench.jct.results defines them: baseline average JCT / esa average JCT.
    assert page.inner_text('[data-ratio="esa/atp"] .num') == "1.36×"
    assert page.inner_text('[data-ratio="esa/static"] .num') == "1.82×"
    page.screenshot(path=str(artifacts / "fixture-bench.png"))
    assert console.errors == []
