"""Schemathesis against the OpenAPI spec: generated requests never get a 5xx."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from api.settings import Settings
from tests.api.conftest import Api, make_api


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Api, dict[str, object]]]:
    data = tmp_path_factory.mktemp("openapi")
    config = Settings(data_dir=data, tick_s=0.2, switch={"target": "memory", "aggregators": 256})
    for api in make_api(config):
        job = api.submit(n_workers=4, iterations=1000)
        yield api, job


@pytest.fixture(scope="module")
def api_schema(live: tuple[Api, dict[str, object]]) -> schemathesis.BaseSchema:
    api, _ = live
    loaded = schemathesis.openapi.from_url(f"{api.client.base_url}/openapi.json")
    # The event stream never ends on its own, so a generated request to it would hang.
    return loaded.exclude(path="/events")


def test_no_request_gets_a_server_error(
    live: tuple[Api, dict[str, object]], api_schema: schemathesis.BaseSchema
) -> None:
    api, job = live
    base_url = str(api.client.base_url).rstrip("/")
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 12

    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=25,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def no_5xx(case: schemathesis.Case) -> None:
            headers = api.auth()
            if "/workers" in case.path:
                # Worker routes take the job's join token; aim requests at the real job.
                headers = api.auth(str(job["join_token"]))
                if case.path_parameters is not None:
                    case.path_parameters["job_id"] = job["id"]
            response = case.call(base_url=base_url, headers=headers)
            assert response.status_code < 500, (
                f"{case.method} {case.formatted_path}: {response.status_code} {response.text}"
            )

        no_5xx()
