"""Joining a job: the REST call of docs/CONTRACTS.md (real httpx client, in-memory transport)
and the same JSON from a config file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from p4ctl.protocol import Policy

from workers.errors import JobEnded, RendezvousError
from workers.rendezvous import HashedPlacement, StaticPlacement, join, load_config, parse_join

BODY: dict[str, Any] = {
    "job_id": 3,
    "switch_job_id": 5,
    "worker_id": 1,
    "fan_in": 4,
    "policy": "static",
    "switch": {"host": "127.0.0.1", "port": 9555},
    "ps": {"host": "127.0.0.1", "port": 9556},
    "lanes": 64,
    "window": 64,
    "placement": {"kind": "static", "part_base": 8, "part_size": 32},
    "iterations": 100,
    "gradient_bytes": 4000000,
    "model": "ResNet-50",
    "heartbeat_interval_s": 1.0,
}


def service(status: int, body: dict[str, Any], seen: list[httpx.Request]) -> httpx.Client:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, json=body)

    return httpx.Client(transport=httpx.MockTransport(answer), base_url="http://svc")


def test_join_posts_the_data_socket_and_returns_the_job() -> None:
    seen: list[httpx.Request] = []
    with service(201, BODY, seen) as client:
        got = join("http://svc", 3, "tok", ("127.0.0.1", 40001), client=client)
    assert seen[0].url.path == "/jobs/3/workers"
    assert seen[0].headers["authorization"] == "Bearer tok"
    assert json.loads(seen[0].content) == {"data_host": "127.0.0.1", "data_port": 40001}
    assert (got.switch_job_id, got.worker_id, got.policy) == (5, 1, Policy.STATIC)
    assert got.placement == StaticPlacement(8, 32)
    assert got.window_limit() == 32  # never more in flight than the partition has slots
    assert got.placement.locate(5, 33) == (8 + 32 + 1, 1)


@pytest.mark.parametrize(
    ("status", "error"), [(409, JobEnded), (401, RendezvousError), (201, RendezvousError)]
)
def test_join_failures_raise_errors_that_say_what_happened(
    status: int, error: type[Exception]
) -> None:
    body = {"detail": "nope", "state": "cancelled"}  # and a 201 without the fields
    with service(status, body, []) as client, pytest.raises(error):
        join("http://svc", 3, "tok", ("127.0.0.1", 1), client=client)


def test_unreachable_service_is_a_rendezvous_error() -> None:
    with pytest.raises(RendezvousError, match="cannot reach"):
        join("http://127.0.0.1:9", 3, "tok", ("127.0.0.1", 1), timeout_s=2.0)


def test_config_file_holds_the_same_json(tmp_path: Path) -> None:
    body = dict(
        BODY, policy="esa", placement={"kind": "hashed", "seed": 1, "pool": 4096}, data_port=40002
    )
    path = tmp_path / "worker.json"
    path.write_text(json.dumps(body))
    got = load_config(path)
    assert got.placement == HashedPlacement(1, 4096) and got.data_port == 40002
    with pytest.raises(RendezvousError):
        load_config(tmp_path / "missing.json")


def test_a_placement_that_does_not_match_the_policy_is_refused() -> None:
    with pytest.raises(RendezvousError, match="placement"):
        parse_join(dict(BODY, policy="atp"))


def queued_then(status: int, body: dict[str, Any], queued: int, seen: list[str]) -> httpx.Client:
    """A service that answers 409 ``queued`` `queued` times, then `status` with `body`."""

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        if len(seen) <= queued:
            return httpx.Response(409, json={"detail": "no free range", "state": "queued"})
        return httpx.Response(status, json=body)

    return httpx.Client(transport=httpx.MockTransport(answer), base_url="http://svc")


@pytest.fixture
def fast_queue_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("workers.rendezvous._QUEUED_POLL_S", 0.0)


@pytest.mark.usefixtures("fast_queue_poll")
def test_a_queued_job_is_joined_again_until_it_is_admitted() -> None:
    seen: list[str] = []
    with queued_then(201, BODY, 3, seen) as client:
        got = join("http://svc", 3, "tok", ("127.0.0.1", 1), client=client)
    assert len(seen) == 4
    assert got.worker_id == 1


@pytest.mark.usefixtures("fast_queue_poll")
def test_a_job_that_ends_while_queued_stops_the_wait() -> None:
    seen: list[str] = []
    body = {"detail": "cancelled by user", "state": "cancelled"}
    with queued_then(409, body, 2, seen) as client, pytest.raises(JobEnded, match="cancelled"):
        join("http://svc", 3, "tok", ("127.0.0.1", 1), client=client)
    assert len(seen) == 3


def test_queue_wait_bounds_the_wait_for_admission() -> None:
    seen: list[str] = []
    with (
        queued_then(201, BODY, 10**6, seen) as client,
        pytest.raises(RendezvousError, match="still queued after 0 s: no free range"),
    ):
        join("http://svc", 3, "tok", ("127.0.0.1", 1), client=client, queue_wait_s=0.0)
    assert len(seen) == 1
