"""The dashboard in a real browser against the real service: the software switch embedded in
it, a demo job whose workers allreduce through that switch, and the service's own static
mount of `dashboards.static_dir()`."""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import httpx
import pytest

from tests.dashboards.conftest import serve
from tests.dashboards.demo_job import DemoJob, submit_demo_job
from tests.dashboards.helpers import (
    FREE_RGB,
    cell_colours,
    heatmap_census,
    legend_rgb,
    row_progress,
    same_hue,
)

pytestmark = pytest.mark.browser

T = TypeVar("T")


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """``(url, tenant token)`` of a running service on the embedded software switch."""
    from api.http.app import create_app
    from api.settings import Settings
    from api.store.crud import create_tenant_token

    settings = Settings(
        data_dir=tmp_path_factory.mktemp("service"),
        tick_s=0.2,
        switch={"target": "embedded", "aggregators": 1024},
        policy={"policy": "esa"},
    )
    app = create_app(settings)
    with app.state.service.sessions() as session:
        token = create_tenant_token(session, tenant="alice")
    with serve(app) as url:
        yield url, token


@pytest.fixture
def demo_job(service: tuple[str, str], tmp_path: pathlib.Path) -> Iterator[DemoJob]:
    """A job with two `inasched worker` processes; each test cancels it, so by teardown every
    worker has ended by itself with exit status 3 (job cancelled)."""
    url, token = service
    job = submit_demo_job(url, token, tmp_path / "workers.log")
    try:
        yield job
        job.wait_for_exit(timeout_s=20)
        assert job.close() == [3, 3], job.log.read_text(errors="replace")
    finally:
        job.close()


def sign_in(page: Any, url: str, token: str, route: str = "") -> None:
    page.goto(f"{url}/{route}")
    page.fill("#token-input", token)
    page.click("#token-form button")
    page.wait_for_selector("#stream-status.live")


def held_aggregators(url: str, token: str, job_id: int) -> list[int]:
    snapshot = httpx.get(
        f"{url}/switch", headers={"Authorization": f"Bearer {token}"}, timeout=30
    ).json()
    return [
        start + k
        for start, length, owner, _state in snapshot["runs"]
        if owner == job_id
        for k in range(length)
    ]


