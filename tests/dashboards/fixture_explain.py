"""Jobs for the fake service that make the dashboard explain itself: a failed job with its
reason, jobs queued for each reason the scheduler gives, an admitted job without workers, a
finished job, 256 jobs in all (more than two pages), a switch pool of 4,096 aggregators that is
full, and a benchmark run with a long workload name."""

from __future__ import annotations

import time

from tests.dashboards.fixture_service import BENCH_RUN, FakeJob, FakeService

FAILED_REASON = "worker 1 sent no heartbeat for 12.0 s (timeout 10.0 s): the job failed"
SWITCH_IDS = "all 1,024 switch job ids in use"
PARTITION = "waiting for a partition of 256 slots (512 aggregators)"
LONG_WORKLOAD = "philly-week-2017-10-03-multi-gpu-jobs-with-resnet-bert-and-gpt2-sizes-" + (
    "x" * 60
)
ALL_JOBS = 256
AGGREGATORS = 4096
# The newest jobs, so that they are on the first page; jobs 1..250 are finished sweeps.
RUNNING, FAILED, QUEUED_FOR_ID, QUEUED_FOR_PARTITION, ADMITTED, FINISHED = range(251, 257)


def explaining_jobs() -> FakeService:
    now = time.time()
    jobs = [
        FakeJob(
            RUNNING,
            "fills-the-pool",
            "esa",
            "running",
            iterations=100_000,
            iterations_done=10,
            started_at=now - 30,
            block=(0, AGGREGATORS),
        ),
        FakeJob(
            FAILED,
            "diverged",
            "esa",
            "failed",
            iterations=500,
            iterations_done=120,
            submitted_at=now - 300,
            started_at=now - 290,
            finished_at=now - 100,
            reason=FAILED_REASON,
        ),
        FakeJob(
            QUEUED_FOR_ID,
            "waits-for-an-id",
            "esa",
            "queued",
            iterations=100,
            reason=SWITCH_IDS,
            queue_reason={"kind": "switch_job_ids", "message": SWITCH_IDS, "slots": None},
        ),
        FakeJob(
            QUEUED_FOR_PARTITION,
            "waits-for-a-partition",
            "static",
            "queued",
            iterations=100,
            reason=PARTITION,
            queue_reason={"kind": "partition", "message": PARTITION, "slots": 256},
        ),
        FakeJob(
            ADMITTED, "no-workers-yet", "esa", "admitted", iterations=100, submitted_at=now - 90
        ),
        FakeJob(
            FINISHED,
            "done",
            "atp",
            "finished",
            iterations=50,
            iterations_done=50,
            submitted_at=now - 200,
            started_at=now - 190,
            finished_at=now - 20,
        ),
    ]
    jobs += [
        FakeJob(
            i,
            f"sweep-{i}",
            "esa",
            "finished",
            iterations=10,
            iterations_done=10,
            submitted_at=now - 900 + i,
            started_at=now - 890 + i,
            finished_at=now - 600 + i,
        )
        for i in range(1, RUNNING)
    ]
    run = {**BENCH_RUN, "workload": LONG_WORKLOAD}
    return FakeService(jobs, aggregators=AGGREGATORS, bench_run=run)
