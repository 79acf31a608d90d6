"""The dashboard explains itself: why a job failed or waits, pages past
200 jobs with the total, clocks and charts that fit the job's state, a heatmap key for both
the job hue and the state shade, and layouts that hold with long names and big numbers.

Against the fake service with the jobs of `fixture_explain.py`; the queue reasons of the real
scheduler are checked in test_dashboard_queue_live.py and tests/api/test_jobviews.py.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from tests.dashboards.conftest import serve
from tests.dashboards.fixture_explain import (
    ADMITTED,
    ALL_JOBS,
    FAILED,
    FAILED_REASON,
    FINISHED,
    LONG_WORKLOAD,
    PARTITION,
    QUEUED_FOR_ID,
    QUEUED_FOR_PARTITION,
    RUNNING,
    SWITCH_IDS,
    explaining_jobs,
)
from tests.dashboards.fixture_service import EMPTY_TOKEN, TOKEN, create_fixture_app
from tests.dashboards.helpers import cell_colours

pytestmark = pytest.mark.browser

# Lines a text element wraps onto, and whether it spills out of its box.
_TEXT_FIT_JS = """(sel) => {
  const e = document.querySelector(sel);
  const range = document.createRange();
  range.selectNodeContents(e);
  const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
  const box = e.parentElement;
  const spills = e.scrollWidth > e.clientWidth || box.scrollWidth > box.clientWidth;
  return {lines: tops.size, spills};
}"""


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with serve(create_fixture_app(explaining_jobs)) as base:
        yield base


def sign_in(page: Any, url: str, route: str = "", token: str = TOKEN) -> None:
    page.goto(f"{url}/{route}")
    page.fill("#token-input", token)
    page.click("#token-form button")
    page.wait_for_selector("#stream-status.live")


def row(job_id: int) -> str:
    return f'#jobs-table tr[data-job-id="{job_id}"]'


def background(page: Any, selector: str) -> tuple[int, int, int]:
    css = page.locator(selector).evaluate("e => getComputedStyle(e).backgroundColor")
    r, g, b = (int(v) for v in css.removeprefix("rgb(").removesuffix(")").split(","))
    return r, g, b


def test_a_failed_job_says_why_in_the_list_and_on_its_page(
    page: Any, console: Any, url: str, artifacts: pathlib.Path
) -> None:
    sign_in(page, url)
    why = page.locator(f"{row(FAILED)} .why")
    why.wait_for()
    # Shown, not only a tooltip: the cell may cut a long reason, whose start is visible.
    assert why.is_visible()
    assert why.inner_text() == FAILED_REASON
    assert why.get_attribute("title") == FAILED_REASON
    assert page.locator(f"{row(RUNNING)} .why").is_hidden()
    page.screenshot(path=str(artifacts / "explain-failed-row.png"))

    page.click(f"{row(FAILED)} a")
    callout = page.locator("#view-job .callout-failed")
    callout.wait_for()
    assert callout.inner_text() == f"Failed: {FAILED_REASON}"
    page.screenshot(path=str(artifacts / "explain-failed-detail.png"))
    assert console.errors == []


def test_queued_jobs_say_why_they_wait_beside_the_memory_that_looks_free(
    page: Any, console: Any, url: str, artifacts: pathlib.Path
) -> None:
    sign_in(page, url)
    page.wait_for_selector(f"{row(QUEUED_FOR_ID)} .why")
    assert page.inner_text(f"{row(QUEUED_FOR_ID)} .why") == SWITCH_IDS
    assert page.inner_text(f"{row(QUEUED_FOR_PARTITION)} .why") == PARTITION
    summary = page.locator("#queue-summary")
    summary.wait_for()
    assert summary.inner_text().startswith("2 of your jobs wait:")
    kinds = summary.locator("li").evaluate_all("items => items.map((li) => li.dataset.kind)")
    assert sorted(kinds) == ["partition", "switch_job_ids"]
    assert SWITCH_IDS in summary.inner_text() and PARTITION in summary.inner_text()
    page.screenshot(path=str(artifacts / "explain-queued.png"))

    page.click(f"{row(QUEUED_FOR_PARTITION)} a")
    callout = page.locator("#view-job .callout-queued")
    callout.wait_for()
    assert callout.inner_text() == f"Queued: {PARTITION}"
    assert "the job is queued" in page.inner_text("#view-job .throughput-note")
    page.screenshot(path=str(artifacts / "explain-queued-detail.png"))
    assert console.errors == []


def test_jobs_come_in_pages_with_the_total(
    page: Any, console: Any, url: str, artifacts: pathlib.Path
) -> None:
    sign_in(page, url)
    page.wait_for_selector("#jobs-pager:not([hidden])")
    assert page.inner_text("#jobs-total") == f"{ALL_JOBS} jobs"

    def shown() -> list[int]:
        ids = page.locator("#jobs-table tbody tr").evaluate_all(
            "rows => rows.map((r) => Number(r.dataset.jobId))"
        )
        return [int(i) for i in ids]

    pages = []
    for first, last in ((1, 100), (101, 200), (201, 256)):
        expected = f"{first}–{last} of {ALL_JOBS}"
        page.wait_for_function(
            "t => document.querySelector('#jobs-range').textContent === t", arg=expected
        )
        pages.append(shown())
        assert len(pages[-1]) == last - first + 1
        if last < ALL_JOBS:
            assert page.is_disabled("#jobs-prev") == (first == 1)
            page.click("#jobs-next")
    assert page.is_disabled("#jobs-next")
    page.screenshot(path=str(artifacts / "explain-paging-last.png"))
    # Newest first, every job once.
    assert [i for p in pages for i in p] == list(range(ALL_JOBS, 0, -1))

    page.click("#jobs-prev")
    page.wait_for_function(
        "t => document.querySelector('#jobs-range').textContent === t", arg=f"101–200 of {ALL_JOBS}"
    )
    assert shown() == pages[1]
    # A filter starts again from its first page and counts only its jobs.
    page.select_option("#state-filter", "queued")
    page.wait_for_function(
        "() => document.querySelector('#jobs-total').textContent === '2 queued jobs'"
    )
    assert shown() == [QUEUED_FOR_PARTITION, QUEUED_FOR_ID]
    assert page.is_hidden("#jobs-pager")
    assert console.errors == []


def test_clocks_and_charts_fit_the_jobs_state(
    page: Any, console: Any, url: str, artifacts: pathlib.Path
) -> None:
    sign_in(page, url)
    admitted = f"{row(ADMITTED)} td.clock"
    queued = f"{row(QUEUED_FOR_ID)} td.clock"
    page.wait_for_selector(admitted)
    assert page.inner_text(admitted) == "not started"
    assert page.inner_text(f"{row(ADMITTED)} .why") == "waiting for its workers to join"
    # The queued job's wait is counted; the admitted job's clock stands still meanwhile.
    before = page.inner_text(queued)
    assert before.startswith("queued ")
    page.wait_for_function(
        "([sel, t]) => document.querySelector(sel).textContent !== t", arg=[queued, before]
    )
    assert page.inner_text(admitted) == "not started"
    assert page.inner_text(f"{row(FINISHED)} td.clock").startswith("JCT ")

    page.click(f"{row(FINISHED)} a")
    note = page.locator("#view-job .throughput-note")
    note.wait_for()
    text = note.inner_text()
    assert "Collecting samples" not in text
    assert text.startswith("The job finished: ") and "on average over 3 m 00 s" in text
    page.screenshot(path=str(artifacts / "explain-finished-detail.png"))

    page.goto(f"{url}/#/jobs/{ADMITTED}")
    page.wait_for_selector("#view-job .callout-admitted")
    assert "waits for its workers" in page.inner_text("#view-job .throughput-note")
    stat = page.locator("#view-job .stat", has_text="not started")
    assert stat.locator(".num").inner_text() == "–"
    page.screenshot(path=str(artifacts / "explain-admitted-detail.png"))
    assert console.errors == []


def test_heatmap_key_reads_job_hue_and_state_shade_together(
    page: Any, console: Any, url: str, artifacts: pathlib.Path
) -> None:
    sign_in(page, url)
    entry = f'#legend-jobs li[data-job-id="{RUNNING}"]'
    page.wait_for_selector(entry)
    # The fake's running job holds the whole pool: partial, complete, flushed thirds.
    partial, complete, flushed = cell_colours(page, [5, 2000, 3500])
    assert len({partial, complete, flushed}) == 3
    # Its key entry shows the same three colours the grid uses for it...
    assert background(page, f"{entry} .shade.partial") == partial
    assert background(page, f"{entry} .swatch") == complete
    assert background(page, f"{entry} .shade.flushed") == flushed
    # ...and the state key draws each shade in the hues of the jobs on the switch.
    for state, rgb in (("partial", partial), ("complete", complete), ("flushed", flushed)):
        stripes = page.locator(f'#legend-states li[data-state="{state}"] .stripes span')
        colours = stripes.evaluate_all(
            "spans => spans.map((s) => getComputedStyle(s).backgroundColor)"
        )
        assert f"rgb({rgb[0]}, {rgb[1]}, {rgb[2]})" in colours, (state, colours)
    assert page.inner_text(".legend").count("=") == 2  # "shade = state", "hue = job"
    page.locator(".switch-panel").screenshot(path=str(artifacts / "explain-heatmap-key.png"))
    assert console.errors == []


@pytest.mark.parametrize("width", [1366, 1104, 1099])
def test_a_full_pool_count_stays_on_one_line(
    page: Any, console: Any, url: str, artifacts: pathlib.Path, width: int
) -> None:
    # 1104 px is about the narrowest two-column layout; below 1100 the panels stack.
    page.set_viewport_size({"width": width, "height": 768})
    sign_in(page, url)
    page.wait_for_function(
        "() => document.querySelector('#c-used').textContent === '4,096 / 4,096'"
    )
    fit = page.evaluate(_TEXT_FIT_JS, "#c-used")
    assert fit == {"lines": 1, "spills": False}, fit
    page.locator(".counters").screenshot(path=str(artifacts / f"explain-counters-{width}.png"))
    assert console.errors == []


def test_a_long_workload_name_keeps_the_runs_table_beside_the_run_card(
    page: Any, console: Any, url: str, artifacts: pathlib.Path
) -> None:
    sign_in(page, url, "#/bench")
    page.wait_for_selector('.stats-table tr[data-policy="esa"]')
    page.screenshot(path=str(artifacts / "explain-bench-long-name.png"))
    runs = page.locator(".panel.runs").bounding_box()
    card = page.locator(".run-detail").bounding_box()
    assert runs["x"] + runs["width"] <= card["x"], (runs, card)
    # The table fits its panel (nothing scrolled out of sight) and stays clear of the card.
    header = page.locator(".panel.runs th", has_text="backend").bounding_box()
    assert header["x"] + header["width"] <= runs["x"] + runs["width"], (header, runs)
    label = page.locator('[data-ratio="esa/atp"] .lbl').bounding_box()
    assert header["x"] + header["width"] <= label["x"], (header, label)
    cell = page.locator(".panel.runs td.workload")
    assert cell.get_attribute("title") == LONG_WORKLOAD
    assert LONG_WORKLOAD in page.inner_text(".run-detail h3")
    assert console.errors == []


def test_the_empty_list_reads_right_for_all_and_for_one_state(
    page: Any, console: Any, url: str, artifacts: pathlib.Path
) -> None:
    sign_in(page, url, token=EMPTY_TOKEN)
    # Listed: the total is the service's answer.
    page.wait_for_function("() => document.querySelector('#jobs-total').textContent === '0 jobs'")
    empty = page.locator("#jobs-empty")
    assert empty.is_visible()
    assert empty.inner_text().startswith("You have no jobs yet.")
    assert "state" not in empty.inner_text()
    page.screenshot(path=str(artifacts / "explain-empty-all.png"))
    page.select_option("#state-filter", "failed")
    page.wait_for_function(
        "() => document.querySelector('#jobs-empty').textContent === 'None of your jobs is failed.'"
    )
    assert page.inner_text("#jobs-total") == "0 failed jobs"
    assert console.errors == []
