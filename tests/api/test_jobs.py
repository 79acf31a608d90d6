"""Jobs over HTTP: submit, list, get, cancel; tenants; validation; the switch follows."""

from __future__ import annotations

from p4ctl.protocol import MAX_WORKERS

from scheduler.scheduler import too_wide
from tests.api.conftest import Api, decided, wait_for


def test_submission_answers_queued_and_the_next_round_admits_and_installs(api: Api) -> None:
    answer = api.submit(
        answer=True, name="resnet", model="ResNet-50", gradient_bytes=None, n_workers=4,
        iterations=10,
    )  # fmt: skip
    assert answer["state"] == "queued" and answer["policy"] is None
    assert answer["queue_reason"] == {
        "kind": "scheduling",
        "message": "waiting for the scheduler's next decision round",
        "slots": None,
    }
    job = decided(api.client, answer, api.auth())
    assert job["state"] == "admitted"
    assert job["policy"] == "esa"
    assert isinstance(job["join_token"], str) and job["join_token"]
    assert job["gradient_bytes"] > 1_000_000
    assert len(api.switch.installed_jobs()) == 1
    detail = api.client.get(f"/jobs/{job['id']}", headers=api.auth()).json()
    assert "join_token" not in detail
    assert detail["workers"] == []
    assert [p["level"] for p in detail["priority_history"]]


def test_list_filters_by_state_and_paginates(api: Api) -> None:
    ids = [api.submit(name=f"j{i}")["id"] for i in range(5)]
    api.client.post(f"/jobs/{ids[0]}/cancel", headers=api.auth())
    page = api.client.get("/jobs?limit=2&offset=0", headers=api.auth()).json()
    assert page["total"] == 5 and len(page["items"]) == 2
    assert page["items"][0]["id"] == ids[-1]
    cancelled = api.client.get("/jobs?state=cancelled", headers=api.auth()).json()
    assert [j["id"] for j in cancelled["items"]] == [ids[0]]


def test_cancel_reclaims_and_removes_the_job_from_the_switch(api: Api) -> None:
    job = api.submit()
    response = api.client.post(f"/jobs/{job['id']}/cancel", headers=api.auth())
    assert response.status_code == 200
    assert response.json()["state"] == "cancelled"
    wait_for(lambda: api.switch.installed_jobs() == set(), "the switch to forget the job")
    again = api.client.post(f"/jobs/{job['id']}/cancel", headers=api.auth())
    assert again.status_code == 409
    assert again.json()["state"] == "cancelled"


def test_a_tenant_never_sees_another_tenants_job(api: Api) -> None:
    job = api.submit()
    other = api.auth(api.other_token)
    assert api.client.get(f"/jobs/{job['id']}", headers=other).status_code == 404
    assert api.client.post(f"/jobs/{job['id']}/cancel", headers=other).status_code == 404
    assert api.client.get("/jobs", headers=other).json()["total"] == 0


def test_missing_or_unknown_token_is_401(api: Api) -> None:
    assert api.client.get("/jobs").status_code == 401
    assert api.client.get("/jobs", headers=api.auth("ina_t_nope")).status_code == 401
    assert api.client.post("/jobs", json={}).status_code == 401


def test_unknown_job_is_404(api: Api) -> None:
    assert api.client.get("/jobs/999", headers=api.auth()).status_code == 404
    assert api.client.post("/jobs/999/cancel", headers=api.auth()).status_code == 404


def test_bad_fields_are_422_naming_field_and_reason(api: Api) -> None:
    body = {"name": "x", "n_workers": 33, "iterations": 1, "gradient_bytes": 8}
    response = api.client.post("/jobs", json=body, headers=api.auth())
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "n_workers"]
    assert "32" in error["msg"] and "bitmap" in error["msg"]
    body = {"name": "x", "n_workers": 2, "iterations": 1, "model": "NoSuchNet"}
    response = api.client.post("/jobs", json=body, headers=api.auth())
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "model"]
    # A gradient is whole fp32 elements.
    body = {"name": "x", "n_workers": 2, "iterations": 1, "gradient_bytes": 5}
    response = api.client.post("/jobs", json=body, headers=api.auth())
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "gradient_bytes"] and "multiple of 4" in error["msg"]


def test_job_wider_than_the_switch_bitmap_is_422_naming_the_limit(api: Api) -> None:
    # A Philly job of 64 GPUs: the service refuses it as the simulators do, in the same words.
    body = {"name": "wide", "n_workers": 64, "iterations": 1, "gradient_bytes": 8}
    response = api.client.post("/jobs", json=body, headers=api.auth())
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "n_workers"]
    assert too_wide(64) is not None and too_wide(64) in error["msg"]
    assert api.client.get("/jobs", headers=api.auth()).json()["total"] == 0
    schema = api.client.get("/openapi.json").json()["components"]["schemas"]["JobCreate"]
    assert schema["properties"]["n_workers"]["maximum"] == MAX_WORKERS


def test_oversized_body_is_413(api: Api) -> None:
    body = {"name": "x" * 100_000, "n_workers": 1, "iterations": 1, "gradient_bytes": 8}
    response = api.client.post("/jobs", json=body, headers=api.auth())
    assert response.status_code == 413


def test_retried_submission_with_idempotency_key_gives_the_same_job(api: Api) -> None:
    body = {"name": "x", "n_workers": 1, "iterations": 1, "gradient_bytes": 8}
    headers = {**api.auth(), "Idempotency-Key": "abc"}
    first = api.client.post("/jobs", json=body, headers=headers).json()
    second = api.client.post("/jobs", json=body, headers=headers).json()
    assert first["id"] == second["id"]
    assert first["join_token"] and second["join_token"] is None
    assert api.client.get("/jobs", headers=api.auth()).json()["total"] == 1
