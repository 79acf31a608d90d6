"""The DDP example in two real processes: through inasched its loss curve follows gloo's."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
from p4ctl.backend import Endpoint
from p4ctl.protocol import Policy

HANG_GUARD_S = 180
STEPS = 25


def free_port(kind: int) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(extra: list[str]) -> list[subprocess.Popen[str]]:
    master = str(free_port(socket.SOCK_STREAM))
    procs = []
    for rank in range(2):
        env = dict(
            os.environ,
            RANK=str(rank),
            WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=master,
            OMP_NUM_THREADS="1",
        )
        cmd = [sys.executable, "-m", "workers.train_example", "--steps", str(STEPS), *extra]
        procs.append(
            subprocess.Popen(
                cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    return procs


def losses(procs: list[subprocess.Popen[str]]) -> list[float]:
    outs = [p.communicate(timeout=HANG_GUARD_S) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    return [json.loads(line)["loss"] for line in outs[0][0].splitlines()]


def test_ddp_hook_follows_the_gloo_loss_curve(make_rig: Any, tmp_path: Path) -> None:
    rig = make_rig(aggregators=256)
    rig.install(8, 2, Policy.ESA)
    for rank in range(2):
        body = rig.join_body(8, rank, 2, Policy.ESA)
        body.update(data_host="127.0.0.1", data_port=free_port(socket.SOCK_DGRAM))
        rig.control.add_worker(8, rank, Endpoint("127.0.0.1", body["data_port"]))
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(body))
    # Both runs at once: most of their time is importing torch and building DDP.
    ina_procs = start(["--comm", "inasched", "--config", str(tmp_path / "rank{rank}.json")])
    gloo_procs = start(["--comm", "gloo"])
    ina, gloo = losses(ina_procs), losses(gloo_procs)
    assert len(ina) == len(gloo) == STEPS
    assert np.mean(gloo[-5:]) < 0.7 * np.mean(gloo[:5])  # it does learn
    np.testing.assert_allclose(ina, gloo, rtol=1e-3)
    assert rig.control.counters().jobs[8]["job_aggregated"] > 0
