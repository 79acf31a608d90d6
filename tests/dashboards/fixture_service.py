"""A stand-in for the service's dashboard endpoints (docs/CONTRACTS.md, "Dashboard JSON").

It serves the real static files and fake, moving data: a few jobs of the tenant plus one job of
another tenant that holds switch memory, progress that advances on a timer, and cancel. The
browser tests against the real service check the same behaviour end to end; this one also
covers what a short demo cannot produce (preemption counters, drops, benchmark runs, every
job state). `create_fixture_app` also takes other jobs (`fixture_explain.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Header, HTTPException, Query
from fastapi.responses import StreamingResponse
from fastapi.staticfiles import StaticFiles

from dashboards import static_dir

TOKEN = "ina_t_fixture-token"
EMPTY_TOKEN = "ina_t_fixture-no-jobs"  # a tenant without jobs
AGGREGATORS = 1024
LANES = 64
TICK_S = 0.25
BAD_LENGTH_DROPS = 3
NOT_DECIDED = "waiting for the scheduler's next decision round"


@dataclass
class FakeJob:
    id: int
    name: str
    policy: str
    state: str
    iterations: int
    iterations_done: int = 0
    priority_level: int = 0
    n_workers: int = 4
    own: bool = True
    block: tuple[int, int] = (0, 0)  # aggregators it holds while running: start, length
    submitted_at: float = field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None
    history: list[dict[str, float]] = field(default_factory=list)
    reason: str | None = None
    queue_reason: dict[str, Any] | None = None
    stalled: bool = False  # running, but its iterations do not advance (0 B/s)

    def public(self) -> dict[str, Any]:
        def iso(t: float | None) -> str | None:
            return None if t is None else time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))

        done = self.iterations_done
        return {
            "id": self.id,
            "name": self.name,
            "state": self.state,
            "reason": self.reason,
            "queue_reason": self.queue_reason if self.state == "queued" else None,
            "policy": self.policy,
            "priority_level": self.priority_level,
            "n_workers": self.n_workers,
            "iterations": self.iterations,
            "iterations_done": done,
            "gradient_bytes": 4_000_000,
            "model": "resnet50",
            "submitted_at": iso(self.submitted_at),
            "started_at": iso(self.started_at),
            "finished_at": iso(self.finished_at),
            "jct_s": (
                self.finished_at - self.submitted_at
                if self.finished_at is not None and self.state == "finished"
                else None
            ),
            "bytes_switch": done * 3_000_000,
            "bytes_ps": done * 1_000_000,
            "preemptions_caused": done // 7,
            "preemptions_suffered": done // 11,
        }


class FakeService:
    """The fake's state; `tick` moves it on, `cancel` ends a job and frees its memory."""

    def __init__(
        self,
        jobs: list[FakeJob] | None = None,
        *,
        aggregators: int = AGGREGATORS,
        bench_run: dict[str, Any] | None = None,
        moving_ticks: int | None = None,
    ) -> None:
        now = time.time()
        self.moving_ticks = moving_ticks  # after this many ticks nothing moves (None: never)
        self.aggregators = aggregators
        self.bench_run = bench_run or BENCH_RUN
        self.jobs = {
            job.id: job
            for job in jobs
            or (
                FakeJob(
                    1,
                    "resnet50-esa",
                    "esa",
                    "running",
                    iterations=10_000,
                    iterations_done=40,
                    priority_level=5,
                    started_at=now - 30,
                    block=(0, 300),
                ),
                FakeJob(
                    2,
                    "bert-atp",
                    "atp",
                    "running",
                    iterations=500,
                    iterations_done=100,
                    priority_level=2,
                    started_at=now - 60,
                    block=(300, 200),
                ),
                FakeJob(
                    3,
                    "vgg-static",
                    "static",
                    "finished",
                    iterations=50,
                    iterations_done=50,
                    submitted_at=now - 200,
                    started_at=now - 190,
                    finished_at=now - 20,
                ),
                FakeJob(4, "gpt-queued", "esa", "queued", iterations=100),
                FakeJob(
                    7,
                    "other-tenant",
                    "esa",
                    "running",
                    iterations=1000,
                    iterations_done=10,
                    priority_level=1,
                    own=False,
                    started_at=now - 5,
                    block=(700, 100),
                ),
            )
        }
        for job in self.jobs.values():
            job.history = [
                {"t": now - 30, "level": 1},
                {"t": now - 10, "level": job.priority_level},
            ]
        self.counters = {"preempted": 0, "bypassed": 0, "dropped": 0}
        self.changed: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    def tick(self) -> None:
        if self.moving_ticks is not None:
            if self.moving_ticks == 0:
                return
            self.moving_ticks -= 1
        for job in self.jobs.values():
            if job.state == "running" and not job.stalled and job.iterations_done < job.iterations:
                job.iterations_done += 1
                if job.iterations_done == job.iterations:
                    job.state, job.finished_at = "finished", time.time()
                if job.own:
                    self.changed.put_nowait(job.public())
        self.counters = {k: v + i + 1 for i, (k, v) in enumerate(self.counters.items())}

    def switch(self) -> dict[str, Any]:
        runs = []
        for job in self.jobs.values():
            if job.state != "running":
                continue
            start, length = job.block
            # Partial, complete and flushed stretches, so every shade of the legend shows.
            third = length // 3
            runs += [
                [start, third, job.id, 1],
                [start + third, third, job.id, 2],
                [start + 2 * third, length - 2 * third, job.id, 3],
            ]
        per_job = {
            str(job.id): {
                "job_aggregated": job.iterations_done * 10,
                "job_bypassed": self.counters["bypassed"] if job.id == 2 else 0,
                "job_preempted": self.counters["preempted"] if job.id == 1 else 0,
                "job_evicted": self.counters["preempted"] if job.id == 2 else 0,
                "job_resent": 0,
                "job_dropped": 0,
            }
            for job in self.jobs.values()
        }
        return {
            "aggregators": self.aggregators,
            "lanes": LANES,
            "runs": runs,
            "counters": {
                "jobs": per_job,
                # Late packets of ended jobs (expected) and a few a misconfigured sender caused.
                "drops": {
                    "unknown_job": self.counters["dropped"],
                    "bad_length": BAD_LENGTH_DROPS,
                    "stale": 0,
                },
            },
        }

    def cancel(self, job_id: int) -> dict[str, Any]:
        job = self.jobs[job_id]
        job.state, job.finished_at = "cancelled", time.time()
        self.changed.put_nowait(job.public())
        return job.public()


