"""Real training through inasched: DDP on scikit-learn's digits, gloo against the switch.

    python -m bench.training [--workers 2,4] [--steps 300] [--modes gloo,sync,async,ddp]
                             [--lanes 256] [--json FILE] [--quick]

An MLP (64-512-512-10, two DDP buckets) learns the digits data set scikit-learn ships (nothing
is downloaded), every mode on the same data in the same order, so the curves differ only by
how gradients are summed: ``gloo`` (the reference), ``sync`` and ``async`` (the "inasched"
backend with the synchronous or asynchronous hook), ``ddp`` (the backend with no hook). Each
inasched mode is a job of a service run in this process; each run is ``torchrun``. Rank 0
records loss per step, test accuracy and step times (the first tenth is warm-up). The table
gives steps/s and, per inasched mode, the step time over gloo's, the difference of final
accuracy and the largest relative loss difference. Targets: accuracy within 0.5 points, step
time within 1.5x of gloo with the asynchronous hook. ``--quick``: 2 workers, 30 steps;
``--json`` writes ``{"runs", "comparisons", "cpus", "lanes", "steps"}`` (``docs/training.md``).
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
    digits = _digits(args.seed)
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
    losses, accuracy, step_s = _steps(args, model, ddp, digits, rank, world)
    final_accuracy = _accuracy(model, digits[2], digits[3])
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


def _steps(
    args: argparse.Namespace,
    model: Any,
    ddp: Any,
    digits: tuple[Any, Any, Any, Any],
    rank: int,
    world: int,
) -> tuple[list[float], list[tuple[int, float]], list[float]]:
    """`args.steps` SGD steps of `ddp` on this rank's share of each global batch: the loss of
    each, the test accuracy every `EVAL_EVERY` steps (rank 0), and each step's seconds."""
    import torch
    from torch import nn

    x_train, y_train, x_test, y_test = digits
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    share = GLOBAL_BATCH // world
    order = torch.Generator().manual_seed(args.seed + 1)
    losses: list[float] = []
    accuracy: list[tuple[int, float]] = []
    step_s: list[float] = []
    batch_start, permutation = len(y_train), torch.empty(0, dtype=torch.int64)
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
            accuracy.append((step + 1, _accuracy(model, x_test, y_test)))
    return losses, accuracy, step_s


def _accuracy(model: Any, x: Any, y: Any) -> float:
    """Percent of `x` that `model` classifies as `y`."""
    import torch

    with torch.no_grad():
        predicted = model(x).argmax(dim=1)
    return float((predicted == y).float().mean()) * 100


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
