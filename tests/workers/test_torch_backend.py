"""``init_process_group("inasched")`` under torchrun, two real ranks joining a job of the real
service (embedded soft switch and PS) over REST: allreduces match gloo within
``workers.quant``'s bound, broadcast, barrier, allgather and DDP work, and an allreduce the
switch cannot do goes through gloo and is counted.

Run as a script (``torchrun ... test_torch_backend.py OUT``) this file is the ranks' program:
each rank writes what it saw to ``OUT/rank{rank}.npz`` and ``OUT/rank{rank}.json``.
"""

from __future__ import annotations

import faulthandler
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import torch
import torch.distributed as dist

from workers.errors import ClientClosed
from workers.quant import DEFAULT_EXPONENT, error_bound

HANG_GUARD_S = 240
# A rank still running this long after it started prints every thread's stack and exits, so a
# hang fails the test with the place it hung (the test shows the ranks' stderr).
DUMP_STACKS_AFTER_S = HANG_GUARD_S - 30
WORLD = 2
# (name, dtype, op, size): distinct sizes, so each tensor's first allreduce uses the default
# exponent (``workers.quant``), which the bound below assumes.
CASES = [
    ("f32_sum", torch.float32, "SUM", 10_000),
    ("f32_avg", torch.float32, "AVG", 3_001),
    ("f16_sum", torch.float16, "SUM", 2_000),
    ("bf16_sum", torch.bfloat16, "SUM", 1_500),
]
REPO = Path(__file__).resolve().parents[2]


def probe(out: Path) -> None:
    """One rank's part (see the module docstring)."""
    faulthandler.dump_traceback_later(DUMP_STACKS_AFTER_S, exit=True)
    import workers.torch_backend  # noqa: F401  # registers the backend

    dist.init_process_group("inasched")
    rank = dist.get_rank()
    pg: Any = dist.group.WORLD
    reference = dist.new_group(backend="gloo")
    rng = np.random.default_rng(rank)
    saved: dict[str, np.ndarray] = {}
    inputs = {
        name: torch.from_numpy(rng.uniform(-0.5, 0.5, size).astype(np.float32)).to(dtype)
        for name, dtype, _, size in CASES
    }
    results = {name: x.clone() for name, x in inputs.items()}
    # All in flight at once, then waited for.
    works = [
        dist.all_reduce(results[name], op=getattr(dist.ReduceOp, op), async_op=True)
        for name, _, op, _ in CASES
    ]
    for work in works:
        assert work is not None
        work.wait()
    for name, _, op, _ in CASES:
        by_gloo = inputs[name].to(torch.float32, copy=True)
        dist.all_reduce(by_gloo, group=reference)
        if op == "AVG":
            by_gloo /= WORLD
        saved[f"{name}_input"] = inputs[name].to(torch.float64).numpy()
        saved[f"{name}_inasched"] = results[name].to(torch.float64).numpy()
        saved[f"{name}_gloo"] = by_gloo.to(torch.float64).numpy()
    through_switch = pg.switch_allreduces

    largest = torch.tensor([float(rank), -float(rank)])
    dist.all_reduce(largest, op=dist.ReduceOp.MAX)
    doubles = torch.full((5,), 0.25 + rank, dtype=torch.float64)
    dist.all_reduce(doubles)

    shared = torch.arange(4.0) * (rank + 1)
    dist.broadcast(shared, src=0)
    dist.barrier()
    gathered = [torch.zeros(2) for _ in range(WORLD)]
    dist.all_gather(gathered, torch.full((2,), float(rank)))

    torch.manual_seed(rank)  # different weights: DDP's broadcast must make them equal
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(4, 8)).pow(2).mean().backward()  # type: ignore[no-untyped-call]
        optimizer.step()
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    saved["ddp_params"] = params.to(torch.float64).numpy()

    np.savez(out / f"rank{rank}.npz", **saved)
    summary: dict[str, Any] = {
        "backend": dist.get_backend(),
        "switch_allreduces_of_cases": through_switch,
        "switch_allreduces": pg.switch_allreduces,
        "fallbacks": dict(pg.fallbacks),
        "max": largest.tolist(),
        "doubles": doubles.tolist(),
        "broadcast": shared.tolist(),
        "allgather": [g.tolist() for g in gathered],
    }
    dist.destroy_process_group()
    try:  # the group's shutdown closed the client (and stopped the heartbeats)
        pg.client.allreduce_async(np.zeros(4, np.float32))
    except ClientClosed:
        summary["closed_by_destroy"] = True
    (out / f"rank{rank}.json").write_text(json.dumps(summary))
    faulthandler.cancel_dump_traceback_later()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_ranks(url: str, job: dict[str, Any], out: Path) -> None:
    env = dict(
        os.environ,
        INASCHED_SERVICE=url,
        INASCHED_JOB=str(job["id"]),
        INASCHED_JOIN_TOKEN=str(job["join_token"]),
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    )
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(WORLD)]
    cmd += ["--master-addr", "127.0.0.1", "--master-port", str(free_port()), __file__, str(out)]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr or ""  # bytes on POSIX, whatever `text` says
        stderr = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr
        raise AssertionError(f"the ranks hung for {HANG_GUARD_S} s:\n{stderr[-8000:]}") from exc
    assert done.returncode == 0, done.stderr[-8000:]


