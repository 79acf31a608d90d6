"""The ``--emu`` back-end: the real service, soft switch, PS and worker processes on loopback.

For each policy a fresh service (``api.app.create_app``, embedded soft switch and PS, its own
SQLite store in a temporary folder) is served by uvicorn in a thread of this process. Jobs are
submitted over REST at their (time-compressed) arrival times; each job's workers are separate
``python -m workers.worker`` processes that join with the job's token; JCTs are read back from
the service's job store (``GET /jobs``, ``jct_s``); ``GET /switch`` is polled for memory
utilisation.

The workload is scaled down so a run takes minutes on 2 cores (`emu_workload`): the first
`EMU_JOBS` jobs, at most `EMU_WORKERS` workers each, gradients divided by `GRAD_DIVISOR`, at
most `EMU_ITERATIONS` iterations, arrivals compressed to one every `ARRIVAL_GAP_S` seconds.
The scaled workload is written to the output folder as ``workload.csv`` so that ``--sim``
can run exactly the same jobs (the validation of issue 8).
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench.jct_params import BenchParams
from bench.jct_results import JobOutcome, PolicyRun, time_average
from scheduler.workload import JobSpec, load_workload

__all__ = ["EmuError", "emu_context", "emu_runner", "emu_workload"]

log = logging.getLogger(__name__)

EMU_JOBS = 10
EMU_WORKERS = 4
EMU_ITERATIONS = 20
# 100 MB of fp32 gradient -> 50 kB: ~200 fragments of 256 B per worker and iteration, which a
# Python soft switch on one core turns around in tens of milliseconds.
GRAD_DIVISOR = 2000
ARRIVAL_GAP_S = 2.0
# A pool small enough that 10 scaled-down jobs contend for it as the full workload does for a
# Tofino's: the scaled jobs' windows are the same, their gradients 2000x smaller.
EMU_AGGREGATORS = 4096
EMU_WINDOW = 32
JOB_TIMEOUT_S = 900.0
POLL_S = 0.5


class EmuError(RuntimeError):
    """The emulation could not run; the message says which part failed and why."""


def emu_workload(name: str, seed: int) -> tuple[JobSpec, ...]:
    """The scaled-down, time-compressed version of workload `name` (see module docstring)."""
    jobs = load_workload(name, seed)[:EMU_JOBS]
    return tuple(
        replace(
            j,
            arrival_s=i * ARRIVAL_GAP_S,
            workers=min(j.workers, EMU_WORKERS),
            grad_bytes=max(1024, j.grad_bytes // GRAD_DIVISOR),
            iterations=min(j.iterations, EMU_ITERATIONS),
        )
        for i, j in enumerate(jobs)
    )


def emu_context(params: BenchParams) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """Extra parameters (with sources) and notes the report of an emulation shows."""
    parameters = {
        "emu.jobs": EMU_JOBS,
        "emu.max_workers": EMU_WORKERS,
        "emu.max_iterations": EMU_ITERATIONS,
        "emu.grad_divisor": GRAD_DIVISOR,
        "emu.arrival_gap_s": ARRIVAL_GAP_S,
        "emu.aggregators": EMU_AGGREGATORS,
        "emu.window": EMU_WINDOW,
    }
    why = "bench.jct_emu: scaled so a run takes minutes on 2 cores (module docstring)"
    notes = [
        "The emulation runs on loopback: its link is a Python soft switch, not 100 Gbps, so "
        "its JCTs are compared with --sim on the same workload.csv and loopback rates, not "
        "with the full-scale simulation.",
        f"aggregators and window of the BenchParams ({params.aggregators}, {params.window}) "
        f"are replaced by emu.aggregators and emu.window for the scaled-down jobs.",
    ]
    return parameters, {k: why for k in parameters}, notes


def emu_runner() -> Any:
    """A `PolicyRunner` that runs one policy in a fresh loopback service."""

    def run(jobs: Sequence[JobSpec], policy: str, params: BenchParams) -> PolicyRun:
        with tempfile.TemporaryDirectory(prefix="inasched-emu-") as tmp:
            return _run_policy(jobs, policy, params, Path(tmp))

    return run


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Service:
    """The service app in a uvicorn thread, and a tenant token for it."""

    def __init__(self, policy: str, params: BenchParams, data_dir: Path) -> None:
        try:
            import uvicorn

            from api.app import create_app
            from api.settings import Settings
            from api.store import create_tenant_token
        except ImportError as exc:
            raise EmuError(f"the service is not installed or incomplete: {exc}") from exc
        self.port = _free_port()
        settings = Settings.model_validate(
            dict(
                data_dir=data_dir,
                policy=policy,
                priority=params.priority,
                priority_levels=params.levels,
                aging_s=params.aging_s,
                aggregators=EMU_AGGREGATORS,
                lanes=params.lanes,
                window=EMU_WINDOW,
                seed=params.seed,
                port=self.port,
            )
        )
        app = create_app(settings)
        with app.state.service.sessions() as session:
            self.token = create_tenant_token(session, tenant="bench-jct")
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="emu-service", daemon=True)

    def __enter__(self) -> _Service:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise EmuError(f"the service did not start on port {self.port}")
            time.sleep(0.05)
        return self

    def __exit__(self, *_: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def _run_policy(
    jobs: Sequence[JobSpec], policy: str, params: BenchParams, data_dir: Path
) -> PolicyRun:
    workers: list[subprocess.Popen[bytes]] = []
    util: list[tuple[float, float]] = []
    with _Service(policy, params, data_dir) as svc:
        http = httpx.Client(
            base_url=svc.url, headers={"Authorization": f"Bearer {svc.token}"}, timeout=30
        )
        t0 = time.monotonic()
        ids: dict[int, int] = {}
        try:
            for job in jobs:
                _sleep_until(t0 + job.arrival_s, http, util, t0)
                created = _submit(http, job)
                ids[created["id"]] = job.job_id
                workers += _spawn_workers(svc.url, created, job)
            rows = _wait(http, ids, util, t0)
        finally:
            for proc in workers:
                if proc.poll() is None:
                    proc.terminate()
            for proc in workers:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
            http.close()
    specs = {j.job_id: j for j in jobs}
    outcomes = tuple(_outcome(policy, specs[ids[r["id"]]], r) for r in rows if r["jct_s"])
    span_util = util or [(0.0, 0.0)]
    return PolicyRun(
        policy, outcomes, tuple(util), time_average(span_util), len(jobs) - len(outcomes)
    )


def _submit(http: httpx.Client, job: JobSpec) -> dict[str, Any]:
    body = {
        "name": f"emu-{job.job_id}",
        "n_workers": job.workers,
        "iterations": job.iterations,
        "gradient_bytes": job.grad_bytes,
        "priority_class": min(15, job.priority_class),
    }
    resp = http.post("/jobs", json=body)
    if resp.status_code != 201:
        raise EmuError(f"POST /jobs refused job {job.job_id}: {resp.status_code} {resp.text}")
    created: dict[str, Any] = resp.json()
    return created


def _spawn_workers(
    url: str, created: dict[str, Any], job: JobSpec
) -> list[subprocess.Popen[bytes]]:
    """One worker process per worker of the job. The compute time of an iteration is the
    job's own (``--compute-s``); the gradient is the scaled size the service was told."""
    procs = []
    for _ in range(job.workers):
        cmd = [
            sys.executable,
            "-m",
            "workers.worker",
            "--service",
            url,
            "--job",
            str(created["id"]),
            "--token",
            str(created["join_token"]),
            "--compute-s",
            f"{job.iter_time_s:.6f}",
        ]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    return procs


