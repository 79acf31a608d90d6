"""The demo workload: a few small jobs submitted over HTTP, each with real worker processes.

Used by ``inasched up --demo`` (``make run``) and ``inasched demo``: the dashboard shows their
traffic while they run, and their JCTs are printed when they end.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

__all__ = ["DEMO_JOBS", "DemoJob", "run_demo", "spawn_workers"]

log = logging.getLogger(__name__)
TERMINAL = ("finished", "failed", "cancelled")


@dataclass(frozen=True, slots=True)
class DemoJob:
    name: str
    n_workers: int
    iterations: int
    gradient_bytes: int
    priority_class: int = 0


# About 90,000 fragments in all: well under a minute through the embedded soft switch on a
# 2-core laptop, with sizes different enough that the jobs' priorities differ.
DEMO_JOBS = (
    DemoJob("demo-small", 2, 30, 64 * 1024),
    DemoJob("demo-medium", 2, 30, 128 * 1024),
    DemoJob("demo-large", 2, 20, 256 * 1024, priority_class=1),
)


def spawn_workers(url: str, job: dict[str, Any]) -> list[subprocess.Popen[bytes]]:
    """Start one ``inasched worker`` process per worker of `job` (a `JobCreated` body)."""
    # Quiet: the demo reports each job as it ends; six workers' progress lines would bury it.
    cmd = [sys.executable, "-m", "cli", "worker", "--service", url, "--quiet"]
    cmd += ["--job", str(job["id"]), "--token", str(job["join_token"])]
    # A session of their own: Ctrl-C in the terminal reaches `inasched up`, which stops the
    # workers itself, instead of every worker printing its own KeyboardInterrupt.
    return [subprocess.Popen(cmd, start_new_session=True) for _ in range(int(job["n_workers"]))]


def run_demo(
    url: str,
    token: str,
    *,
    jobs: tuple[DemoJob, ...] = DEMO_JOBS,
    report: Callable[[str], None] = log.info,
    timeout_s: float = 600.0,
) -> dict[int, dict[str, Any]]:
    """Submit `jobs`, run their workers, wait for them to end; returns ``{job id: JobPublic}``
    and reports one line per job as it ends (with its JCT)."""
    procs: list[subprocess.Popen[bytes]] = []
    done: dict[int, dict[str, Any]] = {}
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
        try:
            ids = []
            for spec in jobs:
                response = http.post("/jobs", json=vars_of(spec))
                response.raise_for_status()
                created = response.json()
                ids.append(created["id"])
                report(f"submitted job {created['id']} {spec.name} ({spec.n_workers} workers)")
                procs += spawn_workers(url, created)
            deadline = time.monotonic() + timeout_s
            while len(done) < len(ids) and time.monotonic() < deadline:
                for job_id in ids:
                    if job_id in done:
                        continue
                    body = http.get(f"/jobs/{job_id}").json()
                    if body["state"] in TERMINAL:
                        done[job_id] = body
                        report(_line(body))
                time.sleep(0.2)
        finally:
            _stop(procs)
    return done


def vars_of(spec: DemoJob) -> dict[str, Any]:
    return {f: getattr(spec, f) for f in spec.__dataclass_fields__}


def _line(job: dict[str, Any]) -> str:
    if job["state"] == "finished":
        return f"job {job['id']} {job['name']}: finished, JCT {job['jct_s']:.2f} s"
    return f"job {job['id']} {job['name']}: {job['state']} ({job.get('reason') or ''})"


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
