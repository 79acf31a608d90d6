"""`inasched launch` as a user runs it: a real service with its embedded soft switch, launch in
a process of its own, torchrun and its workers. Whatever ends the job (it finishes, it is
cancelled on the service, a worker is killed), no worker is left running and the switch
keeps nothing of the job."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from p4ctl.backend import SwitchBackend

from api.http.app import create_app
from api.settings import Settings
from api.store.crud import create_tenant_token
from tests.api.conftest import LiveServer, wait_for

# A worker that records its pid (and torchrun's) in a folder, then trains with the worker
# client through the service (`inasched worker`), only sleeps, or exits at once.
WORKER = """\
import os, pathlib, sys, time
pathlib.Path(sys.argv[1], str(os.getpid())).write_text(str(os.getppid()))
if sys.argv[2:] == ["sleep"]:
    time.sleep(600)
if sys.argv[2:] == ["exit"]:
    sys.exit(0)
from workers import worker
sys.exit(worker.main(sys.argv[2:]))
"""

# A torchrun script with the one-line change: the "inasched" torch.distributed backend.
TRAIN = """\
import sys
import torch
import torch.distributed as dist
import workers.torch_backend

dist.init_process_group("inasched")
for step in range(int(sys.argv[1])):
    grad = torch.full((1000,), float(dist.get_rank() + 1))
    dist.all_reduce(grad)
    assert abs(float(grad[0]) - 3.0) < 1e-3, float(grad[0])
    dist.group.WORLD.report_progress(step + 1)
if sys.argv[2:] == ["after-end"]:  # the job finished with the last report: this must fail
    dist.all_reduce(torch.ones(1000))
