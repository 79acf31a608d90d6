"""The worker rendezvous: join, heartbeat, progress, finish; failures; restart re-sync."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from p4ctl.backend import Endpoint, InMemorySwitch, JobInstall
from p4ctl.protocol import Policy

from api.coordinator import scheduling
from api.http.app import create_app
from api.settings import Settings
from api.store.crud import create_tenant_token
from api.store.models import Job
from tests.api.conftest import Api, LiveServer, make_api, wait_for


def join(api: Api, job: dict[str, object], port: int) -> dict[str, object]:
    response = api.client.post(
        f"/jobs/{job['id']}/workers",
        json={"data_host": "127.0.0.1", "data_port": port},
        headers=api.auth(str(job["join_token"])),
    )
    assert response.status_code == 201, response.text
    result: dict[str, object] = response.json()
    return result


def progress(api: Api, job: dict[str, object], worker: int, done: int) -> tuple[int, str]:
    response = api.client.post(
        f"/jobs/{job['id']}/workers/{worker}/progress",
        json={"iterations_done": done, "bytes_switch": 100 * done, "bytes_ps": done},
        headers=api.auth(str(job["join_token"])),
    )
    return response.status_code, response.json().get("state", "")


def test_workers_join_run_and_finish_then_the_switch_forgets_the_job(api: Api) -> None:
    job = api.submit(n_workers=2, iterations=3)
    first, second = join(api, job, 40001), join(api, job, 40002)
    assert (first["worker_id"], second["worker_id"]) == (0, 1)
    assert first["placement"]["kind"] == "hashed" and first["policy"] == "esa"
    assert first["fan_in"] == 2 and first["lanes"] == 64
    assert join(api, job, 40001)["worker_id"] == 0  # a retried join is the same worker
    sid = first["switch_job_id"]
    assert api.switch.installed_jobs() == {sid}
    assert progress(api, job, 0, 3) == (200, "running")
    assert progress(api, job, 1, 3) == (200, "finished")
    assert progress(api, job, 1, 3) == (200, "finished")  # a retried report is harmless
    done = api.client.get(f"/jobs/{job['id']}", headers=api.auth()).json()
    assert done["state"] == "finished" and done["jct_s"] > 0
    assert done["iterations_done"] == 3 and done["bytes_switch"] == 600
    wait_for(lambda: api.switch.installed_jobs() == set(), "the switch to forget the job")
    assert not any(key[0] == sid for key in api.switch.pipeline.sources)


def test_worker_auth_needs_the_jobs_join_token(api: Api) -> None:
    job = api.submit()
    other = api.submit()
    body = {"data_host": "127.0.0.1", "data_port": 40001}
    url = f"/jobs/{job['id']}/workers"
    assert api.client.post(url, json=body).status_code == 401
    wrong = api.auth(str(other["join_token"]))
    assert api.client.post(url, json=body, headers=wrong).status_code == 401
    assert api.client.post(url, json=body, headers=api.auth()).status_code == 401


def test_cancelled_job_tells_its_workers_409(api: Api) -> None:
    job = api.submit(n_workers=1)
    join(api, job, 40001)
    api.client.post(f"/jobs/{job['id']}/cancel", headers=api.auth())
    beat = api.client.post(
        f"/jobs/{job['id']}/workers/0/heartbeat", headers=api.auth(str(job["join_token"]))
    )
    assert beat.status_code == 409
    assert beat.json()["state"] == "cancelled"


def test_too_many_workers_and_excess_progress_are_refused(api: Api) -> None:
    job = api.submit(n_workers=1, iterations=2)
    join(api, job, 40001)
    extra = api.client.post(
        f"/jobs/{job['id']}/workers",
        json={"data_host": "127.0.0.1", "data_port": 40002},
        headers=api.auth(str(job["join_token"])),
    )
    assert extra.status_code == 409
    status, _ = progress(api, job, 0, 5)
    assert status == 422


@pytest.fixture
def impatient_api(settings: Settings) -> Iterator[Api]:
    yield from make_api(settings.model_copy(update={"heartbeat_timeout_s": 0.3}))


def test_missed_heartbeats_fail_the_job_and_reclaim_it(impatient_api: Api) -> None:
    api = impatient_api
    job = api.submit(n_workers=1)
    join(api, job, 40001)

    def failed() -> bool:
        body = api.client.get(f"/jobs/{job['id']}", headers=api.auth()).json()
        return bool(body["state"] == "failed")

    wait_for(failed, "the silent job to fail")
    body = api.client.get(f"/jobs/{job['id']}", headers=api.auth()).json()
    assert "heartbeat" in body["reason"]
    wait_for(lambda: api.switch.installed_jobs() == set(), "the switch to forget the job")


def _one_running_job(
    settings: Settings, switch: InMemorySwitch
) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
    """A service on `switch` with one 1-worker job whose worker has joined, then stopped:
    ``(job, join answer, tenant auth header)``."""
    app = create_app(settings, backend=switch)
    with app.state.service.sessions() as s:
        token = create_tenant_token(s, tenant="alice")
    auth = {"Authorization": f"Bearer {token}"}
    with LiveServer(app) as url, httpx.Client(base_url=url) as client:
        job = client.post(
            "/jobs",
            json={"name": "a", "n_workers": 1, "iterations": 5, "gradient_bytes": 64},
            headers=auth,
        ).json()
        joined = client.post(
            f"/jobs/{job['id']}/workers",
            json={"data_host": "127.0.0.1", "data_port": 40001},
            headers={"Authorization": f"Bearer {job['join_token']}"},
        )
        assert joined.status_code == 201, joined.text
    return job, joined.json(), auth


def test_restart_resyncs_the_switch_from_the_store(settings: Settings) -> None:
    switch = InMemorySwitch(settings.switch.aggregators, settings.switch.lanes)
    job, joined, auth = _one_running_job(settings, switch)
    sid = joined["switch_job_id"]
    stale = (sid + 7) % 1024
    switch.install_job(JobInstall(stale, Policy.ATP, 2, ps=Endpoint("127.0.0.1", 9)))
    fresh = InMemorySwitch(settings.switch.aggregators, settings.switch.lanes)
    for target in (switch, fresh):  # the same switch with stale state; a rebooted one
        app = create_app(settings, backend=target)
        with LiveServer(app) as url, httpx.Client(base_url=url) as client:
            assert target.installed_jobs() == {sid}
            assert any(k[:2] == (sid, 0) for k in target.pipeline.sources)
            body = client.get(f"/jobs/{job['id']}", headers=auth).json()
            assert body["state"] == "running"


def test_a_job_the_switch_cannot_take_back_after_a_restart_fails_visibly(
    settings: Settings,
) -> None:
    # A static partition stored by an older version with a slot count the switch cannot
    # index (not a power of two): the restarted service must come up, fail that job with a
    # reason, and leave nothing of it on the switch.
    job, _, auth = _one_running_job(
        settings, InMemorySwitch(settings.switch.aggregators, settings.switch.lanes)
    )
    with create_app(settings).state.service.sessions() as s:
        row = s.get(Job, job["id"])
        assert row is not None and row.switch_job_id is not None
        row.policy, row.part_base, row.part_slots, row.hash_seed = "static", 0, 100, None
        s.commit()
    fresh = InMemorySwitch(settings.switch.aggregators, settings.switch.lanes)
    app = create_app(settings, backend=fresh)
    with LiveServer(app) as url, httpx.Client(base_url=url) as client:
        body = client.get(f"/jobs/{job['id']}", headers=auth).json()
        assert body["state"] == "failed"
        assert "could not be restored" in body["reason"] and "power of two" in body["reason"]
        wait_for(lambda: fresh.installed_jobs() == set(), "the switch to hold no job")
        again = client.post(
            "/jobs",
            json={"name": "b", "n_workers": 1, "iterations": 5, "gradient_bytes": 64},
            headers=auth,
        )
        assert again.status_code == 201, again.text


def test_a_stepped_wall_clock_or_a_stalled_service_fails_no_job(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Heartbeats are stamped with the wall clock: when it steps forward by more than the
    heartbeat timeout, or the service (a paused machine) stops that long, every stamp looks
    old, yet no worker fell silent. The reaper restarts the clocks instead of failing jobs."""
    wall_shift, mono_shift = [0.0], [0.0]
    real_utcnow = scheduling.utcnow
    monkeypatch.setattr(
        scheduling, "utcnow", lambda: real_utcnow() + timedelta(seconds=wall_shift[0])
    )
    switch = InMemorySwitch(settings.switch.aggregators, settings.switch.lanes)
    app = create_app(settings, backend=switch)
    with app.state.service.sessions() as s:
        token = create_tenant_token(s, tenant="alice")
    auth = {"Authorization": f"Bearer {token}"}
    with LiveServer(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        coordinator = app.state.service.coordinator
        coordinator.monotonic = lambda: time.monotonic() + mono_shift[0]
        body = {"name": "a", "n_workers": 1, "iterations": 5, "gradient_bytes": 64}
        job = client.post("/jobs", json=body, headers=auth).json()
        joined = client.post(
            f"/jobs/{job['id']}/workers",
            json={"data_host": "127.0.0.1", "data_port": 40001},
            headers={"Authorization": f"Bearer {job['join_token']}"},
        )
        assert joined.status_code == 201, joined.text

        def state() -> str:
            return str(client.get(f"/jobs/{job['id']}", headers=auth).json()["state"])

        assert state() == "running"
        coordinator.reap()
        wall_shift[0] = 4 * settings.heartbeat_timeout_s  # a clock sync steps the wall clock
        assert not coordinator.reap()
        assert not coordinator.reap()
        assert state() == "running"
        wall_shift[0] += 4 * settings.heartbeat_timeout_s  # the machine pauses: both move
        mono_shift[0] += 4 * settings.heartbeat_timeout_s
        assert not coordinator.reap()
        assert not coordinator.reap()
        assert state() == "running"