def _bench_run() -> dict[str, Any]:
    """A stored run shaped as bench.jct.store posts it: summary.json and jobs.csv rows."""
    jcts = {
        policy: [round(base * (1 + (i * 37 % 23) / 10), 2) for i in range(40)]
        for policy, base in (("static", 40.0), ("atp", 30.0), ("esa", 22.0))
    }
    avg = {policy: sum(v) / len(v) for policy, v in jcts.items()}
    return {
        "id": 1,
        "created_at": "2024-05-01T10:00:00",
        "workload": "philly-64",
        "backend": "sim",
        "summary": {
            "policies": {
                p: {
                    "avg_jct": avg[p],
                    "p50_jct": 0.0,
                    "p95_jct": max(v) * 0.97,
                    "p99_jct": max(v),
                    "memory_utilisation": 0.5,
                    "in_switch_share": 0.8,
                }
                for p, v in jcts.items()
            },
            "ratios": {
                "esa_over_atp": avg["atp"] / avg["esa"],
                "esa_over_static": avg["static"] / avg["esa"],
            },
            "parameters": {},
        },
        "jobs": [
            {"policy": p, "job_id": i, "jct_s": jct, "workers": 4, "model": "resnet50"}
            for p, v in jcts.items()
            for i, jct in enumerate(v)
        ],
    }


BENCH_RUN = _bench_run()


def _tenant(authorization: str | None, token: str | None = None) -> bool:
    """True for the tenant that owns the fake's jobs, False for the one without jobs."""
    given = token or (authorization or "").removeprefix("Bearer ").strip()
    if given not in (TOKEN, EMPTY_TOKEN):
        raise HTTPException(401, "unknown API token")
    return given == TOKEN


