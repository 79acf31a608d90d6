"""The queue summary at scale, in a real browser: 9,744 queued jobs for two reasons read as a
count per reason, every job counted (not a sample of the first page and "N more").

Against the fake service; the real service's grouping is checked in tests/api/test_jobviews.py.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from tests.dashboards.conftest import serve
from tests.dashboards.fixture_service import TOKEN, FakeJob, FakeService, create_fixture_app

pytestmark = pytest.mark.browser

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
def url() -> Iterator[str]:
    with serve(create_fixture_app(crowded_queue)) as base:
        yield base


def test_ten_thousand_queued_jobs_read_as_a_count_per_reason(
    page: Any, console: Any, url: str, artifacts: pathlib.Path
) -> None:
    page.goto(url)
    page.fill("#token-input", TOKEN)
    page.click("#token-form button")
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