def _sample_switch(http: httpx.Client, util: list[tuple[float, float]], t0: float) -> None:
    resp = http.get("/switch")
    if resp.status_code == 200:
        body = resp.json()
        busy = sum(run[1] for run in body.get("runs", []))
        util.append((time.monotonic() - t0, busy / max(1, body.get("aggregators", 1))))


def _sleep_until(t: float, http: httpx.Client, util: list[tuple[float, float]], t0: float) -> None:
    while time.monotonic() < t:
        _sample_switch(http, util, t0)
        time.sleep(min(POLL_S, max(0.0, t - time.monotonic())))


def _wait(
    http: httpx.Client, ids: dict[int, int], util: list[tuple[float, float]], t0: float
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while True:
        _sample_switch(http, util, t0)
        resp = http.get("/jobs", params={"limit": 1000})
        resp.raise_for_status()
        mine = [j for j in resp.json()["items"] if j["id"] in ids]
        if all(j["state"] in ("finished", "failed", "cancelled") for j in mine):
            return mine
        if time.monotonic() > deadline:
            stuck = sorted(j["id"] for j in mine if j["state"] not in ("finished", "failed"))
            raise EmuError(f"jobs {stuck} did not finish within {JOB_TIMEOUT_S:.0f} s")
        time.sleep(POLL_S)


def _ts(text: str | None) -> float:
    return datetime.fromisoformat(text).timestamp() if text else 0.0


def _outcome(policy: str, spec: JobSpec, row: dict[str, Any]) -> JobOutcome:
    submitted = _ts(row["submitted_at"])
    started = _ts(row.get("started_at")) or submitted
    return JobOutcome(
        policy=policy,
        job_id=spec.job_id,
        arrival_s=spec.arrival_s,
        start_s=spec.arrival_s + (started - submitted),
        finish_s=spec.arrival_s + float(row["jct_s"]),
        jct_s=float(row["jct_s"]),
        queue_s=started - submitted,
        compute_s=spec.iterations * spec.iter_time_s,
        workers=spec.workers,
        model=spec.model,
        grad_bytes=spec.grad_bytes,
        iterations=spec.iterations,
        bytes_switch=float(row["bytes_switch"]),
        bytes_ps=float(row["bytes_ps"]),
        preemptions_caused=int(row["preemptions_caused"]),
        preemptions_suffered=int(row["preemptions_suffered"]),
    )
