"""Why a queued job waits (`queue_reason`), as the scheduler's own decision round found it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from api.schemas import PolicyName
from api.settings import Settings
from tests.api.conftest import Api, make_api, wait_for


def _api(tmp_path: Path, database_url: str, policy: PolicyName) -> Iterator[Api]:
    settings = Settings(
        data_dir=tmp_path,
        tick_s=0.05,
        heartbeat_timeout_s=30.0,
        database={"url": database_url},
        switch={"target": "memory", "aggregators": 256},
        policy={"policy": policy},
    )
    yield from make_api(settings)


@pytest.fixture
def static_api(tmp_path: Path, database_url: str) -> Iterator[Api]:
    yield from _api(tmp_path, database_url, "static")


@pytest.fixture
def two_switch_ids(
    tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Api]:
    """An atp service whose switch job table has two entries (the real one has 1,024)."""
    monkeypatch.setattr("api.coordinator.scheduling.MAX_JOBS", 2)
    yield from _api(tmp_path, database_url, "atp")


def _job(api: Api, job_id: object) -> dict[str, object]:
    response = api.client.get(f"/jobs/{job_id}", headers=api.auth())
    assert response.status_code == 200, response.text
    body: dict[str, object] = response.json()
    return body


def test_a_static_job_without_room_waits_for_a_partition_of_its_slots(static_api: Api) -> None:
    # A window of 128 needs 128 slots, two aggregators each: the whole pool of 256.
    first = static_api.submit(name="whole-pool", window=128)
    assert first["state"] == "admitted" and first["queue_reason"] is None
    second = static_api.submit(name="waits", window=64)
    expected = {
        "kind": "partition",
        "message": "waiting for a partition of 64 slots (128 aggregators)",
        "slots": 64,
    }
    assert second["state"] == "queued"
    assert second["queue_reason"] == expected
    assert second["reason"] == expected["message"]
    assert _job(static_api, second["id"])["queue_reason"] == expected
    listed = static_api.client.get("/jobs?state=queued", headers=static_api.auth()).json()
    assert [j["queue_reason"] for j in listed["items"]] == [expected]

    static_api.client.post(f"/jobs/{first['id']}/cancel", headers=static_api.auth())
    wait_for(lambda: _job(static_api, second["id"])["state"] == "admitted", "the partition")
    admitted = _job(static_api, second["id"])
    assert admitted["queue_reason"] is None and admitted["reason"] is None


def test_a_job_finding_every_switch_job_id_taken_says_so(two_switch_ids: Api) -> None:
    api = two_switch_ids
    holders = [api.submit(name=f"holder{i}") for i in range(2)]
    assert [j["state"] for j in holders] == ["admitted", "admitted"]
    waiting = api.submit(name="waits")
    assert waiting["state"] == "queued"
    assert waiting["queue_reason"] == {
        "kind": "switch_job_ids",
        "message": "all 2 switch job ids in use",
        "slots": None,
    }

    api.client.post(f"/jobs/{holders[0]['id']}/cancel", headers=api.auth())
    # The id returns once the switch has removed the cancelled job; the next round admits.
    wait_for(lambda: _job(api, waiting["id"])["state"] == "admitted", "a free switch job id")
    assert _job(api, waiting["id"])["queue_reason"] is None


def test_the_queue_counts_every_waiting_job_under_its_reason(static_api: Api) -> None:
    api = static_api
    assert api.submit(name="whole-pool", window=128)["state"] == "admitted"
    waiting = [api.submit(name=f"w{i}", window=w) for i, w in enumerate((64, 32, 64))]
    assert [j["state"] for j in waiting] == ["queued"] * 3
    other = {"Authorization": f"Bearer {api.other_token}"}
    body = {"name": "other", "n_workers": 2, "iterations": 3, "gradient_bytes": 4096}
    assert api.client.post("/jobs", json={**body, "window": 16}, headers=other).status_code == 201

    summary = api.client.get("/queue", headers=api.auth()).json()
    assert summary == {
        "total": 3,
        "reasons": [
            {
                "kind": "partition",
                "message": "waiting for a partition of 64 slots (128 aggregators)",
                "jobs": 2,
            },
            {
                "kind": "partition",
                "message": "waiting for a partition of 32 slots (64 aggregators)",
                "jobs": 1,
            },
        ],
    }
    everyone = api.client.get("/queue", headers=api.auth(api.admin_token)).json()
    assert everyone["total"] == 4
