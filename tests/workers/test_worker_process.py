"""`inasched worker` as real processes over the real switch and PS: a run to completion, and a
worker killed mid-allreduce (the others stop with a clear error; the PS forgets the job)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from p4ctl.backend import Endpoint
from p4ctl.protocol import Policy

HANG_GUARD_S = 120  # not a performance bound: only keeps a broken run from hanging CI


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_workers(
    rig: Any, tmp_path: Path, job: int, n: int, policy: Policy, extra: list[str]
) -> list[subprocess.Popen[str]]:
    procs = []
    for w in range(n):
        body = rig.join_body(job, w, n, policy)
        body.update(data_host="127.0.0.1", data_port=free_port(), gradient_bytes=40_000)
        rig.control.add_worker(job, w, Endpoint("127.0.0.1", body["data_port"]))
        config = tmp_path / f"worker{w}.json"
        config.write_text(json.dumps(body))
        cmd = [sys.executable, "-m", "workers.worker", "--config", str(config), *extra]
        procs.append(
            subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    return procs


def finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    _, err = proc.communicate(timeout=HANG_GUARD_S)
    return proc.returncode, err


def test_workers_from_config_files_run_to_completion(make_rig: Any, tmp_path: Path) -> None:
    rig = make_rig(aggregators=256)
    rig.install(4, 2, Policy.ESA)
    procs = start_workers(rig, tmp_path, 4, 2, Policy.ESA, ["--iterations", "5"])
    for proc in procs:
        status, err = finish(proc)
        assert status == 0, err
    assert rig.control.counters().jobs[4]["job_aggregated"] > 0


def test_killed_worker_fails_the_others_cleanly_and_the_ps_forgets_the_job(
    make_rig: Any, tmp_path: Path
) -> None:
    rig = make_rig(aggregators=256, ps_idle_timeout_s=0.5)
    rig.install(6, 3, Policy.ATP)
    procs = start_workers(
        rig, tmp_path, 6, 3, Policy.ATP, ["--iterations", "100000", "--timeout", "2"]
    )
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while rig.ps.counters().outcomes.get("completed", 0) < 50:  # all three are running
            assert time.monotonic() < deadline, "workers never got going"
            assert all(p.poll() is None for p in procs), [finish(p) for p in procs]
            time.sleep(0.05)
        procs[0].send_signal(signal.SIGKILL)
        for proc in procs[1:]:
            status, err = finish(proc)
            assert status == 4, err
            assert "no result for fragment" in err and len(err.strip().splitlines()) == 1
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
    while 6 in rig.ps.counters().jobs:  # freed by the PS's idle timeout
        assert time.monotonic() < deadline, "the PS kept the dead job's state"
        time.sleep(0.05)


def test_unreachable_switch_exits_with_status_4(make_rig: Any, tmp_path: Path, capsys: Any) -> None:
    from workers import worker

    rig = make_rig(aggregators=64)
    body = rig.join_body(1, 0, 2, Policy.ATP)
    body["switch"]["port"] = free_port()  # nothing listens there
    body.update(gradient_bytes=4000)
    config = tmp_path / "worker.json"
    config.write_text(json.dumps(body))
    status = worker.main(["--config", str(config), "--iterations", "1", "--timeout", "1"])
    assert status == 4
    assert "is unreachable" in capsys.readouterr().err


def test_model_names_match_the_table_loosely() -> None:
    from workers.worker import model_cost

    assert model_cost("resnet50") == model_cost("ResNet-50") is not None
    assert model_cost("no-such-model") is None
