"""A running demo job for the live tests: submitted through the tenant API, with one
``inasched worker`` process per worker that joins it through the service and allreduces over
the software switch until the job is cancelled (exit 3) or the test ends."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

CLI = [sys.executable, "-m", "cli"]


@dataclass
class DemoJob:
    """Job `job` (its JobCreated JSON) and its worker processes, whose output goes to `log`."""

    url: str
    job: dict[str, Any]
    log: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def id(self) -> int:
        return int(self.job["id"])

    def start(self) -> DemoJob:
        cmd = CLI + ["worker", "--service", self.url, "--job", str(self.id)]
        cmd += ["--token", str(self.job["join_token"]), "--timeout", "30"]
        with open(self.log, "ab") as out:
            self.procs = [
                subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
                for _ in range(int(self.job["n_workers"]))
            ]
        return self

    def wait_for_exit(self, timeout_s: float) -> None:
        for proc in self.procs:
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return

    def close(self) -> list[int | None]:
        """Stops the workers still running; returns each one's exit status before that."""
        codes = [proc.poll() for proc in self.procs]
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return codes


def submit_demo_job(url: str, tenant_token: str, log: Path, **fields: Any) -> DemoJob:
    """Submits a job (2 workers, 64 KB gradient, effectively endless) and starts its workers."""
    body = {"name": "demo", "n_workers": 2, "iterations": 100_000, "gradient_bytes": 64 * 1024}
    body.update(fields)
    response = httpx.post(
        f"{url}/jobs", json=body, headers={"Authorization": f"Bearer {tenant_token}"}, timeout=30
    )
    response.raise_for_status()
    return DemoJob(url, response.json(), log).start()
