"""A torch DDP job across two racks of the loopback fabric (``topology-loopback.json``): the
service starts its spine and two ToRs as soft switch processes, two ``torchrun`` "servers"
of two ranks each run with ``INASCHED_DATA_HOST`` in their rack's network (127.0.1.1 under tor0,
127.0.2.1 under tor1) and nothing else changed, and each rank's DDP gradients are the exact mean
of every rank's local gradients within ``workers.quant``'s bound, as gloo's are; the spine
aggregated the job, and the job finishes.

Run as a script (``torchrun ... test_torch_backend_fabric.py OUT``) this file is a rank's program:
it writes its local gradients, its DDP gradients and gloo's mean of them to ``OUT/rank{rank}.npz``.
"""

from __future__ import annotations

import faulthandler
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import HashStore

from tests.workers.test_torch_backend import DUMP_STACKS_AFTER_S, HANG_GUARD_S, REPO, free_port
from workers.errors import RendezvousError
from workers.quant import DEFAULT_EXPONENT, error_bound

LOOPBACK = REPO / "scheduler" / "data" / "topology-loopback.json"
RACK_HOSTS = ["127.0.1.1", "127.0.2.1"]  # one server in each rack's network
RANKS_PER_SERVER = 2
WORLD = RANKS_PER_SERVER * len(RACK_HOSTS)
STEPS = 3


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU(),
        torch.nn.Linear(32, 1),
    )  # fmt: skip


def probe(out: Path) -> None:
    """One rank's part: each step, its local gradients (DDP's `no_sync`), the same batch's
    gradients as DDP reduced them through the switch, and gloo's mean of the local ones."""
    faulthandler.dump_traceback_later(DUMP_STACKS_AFTER_S, exit=True)
    import workers.torch_backend  # noqa: F401  # registers the backend

    dist.init_process_group("inasched")
    rank = dist.get_rank()
    pg: Any = dist.group.WORLD
    gloo = dist.new_group(backend="gloo")
    torch.manual_seed(rank)  # different weights: DDP's broadcast must make them equal
    model = torch.nn.parallel.DistributedDataParallel(_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    saved: dict[str, np.ndarray] = {}
    for step in range(STEPS):
        x, y = torch.randn(16, 8), torch.randn(16, 1)
        optimizer.zero_grad()
        with model.no_sync():
            torch.nn.functional.mse_loss(model(x), y).backward()  # type: ignore[no-untyped-call]
        local = torch.cat([p.grad.reshape(-1) for p in model.parameters()])  # type: ignore[union-attr]
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()  # type: ignore[no-untyped-call]
        reduced = torch.cat([p.grad.reshape(-1) for p in model.parameters()])  # type: ignore[union-attr]
        by_gloo = local.clone()
        dist.all_reduce(by_gloo, group=gloo)
        saved[f"local{step}"] = local.to(torch.float64).numpy()
        saved[f"ddp{step}"] = reduced.to(torch.float64).numpy()
        saved[f"gloo{step}"] = (by_gloo / WORLD).to(torch.float64).numpy()
        optimizer.step()
        if step + 1 < STEPS:
            pg.report_progress(step + 1)
    # The switches forget a finished job's counters: the test reads them before the last report.
    dist.barrier(group=gloo)
    if rank == 0:
        (out / "trained").touch()
        while not (out / "counted").exists():
            time.sleep(0.05)
    dist.barrier(group=gloo)
    pg.report_progress(STEPS)
    saved["params"] = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()
    np.savez(out / f"rank{rank}.npz", **saved)
    summary = {"switch_allreduces": pg.switch_allreduces, "fallbacks": dict(pg.fallbacks)}
    (out / f"rank{rank}.json").write_text(json.dumps(summary))
    dist.destroy_process_group()
    faulthandler.cancel_dump_traceback_later()


def _run_servers(url: str, job: dict[str, Any], out: Path, trained: Callable[[], None]) -> None:
    """Two torchruns, as on two servers: one per rack, each binding its ranks' UDP sockets to
    its server's address (``INASCHED_DATA_HOST``), meeting at one static rendezvous. `trained`
    is called once the ranks have trained, before their last progress report."""
    port = free_port()
    procs = []
    for node, host in enumerate(RACK_HOSTS):
        env = dict(
            os.environ,
            INASCHED_SERVICE=url,
            INASCHED_JOB=str(job["id"]),
            INASCHED_JOIN_TOKEN=str(job["join_token"]),
            INASCHED_DATA_HOST=host,
            OMP_NUM_THREADS="1",
            PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        )
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(len(RACK_HOSTS))]
        cmd += ["--node-rank", str(node), "--nproc-per-node", str(RANKS_PER_SERVER)]
        cmd += ["--master-addr", "127.0.0.1", "--master-port", str(port), __file__, str(out)]
        with (out / f"torchrun{node}.err").open("w") as err:
            procs.append(subprocess.Popen(cmd, env=env, stderr=err))
    deadline = time.monotonic() + HANG_GUARD_S
    while not (out / "trained").exists() and time.monotonic() < deadline:
        if any(proc.poll() is not None for proc in procs):
            break
        time.sleep(0.05)
    try:
        if (out / "trained").exists():
            trained()
    finally:  # rank 0 waits for it
        (out / "counted").touch()
    hung = False
    for proc in procs:
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            hung = True
    errors = [(out / f"torchrun{node}.err").read_text()[-8000:] for node in range(len(procs))]
    assert not hung, f"the ranks hung for {HANG_GUARD_S} s:\n" + "\n".join(errors)
    assert all(proc.returncode == 0 for proc in procs), "\n".join(errors)


