"""Priorities a tenant cannot buy, and a submission rate per tenant: HTTP against a live
service on a real store (SQLite, and PostgreSQL when ``INASCHED_TEST_POSTGRES_URL`` is set),
with tenants alice and bob and an admin, root."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from api.coordinator.admission import SubmitBuckets, SubmitLimits
from api.settings import Settings
from cli.main import main
from tests.api.conftest import Api, make_api, updated

JOB = {"name": "job", "n_workers": 2, "iterations": 3, "gradient_bytes": 4096}


def _submit(api: Api, token: str, **fields: object) -> tuple[int, dict[str, object]]:
    response = api.client.post("/jobs", json={**JOB, **fields}, headers=api.auth(token))
    return response.status_code, response.json()


def test_a_tenant_cannot_submit_above_its_priority_ceiling(api: Api) -> None:
    status, body = _submit(api, api.token, priority_class=15)
    assert status == 403
    assert "ceiling of 7" in str(body["detail"])
    assert "max_priority_class" in str(body["detail"])
    assert _submit(api, api.token, priority_class=7)[0] == 201
    # The admin grants alice the top classes; bob keeps the default.
    granted = api.client.put(
        "/tenants/alice/limits",
        json={"max_priority_class": 15},
        headers=api.auth(api.admin_token),
    )
    assert granted.status_code == 200, granted.text
    assert granted.json()["max_priority_class"] == 15
    assert granted.json()["own"]["max_priority_class"] == 15
    assert _submit(api, api.token, priority_class=15)[0] == 201
    assert _submit(api, api.other_token, priority_class=15)[0] == 403
    # An admin's own token is held to no ceiling.
    assert _submit(api, api.admin_token, priority_class=15)[0] == 201


def test_a_tenant_sees_its_own_limits(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    own = api.client.get("/limits", headers=api.auth())
    assert own.status_code == 200
    assert own.json()["tenant"] == "alice"
    assert own.json()["max_priority_class"] == 7
    assert api.client.get("/limits").status_code == 401
    url = str(api.client.base_url)
    assert main(["--service", url, "--token", api.token, "jobs", "limits"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("tenant alice: priority classes 0..7, 256 jobs admitted at once")


@pytest.fixture
def slow_tenants(settings: Settings) -> Iterator[Api]:
    """A service whose tenants may submit 3 jobs at once and one more every 1,000 s."""
    yield from make_api(updated(settings, tenant={"submit_rate": 0.001, "submit_burst": 3}))


def test_a_tenant_beyond_its_submission_rate_gets_429_and_the_others_do_not(
    slow_tenants: Api,
) -> None:
    api = slow_tenants
    assert [_submit(api, api.token)[0] for _ in range(3)] == [201, 201, 201]
    response = api.client.post("/jobs", json=JOB, headers=api.auth())
    assert response.status_code == 429
    assert int(response.headers["Retry-After"]) >= 1
    assert "jobs/s" in response.json()["detail"]
    assert _submit(api, api.other_token)[0] == 201
    # Nothing was stored for the refused submission.
    listed = api.client.get("/jobs", headers=api.auth()).json()
    assert listed["total"] == 3
    # An admin raises alice's rate over REST; her next submission goes through.
    raised = api.client.put(
        "/tenants/alice/limits", json={"submit_burst": 10}, headers=api.auth(api.admin_token)
    )
    assert raised.status_code == 200, raised.text
    assert raised.json()["submit_burst"] == 10


def test_a_bucket_refills_at_its_rate_and_holds_at_most_its_burst() -> None:
    now = [0.0]
    buckets = SubmitBuckets(clock=lambda: now[0])
    limits = SubmitLimits(max_priority_class=7, submit_rate=2.0, submit_burst=2)
    assert [buckets.take(1, limits) for _ in range(2)] == [0.0, 0.0]
    assert buckets.take(1, limits) == pytest.approx(0.5)
    assert buckets.take(2, limits) == 0.0  # another tenant's bucket is its own
    now[0] = 0.5
    assert buckets.take(1, limits) == 0.0
    now[0] = 100.0  # a long pause refills to the burst, no more
    assert [buckets.take(1, limits) for _ in range(3)][-1] > 0


def test_limits_refuse_values_out_of_range(api: Api) -> None:
    for body in ({"max_priority_class": 16}, {"submit_rate": 0}, {"submit_burst": 0}):
        response = api.client.put(
            "/tenants/alice/limits", json=body, headers=api.auth(api.admin_token)
        )
        assert response.status_code == 422, body
