"""What a person opening the dashboard for the first time needs to read it without the README:
what a drop is and which drops matter, why the heatmap is empty without a token, a queue of
9,744 jobs counted per reason, a throughput axis that reads at 0 B/s, how a benchmark run gets
onto the Benchmarks page, and a JCT CDF on a log axis whose curves stay apart when they coincide.

Against the fake service (`fixture_service.py`), whose switch drops late packets of ended jobs
(``unknown_job``, growing) and a few malformed ones (``bad_length``); the real service's
grouping of the queue is checked in tests/api/test_jobviews.py.
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.dashboards.conftest import serve
from tests.dashboards.fixture_service import (
    BAD_LENGTH_DROPS,
    EMPTY_TOKEN,
    TOKEN,
    FakeJob,
    FakeService,
    create_fixture_app,
)
from tests.dashboards.test_dashboard_explains import sign_in

pytestmark = pytest.mark.browser


def _served(make_fake: Callable[[], FakeService]) -> Iterator[str]:
    with serve(create_fixture_app(make_fake)) as base:
        yield base


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    yield from _served(FakeService)


def test_drops_say_what_they_are_and_late_packets_of_ended_jobs_are_not_alarming(
    page: Any, console: Any, url: str, artifacts: pathlib.Path
) -> None:
    sign_in(page, url)
    detail = page.locator("#drops-detail")
    page.wait_for_function(
        "() => Number(document.querySelector('#drops-detail').dataset.expected) > 0"
    )
    # The counter counts only what a misconfigured sender caused, and shows it as alarming.
    assert page.inner_text("#c-drops") == str(BAD_LENGTH_DROPS)
    assert "alarm" in (page.get_attribute("#c-drops", "class") or "")
    summary = detail.locator("summary").inner_text()
    assert summary.startswith(f"Drops: {BAD_LENGTH_DROPS} drops need a look · ")
    assert "late packets of ended jobs" in summary and "(harmless)" in summary

    detail.locator("summary").click()
    assert "A drop is a packet the switch discarded" in detail.inner_text()
    rows = detail.locator(".drops-table tbody tr")
    reasons = rows.evaluate_all("rs => rs.map((r) => [r.dataset.reason, r.dataset.expected])")
    # Alarming reasons first; a reason with no packet is left out.
    assert reasons == [["bad_length", "false"], ["unknown_job", "true"]]
    assert "finished or was cancelled" in rows.nth(1).inner_text()
    assert detail.locator('a[href="/metrics"]').count() == 1
    page.locator(".switch-panel").screenshot(path=str(artifacts / "first-look-drops.png"))
    assert console.errors == []


def test_without_a_token_the_heatmap_says_it_needs_one(
    page: Any, console: Any, url: str, artifacts: pathlib.Path
) -> None:
    page.goto(url)
    empty = page.locator("#heatmap-empty")
    empty.wait_for()
    assert "tenant token" in empty.inner_text()
    assert page.locator("#heatmap").is_hidden()
    assert page.locator("#drops-detail").is_hidden()

    page.fill("#token-input", TOKEN)
    page.click("#token-form button")
    page.locator("#heatmap").wait_for()
    assert empty.is_hidden()

    limits = page.locator("#tenant-limits")
    limits.wait_for()
    assert "priority classes 0–7" in limits.inner_text()
    # Forgetting the token forgets the tenant's view of the switch too.
    page.click("#token-forget")
    empty.wait_for()
    assert page.inner_text("#c-used") == "–"
    assert page.locator("#queue-summary").is_hidden()
    assert limits.is_hidden()
    assert page.locator('#legend-jobs li[data-job-id="1"]').count() == 0
    page.screenshot(path=str(artifacts / "first-look-no-token.png"))
    assert console.errors == []


def _stalled_job() -> FakeService:
    job = FakeJob(
        9, "stalled", "esa", "running", 1000, 40, started_at=time.time() - 60, stalled=True
    )
    return FakeService([job])


@pytest.fixture(scope="module")
def stalled_url() -> Iterator[str]:
    yield from _served(_stalled_job)


def test_a_running_job_at_zero_bytes_per_second_has_an_axis_that_reads_at_zero(
    page: Any, console: Any, stalled_url: str, artifacts: pathlib.Path
) -> None:
    sign_in(page, stalled_url, "#/jobs/9")
    chart = page.locator('#view-job svg[aria-label="throughput"]')
    chart.wait_for(timeout=15_000)
    labels = chart.locator(".axes text").evaluate_all("ts => ts.map((t) => t.textContent)")
    y_ticks = [t for t in labels if t.endswith("B")]
    assert y_ticks == ["0B", "500B", "1.0KB"], labels
    assert "0 B/s now" in page.inner_text("#view-job .throughput-note")
    # Priority levels are whole numbers: no "0.5" on their axis.
    levels = page.locator(
        '#view-job svg[aria-label="priority level over time"] text[text-anchor="end"]'
    )
    assert levels.evaluate_all("ts => ts.map((t) => t.textContent)") == ["0", "1"]
    page.screenshot(path=str(artifacts / "first-look-zero-throughput.png"))
    assert console.errors == []


def test_an_empty_benchmarks_page_says_a_run_is_stored_only_with_service_and_token(
    page: Any, console: Any, url: str, artifacts: pathlib.Path
) -> None:
    sign_in(page, url, "#/bench", token=EMPTY_TOKEN)
    empty = page.locator("#view-bench .bench-empty")
    empty.wait_for()
    text = empty.inner_text()
    assert "only when it is given this service and your tenant token" in text
    assert "--out folder only" in text
    assert f"--service {url} --token YOUR_TENANT_TOKEN" in text
    page.screenshot(path=str(artifacts / "first-look-bench-empty.png"))
    assert console.errors == []


def test_the_jct_cdf_has_a_log_axis_and_a_line_style_per_policy(
    page: Any, console: Any, url: str, artifacts: pathlib.Path
) -> None:
    sign_in(page, url, "#/bench")
    chart = page.locator('#view-bench svg[aria-label="JCT CDF per policy"]')
    chart.wait_for()
    assert chart.get_attribute("data-x-scale") == "log"
    # The fixture's JCTs lie between 40 s and 130 s: whole decades 10 s to 1k s, and as the
    # axis spans only two decades, 2 and 5 times each power of ten.
    x_ticks = chart.locator('.axes text[text-anchor="middle"]:not(.label)')
    labels = x_ticks.evaluate_all("ts => ts.map((t) => t.textContent)")
    assert labels == ["10", "20", "50", "100", "200", "500", "1k"]
    dashes = chart.locator("path.series").evaluate_all(
        "ps => ps.map((p) => [p.dataset.series, p.getAttribute('stroke-dasharray')])"
    )
    assert [name for name, _ in dashes] == ["static", "atp", "esa"]
    assert len({dash for _, dash in dashes}) == 3, dashes
    page.locator(".run-detail figure").screenshot(path=str(artifacts / "first-look-jct-cdf.png"))
    assert console.errors == []


QUOTA = "tenant alice has 4 jobs admitted, as many as its quota allows"
SWITCH_IDS = "all 1,024 switch job ids in use"
HELD_BY_QUOTA, WAITING_FOR_AN_ID, FINISHED = 500, 9_244, 256


def crowded_queue() -> FakeService:
    def queued(job_id: int, kind: str, message: str) -> FakeJob:
        why = {"kind": kind, "message": message, "slots": None}
        return FakeJob(job_id, f"q-{job_id}", "esa", "queued", 10, queue_reason=why)

    jobs = [FakeJob(i, f"done-{i}", "esa", "finished", 10, 10) for i in range(1, FINISHED + 1)]
    first = FINISHED + 1
    jobs += [queued(first + i, "tenant_quota", QUOTA) for i in range(HELD_BY_QUOTA)]
    first += HELD_BY_QUOTA
    jobs += [queued(first + i, "switch_job_ids", SWITCH_IDS) for i in range(WAITING_FOR_AN_ID)]
    return FakeService(jobs)


@pytest.fixture(scope="module")
def crowded_url() -> Iterator[str]:
    yield from _served(crowded_queue)


def test_ten_thousand_queued_jobs_read_as_a_count_per_reason(
    page: Any, console: Any, crowded_url: str, artifacts: pathlib.Path
) -> None:
    sign_in(page, crowded_url)
    summary = page.locator("#queue-summary")
    summary.wait_for()
    assert summary.inner_text().startswith("9,744 of your jobs wait:")
    items = summary.locator("li")
    assert items.count() == 2
    # The most common reason first, each with how many jobs wait for it.
    assert items.nth(0).get_attribute("data-kind") == "switch_job_ids"
    assert items.nth(0).inner_text().startswith(f"9,244 jobs: {SWITCH_IDS}")
    assert items.nth(1).get_attribute("data-kind") == "tenant_quota"
    assert items.nth(1).inner_text().startswith(f"500 jobs: {QUOTA}")
    assert "more" not in summary.inner_text()
    page.screenshot(path=str(artifacts / "queue-at-scale.png"))
    assert console.errors == []
