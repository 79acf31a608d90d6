"""Store a finished JCT run in the service (``POST /bench/runs``) so the dashboard shows it.

The body is ``{"workload", "backend", "summary": <summary.json>, "jobs": [<rows of jobs.csv>]}``
(``api.schemas.BenchRunCreate``); the files stay in the output folder either way.
"""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path
from typing import Any

import httpx

__all__ = ["StoreError", "run_body", "store_run", "where_stored"]

log = logging.getLogger(__name__)


class StoreError(RuntimeError):
    """The service refused or could not be reached; the message says which and why."""


def run_body(folder: Path, workload: str, backend: str) -> dict[str, Any]:
    """The POST body for the run whose files are in `folder`."""
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    with open(folder / "jobs.csv", newline="", encoding="utf-8") as f:
        jobs = [_typed(row) for row in csv.DictReader(f)]
    return {"workload": workload, "backend": backend, "summary": summary, "jobs": jobs}


def _typed(row: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, text in row.items():
        try:
            number = float(text)
        except ValueError:
            out[key] = text
            continue
        out[key] = int(number) if number.is_integer() and "." not in text else number
    return out


def store_run(
    url: str,
    token: str,
    folder: Path,
    workload: str,
    backend: str,
    *,
    client: httpx.Client | None = None,
) -> dict[str, Any]:
    """POST the run to `url`; returns the stored run (``BenchRunPublic``)."""
    body = run_body(folder, workload, backend)
    own = client is None
    http = client or httpx.Client(base_url=url, timeout=60.0)
    try:
        resp = http.post("/bench/runs", json=body, headers={"Authorization": f"Bearer {token}"})
    except httpx.HTTPError as exc:
        raise StoreError(f"could not reach the service at {url}: {exc}") from exc
    finally:
        if own:
            http.close()
    if resp.status_code != 201:
        raise StoreError(f"the service at {url} refused the run: {resp.status_code} {resp.text}")
    stored: dict[str, Any] = resp.json()
    log.info("stored benchmark run %s in %s", stored.get("id"), url)
    return stored


def where_stored(out: Path, service: str | None, run_ids: list[object]) -> str:
    """The closing line of ``inasched bench jct``: the output folder, and the service runs
    `run_ids` stored in, or that the run was stored nowhere else."""
    if not service:
        return (
            f"output: {out} (stored nowhere else: with --service URL --token TOKEN the run "
            "also shows on that service's Benchmarks page)"
        )
    noun = "run" if len(run_ids) == 1 else "runs"
    ids = ", ".join(str(i) for i in run_ids)
    bench_page = f"{service.rstrip('/')}/#/bench"
    return f"output: {out}; stored in {service} as {noun} {ids} (Benchmarks page: {bench_page})"
