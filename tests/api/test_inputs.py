"""`api.coordinator.inputs` on values no HTTP request can make today: a job's totals near 2**63 from
worker rows stored before counters were bounded."""

from __future__ import annotations

import pytest

from api.coordinator.inputs import INT64_MAX, check_progress, padded_gradient_bytes
from api.errors import Invalid
from api.schemas import WorkerProgress
from api.store.models import Job, WorkerRow


def _job(*stored: int) -> Job:
    job = Job(id=7, n_workers=len(stored) + 1, iterations=3, gradient_bytes=1000)
    job.workers = [
        WorkerRow(worker_id=i, host="127.0.0.1", port=40000 + i, bytes_switch=b, bytes_ps=0)
        for i, b in enumerate(stored)
    ]
    reporting = WorkerRow(worker_id=len(stored), host="127.0.0.1", port=1, bytes_switch=0)
    reporting.bytes_ps = 0
    job.workers.append(reporting)
    return job


def test_a_fragment_pads_the_gradient_to_whole_lanes() -> None:
    assert padded_gradient_bytes(1000, 64) == 1024
    assert padded_gradient_bytes(1024, 64) == 1024


def test_a_report_that_would_overflow_the_jobs_total_is_refused() -> None:
    job = _job(INT64_MAX - 100)  # a legacy row of a worker
    report = WorkerProgress(iterations_done=1, bytes_switch=1024)
    with pytest.raises(Invalid, match="would exceed 2\\*\\*63 - 1"):
        check_progress(job, 1, report, lanes=64)


def test_a_report_within_what_the_job_can_receive_passes() -> None:
    check_progress(_job(1024), 1, WorkerProgress(iterations_done=3, bytes_switch=3072), lanes=64)
    with pytest.raises(Invalid, match="3072 bytes a worker of job 7"):
        check_progress(_job(0), 1, WorkerProgress(iterations_done=3, bytes_ps=3073), lanes=64)