dist.destroy_process_group()
"""


@dataclass
class Service:
    url: str
    token: str
    switch: SwitchBackend
    tmp: Path

    def job(self, job_id: int) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.token}"}
        body: dict[str, Any] = httpx.get(f"{self.url}/jobs/{job_id}", headers=headers).json()
        return body

    def only_job(self) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.token}"}
        items = httpx.get(f"{self.url}/jobs", headers=headers).json()["items"]
        assert len(items) == 1, items
        body: dict[str, Any] = items[0]
        return body

    def launch(self, *argv: str) -> subprocess.Popen[str]:
        cmd = [sys.executable, "-m", "cli", "--service", self.url, "--token", self.token]
        cmd += ["launch", "--poll", "0.2", "--grace", "5", *argv]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(params=["esa"])
def service(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Service]:
    """The service on its embedded switch of 256 aggregators, with the policy given."""
    settings = Settings(
        data_dir=tmp_path, tick_s=0.05, heartbeat_timeout_s=30.0,
        switch={"aggregators": 256, "lanes": 64}, policy={"policy": request.param},
    )  # fmt: skip
    app = create_app(settings)
    with app.state.service.sessions() as s:
        token = create_tenant_token(s, tenant="alice")
    with LiveServer(app) as url:
        backend = app.state.service.backend
        assert backend is not None
        yield Service(url, token, backend, tmp_path)


def _pids(folder: Path) -> dict[int, int]:
    """``{worker pid: its parent's pid}`` as the workers wrote them."""
    return {int(f.name): int(f.read_text() or 0) for f in folder.iterdir() if f.read_text()}


def _gone(pid: int) -> bool:
    """No such process, or only a zombie waiting for its parent to read its status."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _worker_script(service: Service) -> tuple[Path, Path]:
    script, pids = service.tmp / "train.py", service.tmp / "pids"
    script.write_text(WORKER)
    pids.mkdir()
    return script, pids


def _assert_nothing_left(service: Service, pids: dict[int, int]) -> None:
    for pid in [*pids, *pids.values()]:  # every worker and torchrun
        wait_for(lambda pid=pid: _gone(pid), f"process {pid} to end")  # type: ignore[misc]
    wait_for(lambda: service.switch.installed_jobs() == set(), "the switch to forget the job")
    assert not any(service.switch.occupancy().state)


def test_launched_workers_run_the_job_to_its_end(service: Service) -> None:
    launch = service.launch(
        "--workers", "2", "--gradient-bytes", "4096", "--iterations", "5",
        "--", "-m", "workers.worker", "--timeout", "30",
    )  # fmt: skip
    out, err = launch.communicate(timeout=300)
    assert launch.returncode == 0, err
    job = service.only_job()
    assert job["state"] == "finished" and job["iterations_done"] == 5
    # POST /jobs answers before the decision round: the job is queued until it runs.
    assert f"job {job['id']} 'worker': queued" in out and f"job {job['id']}: finished" in out
    wait_for(lambda: service.switch.installed_jobs() == set(), "the switch to forget the job")


def test_launch_runs_a_script_on_the_inasched_torch_backend(service: Service) -> None:
    script = service.tmp / "train.py"
    script.write_text(TRAIN)
    launch = service.launch(
        "--workers", "2", "--gradient-bytes", "4000", "--iterations", "3",
        "--", str(script), "3",
    )  # fmt: skip
    _, err = launch.communicate(timeout=300)
    assert launch.returncode == 0, err
    job = service.only_job()
    assert job["state"] == "finished" and job["iterations_done"] == 3
    wait_for(lambda: service.switch.installed_jobs() == set(), "the switch to forget the job")


def test_a_collective_after_the_final_report_fails_the_launch(service: Service) -> None:
    script = service.tmp / "train.py"
    script.write_text(TRAIN)
    launch = service.launch(
        "--workers", "2", "--gradient-bytes", "4000", "--iterations", "2",
        "--", str(script), "2", "after-end",
    )  # fmt: skip
    _, err = launch.communicate(timeout=300)  # torch's own timeout is 30 minutes
    assert launch.returncode == 6, err
    assert "has ended (finished)" in err  # each rank's error
    assert "finished, but a worker then failed" in err.splitlines()[-1]
    assert service.only_job()["state"] == "finished"


def test_workers_that_exit_before_the_end_leave_nothing_on_the_switch(service: Service) -> None:
    script, folder = _worker_script(service)
    launch = service.launch(
        "--workers", "2", "--gradient-bytes", "4096", "--iterations", "5",
        "--", str(script), str(folder), "exit",
    )  # fmt: skip
    out, err = launch.communicate(timeout=300)
    assert launch.returncode == 0, err
    assert "exited 0 before reporting every iteration" in out
    assert service.only_job()["state"] == "cancelled"
    _assert_nothing_left(service, _pids(folder))


def test_a_job_cancelled_on_the_service_stops_every_worker(service: Service) -> None:
    script, folder = _worker_script(service)
    launch = service.launch(
        "--workers", "2", "--gradient-bytes", "4096", "--iterations", "5",
        "--", str(script), str(folder), "sleep",
    )  # fmt: skip
    wait_for(lambda: len(_pids(folder)) == 2, "both workers to start", timeout_s=240)
    job = service.only_job()
    headers = {"Authorization": f"Bearer {service.token}"}
    assert httpx.post(f"{service.url}/jobs/{job['id']}/cancel", headers=headers).status_code == 200
    _, err = launch.communicate(timeout=120)
    assert launch.returncode == 5, err
    assert f"job {job['id']} was cancelled" in err.splitlines()[-1]
    _assert_nothing_left(service, _pids(folder))


def test_a_killed_worker_stops_the_others_and_cancels_the_job(service: Service) -> None:
    script, folder = _worker_script(service)
    launch = service.launch(
        "--workers", "2", "--gradient-bytes", "4096", "--iterations", "100000",
        "--", str(script), str(folder), "--timeout", "60",
    )  # fmt: skip
    wait_for(lambda: len(_pids(folder)) == 2, "both workers to start", timeout_s=240)
    job_id = service.only_job()["id"]
    wait_for(lambda: service.job(job_id)["iterations_done"] > 0, "the job to train", 120)
    pids = _pids(folder)
    os.kill(min(pids), signal.SIGKILL)
    _, err = launch.communicate(timeout=120)
    assert launch.returncode == 6, err
    assert "a worker failed" in err.splitlines()[-1]
    assert service.job(job_id)["state"] == "cancelled"
    _assert_nothing_left(service, pids)


def test_an_interrupted_launch_stops_every_worker_and_cancels_the_job(
    service: Service,
) -> None:
    script, folder = _worker_script(service)
    launch = service.launch(
        "--workers", "2", "--gradient-bytes", "4096", "--iterations", "5",
        "--", str(script), str(folder), "sleep",
    )  # fmt: skip
    wait_for(lambda: len(_pids(folder)) == 2, "both workers to start", timeout_s=240)
    launch.send_signal(signal.SIGTERM)
    _, err = launch.communicate(timeout=120)
    assert launch.returncode == 7, err
    assert service.only_job()["state"] == "cancelled"
    _assert_nothing_left(service, _pids(folder))


@pytest.mark.parametrize("service", ["static"], indirect=True)
def test_a_job_still_queued_after_queue_wait_is_cancelled(service: Service) -> None:
    headers = {"Authorization": f"Bearer {service.token}"}
    # A private partition of 128 slots, two copies each: the whole pool.
    body = {"name": "holder", "n_workers": 1, "iterations": 5, "gradient_bytes": 64, "window": 128}
    assert httpx.post(f"{service.url}/jobs", json=body, headers=headers).status_code == 201
    launch = service.launch(
        "--workers", "1", "--gradient-bytes", "64", "--iterations", "5", "--window", "128",
        "--queue-wait", "0", "--name", "waiting", "--", "never-started.py",
    )  # fmt: skip
    out, err = launch.communicate(timeout=120)
    assert launch.returncode == 5, err
    assert "queued for switch memory" in out and "still queued after 0 s" in err
    jobs = httpx.get(f"{service.url}/jobs", headers=headers).json()["items"]
    assert {j["name"]: j["state"] for j in jobs} == {"holder": "admitted", "waiting": "cancelled"}


def test_launch_errors_are_one_line_with_the_clis_exit_codes(
    service: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli.main import main

    assert main(["--service", service.url, "launch", "--workers", "1", "--iterations", "1"]) == 2
    assert "give the training command after --" in capsys.readouterr().err
    argv = ["launch", "--workers", "1", "--iterations", "1", "--model", "nope", "--", "t.py"]
    assert main(["--service", service.url, "--token", service.token, *argv]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    argv[argv.index("nope")] = "resnet50"
    assert main(["--service", "http://127.0.0.1:1", "--token", service.token, *argv]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot reach the service" in err
