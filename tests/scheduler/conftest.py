"""Factories shared by the scheduler tests."""

from __future__ import annotations

from scheduler.memory import JobState
from scheduler.snapshot import JobView
from scheduler.workload import JobSpec


def view(job_id: int, state: JobState = JobState.QUEUED, **fields: object) -> JobView:
    """A JobView with small defaults; `fields` override them."""
    values: dict[str, object] = {
        "arrival_s": float(job_id),
        "workers": 4,
        "grad_bytes": 1000,
        "iterations": 10,
    }
    values.update(fields)
    return JobView(job_id, state, **values)  # type: ignore[arg-type]


def spec(job_id: int, **fields: object) -> JobSpec:
    """A small JobSpec (32 fragments of 256 B, 10 iterations)."""
    values: dict[str, object] = {
        "arrival_s": 0.0,
        "workers": 2,
        "model": "small",
        "grad_bytes": 32 * 256,
        "iter_time_s": 1e-4,
        "iterations": 10,
    }
    values.update(fields)
    return JobSpec(job_id, **values)  # type: ignore[arg-type]