def test_inasched_backend_under_torchrun(tmp_path: Path) -> None:
    from api.http.app import create_app
    from api.settings import Settings
    from api.store.crud import create_tenant_token
    from tests.api.conftest import LiveServer

    settings = Settings(
        data_dir=tmp_path, heartbeat_timeout_s=60.0, switch={"aggregators": 1024}, http={"port": 0}
    )
    app = create_app(settings)
    with app.state.service.sessions() as s:
        token = create_tenant_token(s, tenant="torch")
    with LiveServer(app) as url, httpx.Client(base_url=url, timeout=30) as http:
        body = {"name": "torch", "n_workers": WORLD, "iterations": 10, "gradient_bytes": 65536}
        response = http.post("/jobs", json=body, headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 201, response.text
        run_ranks(url, response.json(), tmp_path)

    arrays = [np.load(tmp_path / f"rank{r}.npz") for r in range(WORLD)]
    seen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD)]
    for name, dtype, op, _ in CASES:
        inputs = np.stack([a[f"{name}_input"] for a in arrays])
        total, abs_total = inputs.sum(axis=0), np.abs(inputs).sum(axis=0)
        bound = error_bound(total, abs_total, WORLD, DEFAULT_EXPONENT)
        # The result is then rounded to the tensor's dtype; gloo sums in float32.
        rounding = torch.finfo(dtype).eps * np.abs(total)
        if op == "AVG":
            total, bound = total / WORLD, bound / WORLD
        for a in arrays:
            ours, gloo = a[f"{name}_inasched"], a[f"{name}_gloo"]
            assert np.all(np.abs(ours - total) <= bound + rounding), name
            gloo_error = torch.finfo(torch.float32).eps * abs_total
            assert np.all(np.abs(ours - gloo) <= bound + rounding + gloo_error), name
    for rank, s in enumerate(seen):
        assert s["backend"] == "inasched"
        assert s["closed_by_destroy"]
        assert s["switch_allreduces_of_cases"] == len(CASES)
        assert s["switch_allreduces"] > len(CASES)  # DDP's buckets went through the switch
        assert s["fallbacks"] == {"allreduce op MAX": 1, "allreduce dtype torch.float64": 1}
        assert s["max"] == [WORLD - 1, 0]
        assert s["doubles"] == [0.25 * WORLD + sum(range(WORLD))] * 5
        assert s["broadcast"] == [0.0, 1.0, 2.0, 3.0]
        assert s["allgather"] == [[float(r)] * 2 for r in range(WORLD)], rank
    np.testing.assert_array_equal(arrays[0]["ddp_params"], arrays[1]["ddp_params"])


if __name__ == "__main__":
    probe(Path(sys.argv[1]))
