"""Bad input never breaks a job or the service, over HTTP against the real service: joins that
would make the switch reflect results elsewhere, lone surrogates, counters past 64 bits, a
job's size given twice, loose types, oversized bodies, a reused Idempotency-Key, a worker's
failure message naming the user's job id, and progress the switch did not count."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from ipaddress import IPv4Network
from pathlib import Path

import httpx
import pytest

from api.schemas import MAX_WORKER_BYTES
from api.settings import Settings
from scheduler.workload import model_table
from tests.api.conftest import Api, make_api, updated, wait_for

JobBody = dict[str, object]


def _join(api: Api, job: JobBody, host: str, port: int) -> httpx.Response:
    return api.client.post(
        f"/jobs/{job['id']}/workers",
        json={"data_host": host, "data_port": port},
        headers=api.auth(str(job["join_token"])),
    )


def _detail(response: httpx.Response) -> str:
    detail = response.json()["detail"]
    return detail if isinstance(detail, str) else " ".join(d["msg"] for d in detail)


# ------------------------------------------------------------------ 7: no reflection via joins


@pytest.mark.parametrize(
    ("host", "why"),
    [
        ("0.0.0.0", "bind one interface"),
        ("255.255.255.255", "broadcast"),
        ("224.0.0.1", "multicast"),
        ("239.1.2.3", "multicast"),
        ("240.0.0.1", "reserved"),
        ("10.1.2.3", "source address"),
        ("192.0.2.7", "worker_networks"),
    ],
)
def test_join_refuses_an_address_the_switch_must_not_send_results_to(
    api: Api, host: str, why: str
) -> None:
    job = api.submit(n_workers=1)
    refused = _join(api, job, host, 29001)
    assert refused.status_code == 422, refused.text
    assert why in _detail(refused)
    # Loopback still joins. (Port 29001 is below the kernel's ephemeral range, so it can be
    # none of the service's own randomly bound ports.)
    joined = _join(api, job, "127.0.0.1", 29001)
    assert joined.status_code == 201, joined.text


def test_join_refuses_the_services_own_port(api: Api) -> None:
    job = api.submit(n_workers=1)
    port = api.client.base_url.port
    assert port is not None
    refused = _join(api, job, "127.0.0.1", port)
    assert refused.status_code == 422, refused.text
    assert "service's own address" in _detail(refused)
    assert api.client.get(f"/jobs/{job['id']}", headers=api.auth()).json()["workers"] == []


@pytest.fixture
def networked(settings: Settings) -> Iterator[Api]:
    networks = [IPv4Network("10.0.0.0/24")]
    yield from make_api(settings.model_copy(update={"worker_networks": networks}))


def test_worker_networks_admit_workers_of_other_hosts_in_them_only(networked: Api) -> None:
    job = networked.submit(n_workers=2)
    assert _join(networked, job, "10.0.0.7", 29001).status_code == 201
    broadcast = _join(networked, job, "10.0.0.255", 29001)
    assert broadcast.status_code == 422 and "broadcast" in _detail(broadcast)
    outside = _join(networked, job, "10.0.1.7", 29001)
    assert outside.status_code == 422 and "10.0.0.0/24" in _detail(outside)


# ------------------------------------------------------------- 8: malformed input gets a 4xx


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/jobs", '{"name": "a\\ud800b", "n_workers": 1, "iterations": 1, "gradient_bytes": 64}'),
        ("/jobs", '{"name": "ab", "n_workers": 1, "iterations": 1, "model": "\\udfffx"}'),
        ("/bench/runs", '{"workload": "w\\ud800", "backend": "emu", "summary": {}}'),
    ],
)
def test_a_lone_surrogate_in_a_json_string_gets_422(api: Api, path: str, body: str) -> None:
    headers = {**api.auth(), "Content-Type": "application/json"}
    response = api.client.post(path, content=body, headers=headers)
    assert response.status_code == 422, response.text
    assert "\\ud" in str(response.json()["detail"])  # the input, echoed as its escape


def test_a_body_that_is_not_utf8_gets_422_like_any_malformed_json(api: Api) -> None:
    headers = {**api.auth(), "Content-Type": "application/json"}
    response = api.client.post("/jobs", content=b'{"name": "a\xff"}', headers=headers)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["type"] == "json_invalid"


def test_a_lone_surrogate_in_a_workers_join_gets_422(api: Api) -> None:
    job = api.submit(n_workers=1)
    response = api.client.post(
        f"/jobs/{job['id']}/workers",
        content='{"data_host": "127.0.0.\\ud800", "data_port": 29001}',
        headers={**api.auth(str(job["join_token"])), "Content-Type": "application/json"},
    )
    assert response.status_code == 422, response.text


# ------------------------------------------------------------------ 9: bounded byte counters


def _progress(api: Api, job: JobBody, worker: int, **fields: int) -> httpx.Response:
    return api.client.post(
        f"/jobs/{job['id']}/workers/{worker}/progress",
        json=fields,
        headers=api.auth(str(job["join_token"])),
    )


def test_counters_past_what_a_job_can_send_are_refused_and_the_job_still_finishes(
    api: Api,
) -> None:
    # 4096 bytes in fragments of 64 lanes of 4 bytes: 16 fragments, 4096 bytes per iteration.
    job = api.submit(n_workers=2, iterations=3, gradient_bytes=4096)
    for port in (29001, 40002):
        assert _join(api, job, "127.0.0.1", port).status_code == 201
    for worker in (0, 1):  # together past 2**63: a 500 for every later report, before
        huge = _progress(api, job, worker, iterations_done=1, bytes_switch=2**62)
        assert huge.status_code == 422, huge.text
    over = _progress(api, job, 0, iterations_done=1, bytes_switch=3 * 4096, bytes_ps=1)
    assert over.status_code == 422 and "12288 bytes" in _detail(over)
    schema = _progress(api, job, 1, iterations_done=1, bytes_ps=MAX_WORKER_BYTES + 1)
    assert schema.status_code == 422
    for worker in (0, 1):
        done = _progress(api, job, worker, iterations_done=3, bytes_switch=8192, bytes_ps=4096)
        assert done.status_code == 200, done.text
    assert done.json()["state"] == "finished"
    shown = api.client.get(f"/jobs/{job['id']}", headers=api.auth()).json()
    assert (shown["bytes_switch"], shown["bytes_ps"]) == (16384, 8192)


# --------------------------------------------------- 10: one size, strict types, body limits


def test_a_job_has_one_size_given_once(api: Api) -> None:
    vgg = model_table()["VGG16"][0]
    body = {"name": "j", "n_workers": 1, "iterations": 1, "gradient_bytes": 1024, "model": "VGG16"}
    for gradient_bytes in (1024, vgg):  # a contradiction, and a repetition: both refused
        both = {**body, "gradient_bytes": gradient_bytes}
        refused = api.client.post("/jobs", json=both, headers=api.auth())
        assert refused.status_code == 422, refused.text
        assert "not both" in _detail(refused)
    named = api.submit(n_workers=1, gradient_bytes=None, model="vgg-16")
    assert named["gradient_bytes"] == vgg
    assert _join(api, named, "127.0.0.1", 29001).json()["gradient_bytes"] == vgg
    other = {**body, "gradient_bytes": None, "model": "my-own-net"}  # not in the table
    unknown = api.client.post("/jobs", json=other, headers=api.auth())
    assert unknown.status_code == 422 and "gradient_bytes alone" in _detail(unknown)


@pytest.mark.parametrize(
    ("field", "value"),
    [("n_workers", "2"), ("n_workers", True), ("n_workers", 2.5), ("iterations", "3")],
)
def test_job_fields_take_only_their_own_json_type(api: Api, field: str, value: object) -> None:
    body = {"name": "j", "n_workers": 2, "iterations": 3, "gradient_bytes": 4096, field: value}
    response = api.client.post("/jobs", json=body, headers=api.auth())
    assert response.status_code == 422, response.text


def test_a_whole_float_is_a_json_integer(api: Api) -> None:
    assert api.submit(n_workers=2.0, gradient_bytes=4096.0)["n_workers"] == 2


def test_worker_fields_take_only_their_own_json_type(api: Api) -> None:
    job = api.submit(n_workers=1)
    loose = api.client.post(
        f"/jobs/{job['id']}/workers",
        json={"data_host": "127.0.0.1", "data_port": "29001"},
        headers=api.auth(str(job["join_token"])),
    )
    assert loose.status_code == 422, loose.text
    assert _join(api, job, "127.0.0.1", 29001).status_code == 201
    report = api.client.post(
        f"/jobs/{job['id']}/workers/0/progress",
        json={"iterations_done": True},
        headers=api.auth(str(job["join_token"])),
    )
    assert report.status_code == 422, report.text


@pytest.fixture
def small(settings: Settings) -> Iterator[Api]:
    yield from make_api(settings.model_copy(update={"max_gradient_bytes": 2**20}))


def test_gradient_bytes_are_bounded_by_the_setting(small: Api) -> None:
    base = {"name": "j", "n_workers": 1, "iterations": 1}
    over = small.client.post(
        "/jobs", json={**base, "gradient_bytes": 2**20 + 4}, headers=small.auth()
    )
    assert over.status_code == 422 and "max_gradient_bytes" in _detail(over)
    model = small.client.post("/jobs", json={**base, "model": "VGG16"}, headers=small.auth())
    assert model.status_code == 422 and "max_gradient_bytes" in _detail(model)
    assert small.submit(gradient_bytes=2**20)["gradient_bytes"] == 2**20


def test_gradient_bytes_of_terabytes_are_refused_by_default(api: Api) -> None:
    body = {"name": "j", "n_workers": 1, "iterations": 1, "gradient_bytes": 2**33}
    response = api.client.post("/jobs", json=body, headers=api.auth())
    assert response.status_code == 422 and "max_gradient_bytes" in _detail(response)
    body["gradient_bytes"] = 2**40
    assert api.client.post("/jobs", json=body, headers=api.auth()).status_code == 422


def test_a_chunked_body_over_the_limit_gets_413(api: Api) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"name": "'
        for _ in range(10):
            yield b"x" * 1_000_000
        yield b'"}'

    response = api.client.post(
        "/jobs", content=chunks(), headers={**api.auth(), "Content-Type": "application/json"}
    )
    assert response.status_code == 413, response.text
    assert "larger than" in response.json()["detail"]


def test_reusing_an_idempotency_key_with_another_body_gets_409(api: Api) -> None:
    key = {"Idempotency-Key": "submit-1"}
    body = {"name": "j", "n_workers": 2, "iterations": 3, "gradient_bytes": 4096}
    first = api.client.post("/jobs", json=body, headers={**api.auth(), **key})
    assert first.status_code == 201, first.text
    again = api.client.post("/jobs", json=body, headers={**api.auth(), **key})
    assert again.json()["id"] == first.json()["id"] and again.json()["join_token"] is None
    other = api.client.post("/jobs", json={**body, "n_workers": 3}, headers={**api.auth(), **key})
    assert other.status_code == 409, other.text
    assert "Idempotency-Key" in _detail(other) and "n_workers" in _detail(other)
    listed = api.client.get("/jobs", headers=api.auth()).json()
    assert listed["total"] == 1 and listed["items"][0]["n_workers"] == 2


# -------------------------------------------- 13: a worker's failure names the user's job id


def test_a_workers_failure_names_the_users_job_id(
    api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    from workers.worker import EXIT_TIMEOUT, main

    api.submit(n_workers=1)  # takes a switch job id, so the next job's ids differ
    job = api.submit(n_workers=2, iterations=1, gradient_bytes=1024)
    peek = _join(api, job, "127.0.0.1", 40009).json()
    assert peek["switch_job_id"] != job["id"], "precondition: the two ids differ"
    argv = ["--job", str(job["id"]), "--token", str(job["join_token"])]
    argv += ["--service", str(api.client.base_url), "--timeout", "0.5"]
    # Its peer (worker 0 above) never sends, so no result comes: the worker times out.
    assert main(argv) == EXIT_TIMEOUT
    err = capsys.readouterr().err
    assert f"job {job['id']}: no result" in err, err
    assert f"job {peek['switch_job_id']}" not in err


def test_a_worker_sends_the_jobs_size_not_its_models(
    api: Api, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from workers.worker import EXIT_TIMEOUT, main

    job = api.submit(n_workers=2, iterations=1, gradient_bytes=1024)
    answer = _join(api, job, "127.0.0.1", 29001).json()
    # A join that names a model of the table with another size (a job stored before sizes
    # were checked, or a hand-written config): the job's 1024 bytes are what it sends.
    config = tmp_path / "worker.json"
    config.write_text(json.dumps({**answer, "model": "GoogLeNet"}))
    with caplog.at_level(logging.INFO, logger="workers.worker"):
        assert main(["--config", str(config), "--timeout", "0.3"]) == EXIT_TIMEOUT
    assert "of GoogLeNet (256 floats" in caplog.text, caplog.text


# ------------------------------------------- priorities come from what the switch counted


@pytest.fixture
def counted(settings: Settings) -> Iterator[Api]:
    # A data plane address: the service holds progress reports to the switch's counters.
    update = {"data": "127.0.0.1:1"}
    yield from make_api(
        updated(settings, switch=update, policy={"policy": "esa", "priority": "srtf"})
    )


def test_progress_the_switch_did_not_count_does_not_raise_a_jobs_priority(counted: Api) -> None:
    # 4096 bytes in fragments of 64 lanes: 16 packets per iteration of the one worker.
    honest = counted.submit(n_workers=1, iterations=1000, gradient_bytes=4096)
    gamer = counted.submit(n_workers=1, iterations=1000, gradient_bytes=4096)
    packets = counted.switch.pipeline.job_packets["job_aggregated"]
    for job, port, counted_iterations, claimed in (
        (honest, 29001, 500, 500),
        (gamer, 29002, 10, 999),
    ):
        sid = _join(counted, job, "127.0.0.1", port).json()["switch_job_id"]
        packets[sid] = 16 * counted_iterations
        report = _progress(counted, job, 0, iterations_done=claimed, bytes_switch=claimed * 4096)
        assert report.status_code == 200, report.text

    def level(job: JobBody) -> int:
        shown = counted.client.get(f"/jobs/{job['id']}", headers=counted.auth()).json()
        return int(shown["priority_level"])

    # srtf: the gamer claims 1 iteration left, the switch counted 990 left; the honest job has
    # 500 left, so it ranks above.
    wait_for(lambda: level(honest) > level(gamer), "the honest job to rank above the gamer")

    def flagged() -> bool:
        text = counted.client.get("/metrics").text
        return "inasched_unsupported_progress_total 1\n" in text

    wait_for(flagged, "the capped report on /metrics")
    # The honest job's report matched its counters: it is never flagged.
    assert level(honest) > level(gamer)
