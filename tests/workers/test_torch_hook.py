"""The DDP example in two real processes: through inasched its loss curve follows gloo's, with
the asynchronous hook (buckets in flight together) and the synchronous one."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
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


@pytest.mark.parametrize("hook", ["async", "sync"])
def test_ddp_hook_follows_the_gloo_loss_curve(make_rig: Any, tmp_path: Path, hook: str) -> None:
    rig = make_rig(aggregators=256)
    rig.install(8, 2, Policy.ESA)
    for rank in range(2):
        body = rig.join_body(8, rank, 2, Policy.ESA)
        body.update(data_host="127.0.0.1", data_port=free_port(socket.SOCK_DGRAM))
        rig.control.add_worker(8, rank, Endpoint("127.0.0.1", body["data_port"]))
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(body))
    # Both runs at once: most of their time is importing torch and building DDP.
    config = str(tmp_path / "rank{rank}.json")
    ina_procs = start(["--comm", "inasched", "--hook", hook, "--config", config])
    gloo_procs = start(["--comm", "gloo"])
    ina, gloo = losses(ina_procs), losses(gloo_procs)
    assert len(ina) == len(gloo) == STEPS
    assert np.mean(gloo[-5:]) < 0.7 * np.mean(gloo[:5])  # it does learn
    np.testing.assert_allclose(ina, gloo, rtol=1e-3)
    assert rig.control.counters().jobs[8]["job_aggregated"] > 0


def bucket_passes(
    layouts: list[list[int]], store: Any, rank: int, errors: list[Exception | None]
) -> None:
    """Rank `rank` of two (threads sharing `store`) hands `BucketOrder` its buckets of each pass
    (sizes in order), then the first bucket of one more pass; its error lands in `errors`."""
    import torch
    from torch._C._distributed_c10d import ProcessGroupGloo

    from workers.torch_hook import BucketOrder

    group = ProcessGroupGloo(store, rank, 2, timedelta(seconds=30))
    order = BucketOrder(group)
    try:
        for sizes in [*layouts, [1]]:
            for index, size in enumerate(sizes):
                order.check(index, torch.zeros(size))
    except Exception as exc:  # returned to the test, which asserts on it
        errors[rank] = exc


def test_bucket_order_stops_a_layout_that_differs_across_ranks() -> None:
    import torch.distributed as dist

    from workers.torch_hook import BucketOrderError

    store = dist.HashStore()
    errors: list[Exception | None] = [None, None]
    layouts = [[[30, 20], [30, 20]], [[30, 20], [30, 21]]]
    threads = [
        threading.Thread(target=bucket_passes, args=(layouts[rank], store, rank, errors))
        for rank in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # The first pass agreed; the second did not, and both ranks see it at the next pass.
    assert all(isinstance(e, BucketOrderError) for e in errors), errors
    assert all("differ across ranks" in str(e) for e in errors)


def test_bucket_order_wants_index_order_within_a_pass() -> None:
    import torch
    import torch.distributed as dist
    from torch._C._distributed_c10d import ProcessGroupGloo

    from workers.torch_hook import BucketOrder, BucketOrderError

    order = BucketOrder(ProcessGroupGloo(dist.HashStore(), 0, 1, timedelta(seconds=30)))
    order.check(0, torch.zeros(4))
    with pytest.raises(BucketOrderError, match="bucket 2 came when bucket 1 was due"):
        order.check(2, torch.zeros(4))