@dataclass
class Fabric:
    url: str
    http: httpx.Client  # with an admin token


@pytest.fixture(scope="module")
def fabric(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    """The service on the loopback example: a spine and two ToRs, soft switch processes."""
    # Imported here: the ranks run this file and need none of the service.
    from api.http.app import create_app
    from api.settings import Settings
    from api.store.crud import create_tenant_token
    from tests.api.conftest import LiveServer

    settings = Settings(
        data_dir=tmp_path_factory.mktemp("service"), tick_s=0.05, heartbeat_timeout_s=60.0,
        switch={"target": "embedded", "topology": LOOPBACK},
    )  # fmt: skip
    app = create_app(settings)
    with app.state.service.sessions() as s:
        token = create_tenant_token(s, tenant="torch", admin=True)
    auth = {"Authorization": f"Bearer {token}"}
    with LiveServer(app) as url, httpx.Client(base_url=url, timeout=30, headers=auth) as http:
        yield Fabric(url, http)


def _submit(fabric: Fabric, n_workers: int) -> dict[str, Any]:
    body = {"name": "ddp", "n_workers": n_workers, "iterations": STEPS, "gradient_bytes": 65536}
    response = fabric.http.post("/jobs", json=body)
    assert response.status_code == 201, response.text
    job: dict[str, Any] = response.json()
    return job


def test_a_rank_under_no_rack_is_told_its_data_host_variable(
    fabric: Fabric, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workers.torch_backend import _create

    job = _submit(fabric, 1)
    monkeypatch.setenv("INASCHED_SERVICE", fabric.url)
    monkeypatch.setenv("INASCHED_JOB", str(job["id"]))
    monkeypatch.setenv("INASCHED_JOIN_TOKEN", str(job["join_token"]))
    monkeypatch.delenv("INASCHED_DATA_HOST", raising=False)
    with pytest.raises(RendezvousError) as refused:
        _create(HashStore(), 0, 1, timedelta(seconds=30))
    message = str(refused.value)
    assert message.startswith("rank 0 (INASCHED_DATA_HOST=127.0.0.1): join of job")
    assert "in no rack's networks (tor0: 127.0.1.0/24; tor1: 127.0.2.0/24)" in message


def test_ddp_across_two_racks_through_the_spine(fabric: Fabric, tmp_path: Path) -> None:
    from tests.api.conftest import wait_for

    http = fabric.http
    job = _submit(fabric, WORLD)
    counted: dict[str, int] = {}

    def read_counters() -> None:
        for one in http.get("/switch").json()["switches"]:
            counters = one["counters"]["jobs"].get(str(job["id"]), {})
            counted[one["name"]] = counters.get("job_aggregated", 0)

    _run_servers(fabric.url, job, tmp_path, read_counters)
    wait_for(lambda: http.get(f"/jobs/{job['id']}").json()["state"] == "finished", "the end")
    # Every rank's fragments met at its ToR, and the ToRs' sums at the spine.
    assert all(counted.get(name, 0) > 0 for name in ("spine", "tor0", "tor1")), counted

    ranks = [np.load(tmp_path / f"rank{r}.npz") for r in range(WORLD)]
    # Every exponent a fragment can have: the default, or one bit above the largest mean seen.
    peak = max(np.abs(r[f"gloo{step}"]).max() for r in ranks for step in range(STEPS))
    exponent = max(DEFAULT_EXPONENT, int(np.frexp(peak)[1]) + 1)
    for step in range(STEPS):
        # DDP divides each rank's gradient by the world size (exactly: a power of two), then sums.
        shares = np.stack([r[f"local{step}"] for r in ranks]) / WORLD
        total, abs_total = shares.sum(axis=0), np.abs(shares).sum(axis=0)
        bound = error_bound(total, abs_total, WORLD, exponent)
        gloo_error = WORLD * torch.finfo(torch.float32).eps * abs_total
        for rank, r in enumerate(ranks):
            assert np.all(np.abs(r[f"ddp{step}"] - total) <= bound), (step, rank)
            assert np.all(np.abs(r[f"ddp{step}"] - r[f"gloo{step}"]) <= bound + gloo_error)
            np.testing.assert_array_equal(r[f"ddp{step}"], ranks[0][f"ddp{step}"])
        assert not np.array_equal(ranks[0][f"local{step}"], ranks[1][f"local{step}"])
    for r in ranks:
        np.testing.assert_array_equal(r["params"], ranks[0]["params"])
    for rank in range(WORLD):
        seen = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert seen["switch_allreduces"] >= STEPS and seen["fallbacks"] == {}, seen


if __name__ == "__main__":
    probe(Path(sys.argv[1]))