def create_fixture_app(make_fake: Callable[[], FakeService] = FakeService) -> FastAPI:
    """The fake service: JSON endpoints, `/events`, and the dashboard's static files at `/`;
    `make_fake` builds its state."""
    fake = make_fake()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.fake = fake

        async def ticker() -> None:
            while True:
                await asyncio.sleep(TICK_S)
                fake.tick()

        task = asyncio.create_task(ticker())
        yield
        task.cancel()

    app = FastAPI(lifespan=lifespan)

    @app.get("/jobs")
    def list_jobs(
        authorization: str | None = Header(None),
        state: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> dict[str, Any]:
        own = _tenant(authorization)
        items = [
            j.public()
            for j in sorted(fake.jobs.values(), key=lambda j: -j.id)
            if own and j.own and (not state or j.state == state)
        ]
        return {"items": items[offset : offset + limit], "total": len(items)}

    @app.get("/limits")
    def limits(authorization: str | None = Header(None)) -> dict[str, Any]:
        return {
            "tenant": "alice" if _tenant(authorization) else "bob",
            "max_jobs": 256,
            "aggregator_share": 1.0,
            "max_priority_class": 7,
            "submit_rate": 20.0,
            "submit_burst": 200,
            "own": {},
        }

    @app.get("/queue")
    def queue(authorization: str | None = Header(None)) -> dict[str, Any]:
        own = _tenant(authorization)
        waiting = [j for j in fake.jobs.values() if own and j.own and j.state == "queued"]
        reasons = Counter(
            (why["kind"], why["message"])
            for why in (
                j.queue_reason or {"kind": "scheduling", "message": NOT_DECIDED} for j in waiting
            )
        )
        groups = [{"kind": k, "message": m, "jobs": n} for (k, m), n in reasons.most_common()]
        return {"total": len(waiting), "reasons": groups}

    @app.get("/jobs/{job_id}")
    def get_job(job_id: int, authorization: str | None = Header(None)) -> dict[str, Any]:
        _tenant(authorization)
        job = fake.jobs.get(job_id)
        if job is None or not job.own:
            raise HTTPException(404, f"job {job_id} does not exist")
        workers = [
            {
                "worker_id": w,
                "host": "127.0.0.1",
                "port": 40000 + w,
                "last_heartbeat": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 1)),
            }
            for w in range(job.n_workers if job.state == "running" else 0)
        ]
        return {**job.public(), "workers": workers, "priority_history": job.history}

    @app.post("/jobs/{job_id}/cancel")
    def cancel_job(job_id: int, authorization: str | None = Header(None)) -> dict[str, Any]:
        _tenant(authorization)
        job = fake.jobs.get(job_id)
        if job is None or not job.own:
            raise HTTPException(404, f"job {job_id} does not exist")
        if job.state in ("finished", "cancelled", "failed"):
            raise HTTPException(409, f"job {job_id} already {job.state}")
        return fake.cancel(job_id)

    @app.get("/switch")
    def get_switch(authorization: str | None = Header(None)) -> dict[str, Any]:
        _tenant(authorization)
        return fake.switch()

    @app.get("/bench/runs")
    def bench_runs(authorization: str | None = Header(None)) -> list[dict[str, Any]]:
        if not _tenant(authorization):
            return []  # the tenant without jobs has stored no run either
        return [{k: v for k, v in fake.bench_run.items() if k != "jobs"}]

    @app.get("/bench/runs/{run_id}")
    def bench_run(run_id: int, authorization: str | None = Header(None)) -> dict[str, Any]:
        _tenant(authorization)
        return fake.bench_run

    @app.get("/events")
    async def events(
        authorization: str | None = Header(None), token: str | None = Query(None)
    ) -> StreamingResponse:
        _tenant(authorization, token)

        async def stream() -> AsyncIterator[str]:
            sent = None
            while True:
                # As the service does: the switch view first, then whenever it changed.
                view = json.dumps(fake.switch())
                if view != sent:
                    yield f"event: switch\ndata: {view}\n\n"
                    sent = view
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.5):
                        while True:
                            job = await fake.changed.get()
                            yield f"event: job\ndata: {json.dumps(job)}\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    app.mount("/", StaticFiles(directory=static_dir(), html=True), name="dashboard")
    return app