def poll(read: Callable[[], T], timeout_s: float = 20.0) -> T:
    """`read()`'s first truthy answer within `timeout_s`, else its last one."""
    deadline = time.monotonic() + timeout_s
    while not (value := read()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return value


def census_while_holding(
    page: Any, job_id: int
) -> tuple[dict[tuple[int, int, int], int], dict[int, int]]:
    """The first heatmap census (cells and legend of one frame) in which `job_id` holds
    aggregators; fails after 20 s of frames where it holds none."""

    def holding() -> tuple[dict[tuple[int, int, int], int], dict[int, int]] | None:
        cells, legend = heatmap_census(page)
        return (cells, legend) if legend.get(job_id, 0) > 0 else None

    census = poll(holding)
    assert census is not None, f"job {job_id} held no aggregator in 20 s of frames"
    return census


def test_heatmap_shows_the_job_its_row_moves_and_cancel_frees_the_cells(
    page: Any, console: Any, service: tuple[str, str], demo_job: DemoJob, artifacts: pathlib.Path
) -> None:
    url, token = service
    sign_in(page, url, token)
    row = f'#jobs-table tr[data-job-id="{demo_job.id}"]'
    page.wait_for_selector(f'{row}[data-state="running"]', timeout=20_000)
    page.wait_for_selector(f'#legend-jobs li[data-job-id="{demo_job.id}"]')

    # The job's row follows its workers' progress reports.
    first = row_progress(page, demo_job.id)
    page.wait_for_function(
        "([sel, n]) => Number(document.querySelector(sel + ' .progress-text')"
        ".textContent.split('/')[0]) > n",
        arg=[row, first],
    )

    # As many cells wear the job's colour (any shade) as the legend says it holds, and the
    # rest are free: the only job on the switch is the demo job. A running job holds nothing
    # between its allreduces and keeps its legend entry at 0, so wait for a frame where it
    # holds some.
    colour = legend_rgb(page, demo_job.id)
    cells, legend = census_while_holding(page, demo_job.id)
    job_cells = sum(n for rgb, n in cells.items() if rgb != FREE_RGB and same_hue(rgb, colour))
    assert job_cells == legend[demo_job.id] == 1024 - cells.get(FREE_RGB, 0), (cells, legend)
    # And they are the switch's: cells of aggregators it reports as held are the job's or,
    # when the pool moved on since, free; never another colour.
    held = poll(lambda: held_aggregators(url, token, demo_job.id))
    assert held, "the demo job held no aggregator in 20 s of running"
    sampled = cell_colours(page, held[:: max(1, len(held) // 40)])
    assert all(rgb == FREE_RGB or same_hue(rgb, colour) for rgb in sampled), sampled
    assert any(same_hue(rgb, colour) for rgb in sampled), sampled
    page.screenshot(path=str(artifacts / "live-running.png"))

    page.click(f"{row} button.danger")
    page.click(f"{row} button.danger.armed")
    page.wait_for_selector(f'{row}[data-state="cancelled"]')
    assert page.locator(f"{row} button").count() == 0

    # Reclaimed: the next switch events show every cell of the job free.
    page.wait_for_function("() => document.querySelector('#c-used').textContent.startsWith('0 /')")
    assert held_aggregators(url, token, demo_job.id) == []
    assert heatmap_census(page)[0] == {FREE_RGB: 1024}
    assert page.locator(f'#legend-jobs li[data-job-id="{demo_job.id}"]').count() == 0
    page.screenshot(path=str(artifacts / "live-cancelled.png"))
    assert console.errors == []


def test_job_detail_lists_workers_and_cancels_the_job(
    page: Any, console: Any, service: tuple[str, str], demo_job: DemoJob, artifacts: pathlib.Path
) -> None:
    url, token = service
    sign_in(page, url, token, f"#/jobs/{demo_job.id}")
    page.wait_for_selector("#view-job .workers tbody tr >> nth=1", timeout=20_000)
    beats = page.locator("#view-job .workers tbody td:nth-child(3)").all_inner_texts()
    assert len(beats) == 2 and all(b.endswith(" ago") for b in beats), beats
    assert page.locator('#view-job svg path[data-series="priority"]').count() == 1
    page.wait_for_selector('#view-job svg path[data-series="bytes/s"]')
    page.screenshot(path=str(artifacts / "live-job-detail.png"))
    page.click("#view-job button.danger")
    page.click("#view-job button.danger.armed")
    page.wait_for_selector("#view-job .detail-head .state-cancelled")
    assert page.locator("#view-job button.danger").count() == 0
    assert console.errors == []


def test_benchmarks_show_a_stored_run(
    page: Any, console: Any, service: tuple[str, str], artifacts: pathlib.Path
) -> None:
    url, token = service
    jobs = [
        {"policy": policy, "job_id": i, "jct_s": base + i}
        for policy, base in (("static", 40.0), ("atp", 30.0), ("esa", 20.0))
        for i in range(21)
    ]
    body = {"workload": "unit", "backend": "sim", "summary": {}, "jobs": jobs}
    stored = httpx.post(
        f"{url}/bench/runs", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    assert stored.status_code == 201, stored.text
    sign_in(page, url, token, "#/bench")
    page.wait_for_selector('.stats-table tr[data-policy="esa"]')
    # Averages 50, 40 and 30 s: esa over atp 40/30, over static 50/30.
    assert page.inner_text('[data-ratio="esa/atp"] .num') == "1.33×"
    assert page.inner_text('[data-ratio="esa/static"] .num') == "1.67×"
    assert page.inner_text('.stats-table tr[data-policy="esa"] .p95') == "39 s"
    assert page.locator("svg.chart path.series").count() == 3
    page.screenshot(path=str(artifacts / "live-bench.png"))
    assert console.errors == []
