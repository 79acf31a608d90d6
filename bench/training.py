"""Real training through inasched: DDP on scikit-learn's digits, gloo against the switch.

    python -m bench.training [--workers 2,4] [--steps 300] [--modes gloo,sync,async,ddp]
                             [--lanes 256] [--json FILE] [--quick]

An MLP (64-512-512-10, 0.3 M parameters, two DDP buckets) learns the digits data
set that scikit-learn ships (1,797 8x8 images; nothing is downloaded): 1,437 to train, 360 to
test, a global batch of 128 split across the ranks, SGD with momentum. Every mode sees the
same data in the same order, so the curves differ only by how gradients are summed:

- ``gloo``: ``init_process_group("gloo")``, DDP's own allreduce (the reference);
- ``sync``: ``init_process_group("inasched")`` with the synchronous hook
  (``workers.torch_hook.register(..., overlap=False)``: the backward pass waits per bucket);
- ``async``: the same backend with the asynchronous hook (buckets overlap);
- ``ddp``: the same backend with no hook: DDP's allreduces go to the backend's
  ``allreduce``, which returns at once too (what a script gets from the one-line change).

Each inasched mode is a job of a service run in this process (embedded soft switch and PS, k
lanes per fragment); each run is ``torchrun`` with ``--nproc-per-node`` workers. Rank 0 records
its shard's loss at every step, the test accuracy every `eval_every` steps and at the end, and
its step times (training steps only; the first tenth are warm-up and not timed). The table
gives steps/s and, per inasched mode, the ratio of its step time to gloo's, the difference of
final test accuracy (points) and the largest relative difference between its loss curve and
gloo's. Targets: accuracy within 0.5 points, step time within 1.5x of gloo with the
asynchronous hook.

Figures, 2026-12-05 05:22:47-05:27:39 UTC, ``python -m bench.training --json FILE`` (defaults:
300 steps, k=1,024, window 128, engine data path) on the 2-core VM while other engineers'
tests ran (load average 6.7 at the start); step time / gloo, and the largest relative
difference of rank 0's loss from gloo's over the 300 steps:

    workers  mode    steps/s  final loss  accuracy %  step time / gloo  max loss diff
          2  gloo       91.4      0.0147       98.61                 -              -
          2  sync        8.6      0.0147       98.61            10.64x        5.4e-06
          2  async      15.2      0.0147       98.61             6.01x        5.4e-06
          2  ddp        20.3      0.0147       98.61             4.49x        5.1e-06
          4  gloo       43.0      0.0084       98.61                 -              -
          4  sync       10.6      0.0084       98.61             4.04x        2.6e-06
          4  async      17.8      0.0084       98.61             2.42x        2.6e-06
          4  ddp        17.4      0.0084       98.61             2.47x        1.2e-02

Final accuracy equals gloo's in every mode (+0.00 points). The asynchronous hook is 1.7-1.8x
the synchronous one, but 2.4-6.0x gloo's step time, short of the 1.5x target: the switch
path moves 1.2 MB per step at tens of MB/s (``bench.allreduce``), gloo at hundreds. The 4
worker ``ddp`` run's loss drifts furthest (5.0e-4 absolute at step 296, loss 0.034), with
the same final loss and accuracy; about 3-4% of the gradient bytes went through the PS.

``--quick``: 2 workers, 30 steps, gloo and the asynchronous hook (a smoke test). ``--json``
writes ``{"runs": [...], "comparisons": [...], "cpus", "lanes", "steps"}``: a run has
``mode``, ``workers``, ``steps_per_s``, ``loss`` (every step), ``accuracy`` (``[step, %]``
pairs), ``final_accuracy``, ``switch_allreduces`` and ``fallbacks`` (the backend's counters:
the hooks bypass its ``allreduce``), ``bytes_switch`` and ``bytes_ps`` (rank 0's gradient bytes
summed by the switch and by the PS); a comparison has
``workers``, ``mode``, ``step_time_ratio``, ``accuracy_delta``, ``final_loss_delta`` and
``max_loss_rel_diff``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["main"]

log = logging.getLogger(__name__)

MODES = ("gloo", "sync", "async", "ddp")
WORKERS = (2, 4)
STEPS = 300
GLOBAL_BATCH = 128
HIDDEN = 512
BUCKET_MB = 0.25
EVAL_EVERY = 25
LANES = 1024
WINDOW = 128
# A run that has not ended by then is stopped and reported as failed, not waited for.
RUN_TIMEOUT_S = 900


# ------------------------------------------------------------------ one rank (under torchrun)


def _digits(seed: int) -> tuple[Any, Any, Any, Any]:
    """``(x_train, y_train, x_test, y_test)`` tensors: a fixed 80/20 split, features in [0, 1]."""
    import numpy as np
    import torch
    from sklearn.datasets import load_digits

    data = load_digits()
    order = np.random.default_rng(seed).permutation(len(data.target))
    x = torch.tensor(data.data[order] / 16.0, dtype=torch.float32)
    y = torch.tensor(data.target[order], dtype=torch.int64)
    cut = int(0.8 * len(y))
    return x[:cut], y[:cut], x[cut:], y[cut:]


def _train(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    if args.rank_mode != "gloo":
        import workers.torch_backend  # noqa: F401  # registers "inasched"
        from workers.torch_hook import register

    dist.init_process_group("gloo" if args.rank_mode == "gloo" else "inasched")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    x_train, y_train, x_test, y_test = _digits(args.seed)
    model = nn.Sequential(
        nn.Linear(64, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, 10),
    )
    ddp = DistributedDataParallel(model, bucket_cap_mb=BUCKET_MB)
    pg: Any = dist.group.WORLD
    if args.rank_mode in ("sync", "async"):
        register(ddp, pg.client, overlap=args.rank_mode == "async")
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    share = GLOBAL_BATCH // world
    order = torch.Generator().manual_seed(args.seed + 1)
    losses: list[float] = []
    accuracy: list[tuple[int, float]] = []
    step_s: list[float] = []
    batch_start, permutation = len(y_train), torch.empty(0, dtype=torch.int64)

    def evaluate() -> float:
        with torch.no_grad():
            predicted = model(x_test).argmax(dim=1)
        return float((predicted == y_test).float().mean()) * 100

    for step in range(args.steps):
        if batch_start + GLOBAL_BATCH > len(y_train):  # a new epoch, the same on every rank
            permutation, batch_start = torch.randperm(len(y_train), generator=order), 0
        batch = permutation[batch_start + rank * share : batch_start + (rank + 1) * share]
        batch_start += GLOBAL_BATCH
        began = time.perf_counter()
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(ddp(x_train[batch]), y_train[batch])
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        step_s.append(time.perf_counter() - began)
        losses.append(loss.item())
        if rank == 0 and (step + 1) % EVAL_EVERY == 0:
            accuracy.append((step + 1, evaluate()))
    final_accuracy = evaluate()
    if args.rank_mode != "gloo":
        pg.report_progress(args.steps)
    if rank == 0:
        timed = step_s[len(step_s) // 10 :]
        stats = pg.client.stats() if args.rank_mode != "gloo" else None
        run = {
            "mode": args.rank_mode,
            "workers": world,
            "steps_per_s": len(timed) / sum(timed),
            "loss": losses,
            "accuracy": accuracy,
            "final_accuracy": final_accuracy,
            "switch_allreduces": getattr(pg, "switch_allreduces", 0),
            "fallbacks": dict(getattr(pg, "fallbacks", {})),
            "bytes_switch": stats.bytes_switch if stats else 0,
            "bytes_ps": stats.bytes_ps if stats else 0,
        }
        Path(args.out).write_text(json.dumps(run))
    dist.destroy_process_group()


# ------------------------------------------------------------------ the driver


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Service:
    """The service (embedded soft switch and PS) in a uvicorn thread, and a tenant token."""

    def __init__(self, data_dir: Path, lanes: int, window: int) -> None:
        import uvicorn

        from api.http.app import create_app
        from api.settings import Settings
        from api.store.crud import create_tenant_token

        port = _free_port()
        settings = Settings.model_validate(
            dict(
                data_dir=data_dir,
                switch={"lanes": lanes},
                window=window,
                http={"port": port},
                heartbeat_timeout_s=60.0,
            )
        )
        app = create_app(settings)
        with app.state.service.sessions() as session:
            self.token = create_tenant_token(session, tenant="bench-training")
        self.url = f"http://127.0.0.1:{port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="service", daemon=True)

    def __enter__(self) -> _Service:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the service did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *_: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)

    def submit(self, name: str, workers: int, steps: int) -> dict[str, Any]:
        """A job for `workers` ranks of `steps` iterations; its JSON (``id``, ``join_token``)."""
        import httpx

        params = (64 * HIDDEN + HIDDEN) + (HIDDEN * HIDDEN + HIDDEN) + (HIDDEN * 10 + 10)
        body = {"name": name, "n_workers": workers, "iterations": steps}
        body["gradient_bytes"] = 4 * params
        headers = {"Authorization": f"Bearer {self.token}"}
        response = httpx.post(f"{self.url}/jobs", json=body, headers=headers, timeout=30)
        if response.status_code != 201:
            raise RuntimeError(f"job submission refused ({response.status_code}): {response.text}")
        job: dict[str, Any] = response.json()
        return job


def _launch(
    mode: str, workers: int, steps: int, seed: int, out: Path, job: dict[str, Any] | None
) -> dict[str, Any]:
    """One run under torchrun; rank 0's record (or ``{"error": ...}``)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if job is not None:
        env.update(
            INASCHED_SERVICE=str(job["service"]),
            INASCHED_JOB=str(job["id"]),
            INASCHED_JOIN_TOKEN=str(job["join_token"]),
        )
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(workers)]
    cmd += ["--master-addr", "127.0.0.1", "--master-port", str(_free_port())]
    cmd += ["-m", "bench.training", "--rank-mode", mode, "--out", str(out)]
    cmd += ["--steps", str(steps), "--seed", str(seed)]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"mode": mode, "workers": workers, "error": f"timed out after {RUN_TIMEOUT_S} s"}
    if done.returncode != 0 or not out.exists():
        tail = done.stderr.strip().splitlines()[-5:]
        return {"mode": mode, "workers": workers, "error": " | ".join(tail)}
    run: dict[str, Any] = json.loads(out.read_text())
    return run


def _compare(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each inasched run against the gloo run of its worker count."""
    gloo = {r["workers"]: r for r in runs if r["mode"] == "gloo" and "error" not in r}
    rows = []
    for run in runs:
        ref = gloo.get(run["workers"])
        if run["mode"] == "gloo" or ref is None or "error" in run:
            continue
        rel = [abs(a - b) / abs(b) for a, b in zip(run["loss"], ref["loss"], strict=True)]
        rows.append(
            {
                "workers": run["workers"],
                "mode": run["mode"],
                "step_time_ratio": ref["steps_per_s"] / run["steps_per_s"],
                "accuracy_delta": run["final_accuracy"] - ref["final_accuracy"],
                "final_loss_delta": run["loss"][-1] - ref["loss"][-1],
                "max_loss_rel_diff": max(rel),
            }
        )
    return rows


def _table(runs: list[dict[str, Any]], comparisons: list[dict[str, Any]]) -> str:
    versus = {(c["workers"], c["mode"]): c for c in comparisons}
    lines = [
        "workers  mode    steps/s  final loss  accuracy %  step time / gloo  "
        "accuracy - gloo  max loss diff"
    ]
    for run in runs:
        if "error" in run:
            lines.append(f"{run['workers']:>7}  {run['mode']:<6}  failed: {run['error']}")
            continue
        c = versus.get((run["workers"], run["mode"]))
        vs = (
            f"{c['step_time_ratio']:>15.2f}x  {c['accuracy_delta']:>+15.2f}  "
            f"{c['max_loss_rel_diff']:>13.2e}"
            if c
            else f"{'-':>16}  {'-':>15}  {'-':>13}"
        )
        lines.append(
            f"{run['workers']:>7}  {run['mode']:<6}  {run['steps_per_s']:>7.1f}  "
            f"{run['loss'][-1]:>10.4f}  {run['final_accuracy']:>10.2f}  {vs}"
        )
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.training", description=__doc__.split("\n")[0] if __doc__ else None
    )
    parser.add_argument("--workers", default=",".join(map(str, WORKERS)), help="e.g. 2,4")
    parser.add_argument("--modes", default=",".join(MODES), help=f"of {', '.join(MODES)}")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--lanes", type=int, default=LANES, help="k, values per fragment")
    parser.add_argument("--window", type=int, default=WINDOW, help="fragments in flight")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the runs and comparisons here")
    parser.add_argument("--quick", action="store_true", help="2 workers, 30 steps, gloo, async")
    # One rank's part, as the driver starts it under torchrun.
    parser.add_argument("--rank-mode", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run every (workers, mode), print the table, write `--json`; 1 when a run failed."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.rank_mode:
        _train(args)
        return 0
    logging.basicConfig(level=logging.WARNING)
    workers = [2] if args.quick else [int(w) for w in args.workers.split(",") if w]
    modes = ["gloo", "async"] if args.quick else [m for m in args.modes.split(",") if m]
    steps = min(args.steps, 30) if args.quick else args.steps
    if set(modes) - set(MODES):
        parser.error(f"--modes: each must be one of {', '.join(MODES)}")
    runs = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-training-") as tmp,
        _Service(Path(tmp), args.lanes, args.window) as service,
    ):
        for n in workers:
            for mode in modes:
                job = None
                if mode != "gloo":
                    job = service.submit(f"digits-{mode}-{n}", n, steps)
                    job["service"] = service.url
                out = Path(tmp) / f"{mode}-{n}.json"
                runs.append(_launch(mode, n, steps, args.seed, out, job))
                print(_table(runs[-1:], []).splitlines()[-1], flush=True)
    comparisons = _compare(runs)
    print(_table(runs, comparisons))
    if args.json:
        result = {
            "runs": runs,
            "comparisons": comparisons,
            "cpus": os.cpu_count(),
            "lanes": args.lanes,
            "window": args.window,
            "steps": steps,
        }
        args.json.write_text(json.dumps(result, indent=1))
    return 1 if any("error" in r for r in runs) else 0


if __name__ == "__main__":
    raise SystemExit(main())
