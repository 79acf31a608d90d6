"""The ``--emu`` back-end: the real service, soft switch, PS and worker processes on loopback.

For each policy a fresh service (``api.http.app.create_app``, embedded soft switch and PS, its
own SQLite store) is served by uvicorn in a thread of this process. Jobs are submitted over
REST at their (time-compressed) arrival times; each job's workers are ``inasched worker``
processes, started and warmed before the first submission so interpreter start-up is not in
any JCT, scaled with ``--scale`` and ``--compute-scale``. JCTs are read back from the store
(``jct_s`` = finished - submitted); ``GET /switch`` is polled for memory utilisation.

The workload is scaled down so a run takes minutes on 2 cores (`emu_workload`) and written to
the output folder as ``workload.csv``, so that ``--sim`` can run the same jobs. Configurations
(``--emu-config``, `EMU_CONFIGS`): ``default``, gradients large enough that an allreduce is a
visible share of a JCT, which the loopback's CPU binds; ``memory`` (`MEMORY`), 4x smaller
gradients and a pool of ``jobs x window x MEMORY_SHARE``, so that jobs contend for aggregator
memory while the cores stay mostly idle. Figures: ``docs/evaluation.md``.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench.jct.params import BenchParams
from bench.jct.results import (
    DATAPLANE_COUNTERS,
    CpuUse,
    JobOutcome,
    PolicyRun,
    time_average,
)
from scheduler.registry import policy_class
from scheduler.workload import JobSpec, load_workload

__all__ = [
    "EMU_CONFIGS",
    "MEMORY",
    "EmuConfig",
    "EmuError",
    "emu_config",
    "emu_context",
    "emu_runner",
    "emu_workload",
]

log = logging.getLogger(__name__)

EMU_JOBS = 8
EMU_WORKERS = 2
EMU_ITERATIONS = 10
# 100 MB of fp32 gradient -> 25 kB; the table's models become 6.6-336 kB, 26-1300 fragments of
# 256 B per worker and iteration: the soft switch, PS and workers share 2 busy cores and turn
# around a few thousand fragments per second (measured: bench.jct.validate). atp and esa
# differ only in how long an allreduce takes, so it must be a share of the JCT that shows:
# at 10,000 the two were within 2% and swapped places between runs; at 4,000 they are 10-12%
# apart.
GRAD_DIVISOR = 4_000
# Arrivals close enough that jobs overlap (about 5 in the system at once): static partitions
# run out and queue, atp and esa share the pool, so the policies differ by more than the
# loopback's noise (at 2 s, 2-3 jobs overlapped and the three were within 6% of each other).
ARRIVAL_GAP_S = 0.5
# A pool small enough that 8 scaled-down jobs of 2 workers contend for it: 8 windows of 32
# fragments are 256 aggregators (the full workload contends for a Tofino's with many more jobs).
EMU_AGGREGATORS = 256
EMU_WINDOW = 32
JOB_TIMEOUT_S = 900.0
POLL_S = 0.5
# Seconds a worker waits for a result before it gives up (exit 4); loopback on a busy
# 2-core machine stalls for seconds at a time.
WORKER_TIMEOUT_S = 60.0
# Seconds for every pre-started worker process to finish its imports.
WORKER_START_S = 120.0


@dataclass(frozen=True, slots=True)
class EmuConfig:
    """How the emulation scales a workload down, and the pool and window of its switch."""

    name: str
    jobs: int
    max_workers: int
    max_iterations: int
    grad_divisor: int
    arrival_gap_s: float
    aggregators: int
    window: int
    why: str
    compute_divisor: float = 1.0

    def parameters(self) -> dict[str, Any]:
        """The ``emu.*`` parameters a report lists."""
        return {
            "emu.config": self.name,
            "emu.jobs": self.jobs,
            "emu.max_workers": self.max_workers,
            "emu.max_iterations": self.max_iterations,
            "emu.grad_divisor": self.grad_divisor,
            "emu.compute_divisor": self.compute_divisor,
            "emu.arrival_gap_s": self.arrival_gap_s,
            "emu.aggregators": self.aggregators,
            "emu.window": self.window,
            "emu.worker_timeout_s": WORKER_TIMEOUT_S,
        }


def _default() -> EmuConfig:
    # Read at call time, so that a test can shrink the default run through the constants.
    return EmuConfig(
        "default",
        EMU_JOBS,
        EMU_WORKERS,
        EMU_ITERATIONS,
        GRAD_DIVISOR,
        ARRIVAL_GAP_S,
        EMU_AGGREGATORS,
        EMU_WINDOW,
        "jobs contend for the loopback's CPU; scaled so a run takes minutes on 2 cores",
    )


# The ``memory`` configuration. Its scaling: the pool is a fixed share of what the jobs ask
# for, aggregators = jobs x window x MEMORY_SHARE, so it shrinks and grows with the number of
# jobs emulated, as a Tofino's 16,384 aggregators do against the full workload's demand.
# The same 8 jobs of 2 workers and 10 iterations as the default: only the data sent and the pool
# change, so the two configurations differ in what binds and in nothing else.
MEMORY_JOBS = 8
# A job's window, as the default's: 32 fragments of 256 B in flight per worker.
MEMORY_WINDOW = 32
# Half the jobs' windows: 128 aggregators, two static partitions (a window of 32 takes 32 slots
# of two copies), so static runs 2 of the 8 jobs at a time and the other 6 wait for memory, while
# atp and esa share the 128 among the jobs communicating at that moment (most of the time a
# job computes, which holds no shared memory).
MEMORY_SHARE = 0.5
MEMORY = EmuConfig(
    "memory",
    jobs=MEMORY_JOBS,
    max_workers=2,
    max_iterations=10,
    # 4x less than the default's 4,000: 1.6-84 kB per worker and iteration (7-330 fragments),
    # so the loopback turns it around with its cores mostly idle (the runs' CPU busy share:
    # 0.2-0.6 of 2 cores, bench/results/emu-memory).
    grad_divisor=16_000,
    # All 8 jobs within 1.75 s, so they overlap and static's two partitions are the bottleneck.
    arrival_gap_s=0.25,
    aggregators=int(MEMORY_JOBS * MEMORY_WINDOW * MEMORY_SHARE),
    window=MEMORY_WINDOW,
    why="jobs contend for aggregator memory: aggregators = jobs x window x MEMORY_SHARE",
)


def emu_config(name: str) -> EmuConfig:
    """The configuration called `name` (``--emu-config``); ValueError names the known ones."""
    if name == "default":
        return _default()
    if name == MEMORY.name:
        return MEMORY
    raise ValueError(f"unknown emulation configuration {name!r}; known: {', '.join(EMU_CONFIGS)}")


EMU_CONFIGS = ("default", MEMORY.name)


class EmuError(RuntimeError):
    """The emulation could not run; the message says which part failed and why."""


def emu_workload(name: str, seed: int, config: EmuConfig | None = None) -> tuple[JobSpec, ...]:
    """The scaled-down, time-compressed version of workload `name` under `config` (the
    default configuration when None; see module docstring)."""
    cfg = config or _default()
    jobs = load_workload(name, seed)[: cfg.jobs]
    return tuple(
        replace(
            j,
            arrival_s=i * cfg.arrival_gap_s,
            workers=min(j.workers, cfg.max_workers),
            # Whole fp32 elements: the service takes a gradient of whole floats only.
            grad_bytes=max(1024, j.grad_bytes // cfg.grad_divisor // 4 * 4),
            iter_time_s=j.iter_time_s / cfg.compute_divisor,
            iterations=min(j.iterations, cfg.max_iterations),
        )
        for i, j in enumerate(jobs)
    )


def emu_context(
    params: BenchParams, config: EmuConfig | None = None
) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """Extra parameters (with sources) and notes the report of an emulation shows."""
    cfg = config or _default()
    parameters = cfg.parameters()
    why = f"bench.jct.emu, --emu-config {cfg.name}: {cfg.why} (module docstring)"
    notes = [
        "The emulation runs on loopback: its link is a Python soft switch, not 100 Gbps, so "
        "its JCTs are compared with --sim on the same workload.csv and loopback rates, not "
        "with the full-scale simulation.",
        f"aggregators and window of the BenchParams ({params.aggregators}, {params.sim.window}) "
        f"are replaced by emu.aggregators and emu.window ({cfg.aggregators}, {cfg.window}) "
        "for the scaled-down jobs.",
        "JCTs are the service's (job store, jct_s = finished_at - submitted_at): they include "
        "each job's join and per-iteration progress reports over REST; the service embeds one "
        "soft switch and one PS process shared by every job. bench.jct.validate measures "
        "these (job_setup_s, iteration_overhead_s, switch_pps, ps_gbps with ps_processes=1) "
        "and runs --sim with them on this workload.csv.",
        "Byte counters are the workers' sums (every worker's contribution), and a result that "
        "returns through the PS (every atp fragment) counts as PS bytes, so in_switch_share "
        "is 0 for atp here while --sim counts atp's switch-aggregated bytes as in-switch.",
    ]
    return parameters, {k: why for k in parameters}, notes


def emu_runner(config: EmuConfig | None = None, hosts: Sequence[str] = ()) -> Any:
    """A `PolicyRunner` that runs one policy in a fresh loopback service whose switch has
    `config`'s pool and window (the default configuration's when None). With `hosts`, the
    workers bind those data addresses, one each in submission order (a switch with real ports,
    such as BMv2 behind a veth pair per endpoint: ``p4/README.md``); the service's switch and
    PS then come from the ``INASCHED_SWITCH_*`` and ``INASCHED_PS_*`` settings."""

    def run(jobs: Sequence[JobSpec], policy: str, params: BenchParams) -> PolicyRun:
        cfg = config or _default()
        needed = sum(job.workers for job in jobs)
        if hosts and len(hosts) < needed:
            raise EmuError(f"{len(hosts)} worker hosts for {needed} workers: give one each")
        with tempfile.TemporaryDirectory(prefix="inasched-emu-") as tmp:
            return _run_policy(jobs, policy, params, cfg, Path(tmp), hosts)

    return run


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Service:
    """The service app in a uvicorn thread, and a tenant token for it."""

    def __init__(
        self,
        policy: str,
        params: BenchParams,
        config: EmuConfig,
        data_dir: Path,
        topology: Path | None = None,
    ) -> None:
        try:
            import uvicorn

            from api.http.app import create_app
            from api.settings import Settings
            from api.store.crud import create_tenant_token
        except ImportError as exc:
            raise EmuError(f"the service is not installed or incomplete: {exc}") from exc
        self.port = _free_port()
        settings = Settings.model_validate(
            dict(
                data_dir=data_dir,
                policy=replace(params.sim.spec, policy=policy),
                # On a fabric every switch is sized by the topology file.
                switch={"aggregators": config.aggregators, "lanes": params.lanes}
                | ({"topology": topology} if topology is not None else {}),
                window=config.window,
                seed=params.sim.seed,
                http={"port": self.port},
                # The harness's one tenant stands for a whole cluster's: no tenant limits.
                tenant={
                    "max_priority_class": 15,
                    "submit_rate": 1e6,
                    "submit_burst": 1_000_000,
                },
            )
        )
        app = create_app(settings)
        with app.state.service.sessions() as session:
            self.token = create_tenant_token(session, tenant="bench-jct")
        self.url = f"http://127.0.0.1:{self.port}"
        server_config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(server_config)
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


def occupancy_states(policy: str) -> tuple[int, ...]:
    """Aggregator states (GET /switch runs: 1 partial, 2 complete, 3 flushed) counted as
    occupied in `policy`'s memory utilisation: those another job's fragment cannot claim, as
    --sim counts them. A partition is its job's in every state; with early release (esa) a
    complete aggregator is claimable at once (p4/PROTOCOL.md, section 5), so only partial sums
    hold memory; otherwise (atp) a complete sum holds its aggregator until the PS result."""
    traits = policy_class(policy)
    if not traits.shared:
        return (1, 2, 3)
    return (1,) if traits.early_release else (1, 2)


def _run_policy(
    jobs: Sequence[JobSpec],
    policy: str,
    params: BenchParams,
    config: EmuConfig,
    data_dir: Path,
    hosts: Sequence[str] = (),
    topology: Path | None = None,
) -> PolicyRun:
    util: list[tuple[float, float]] = []
    counters: dict[str, list[dict[str, int]]] = {}
    occupied = occupancy_states(policy)
    warm: dict[int, list[_Warm]] = {}
    try:
        for job in jobs:
            warm[job.job_id] = [
                _Warm(data_dir / f"worker-{job.job_id}-{w}.log") for w in range(job.workers)
            ]
        deadline = time.monotonic() + WORKER_START_S
        for procs in warm.values():
            for p in procs:
                p.wait_ready(deadline)
        with _Service(policy, params, config, data_dir, topology) as svc:
            http = httpx.Client(
                base_url=svc.url, headers={"Authorization": f"Bearer {svc.token}"}, timeout=30
            )
            try:
                t0 = time.monotonic()
                clock = _CpuClock([p for procs in warm.values() for p in procs])

                def sample() -> None:
                    _sample_switch(http, util, t0, occupied, counters)

                # The service runs in this process: its wall clock is this one.
                t0_wall = time.time()
                ids: dict[int, int] = {}
                free_hosts = iter(hosts)
                for job in jobs:
                    _sleep_until(t0 + job.arrival_s, sample)
                    created = _submit(http, job)
                    ids[created["id"]] = job.job_id
                    for p in warm[job.job_id]:
                        host = next(free_hosts, None)
                        p.go(_worker_argv(svc.url, created, job, host))
                rows = _wait(http, ids, sample, warm)
                span_s = time.monotonic() - t0
                service_s = time.process_time() - clock.service_s
            finally:
                http.close()
    finally:
        _stop_all([p for procs in warm.values() for p in procs])
    cpu = CpuUse(service_s, clock.workers_since(), span_s, os.cpu_count() or 1)
    specs = {j.job_id: j for j in jobs}
    outcomes = tuple(_outcome(policy, specs[ids[r["id"]]], r, t0_wall) for r in rows if r["jct_s"])
    span_util = util or [(0.0, 0.0)]
    return PolicyRun(
        policy,
        outcomes,
        tuple(util),
        time_average(span_util),
        len(jobs) - len(outcomes),
        dataplane=_dataplane(counters),
        cpu=cpu,
    )


class _CpuClock:
    """CPU counters at the first submission, so that `CpuUse` leaves out the workers' start-up.

    The service's threads are this process's (``time.process_time``). The workers are its
    children: their CPU is read from ``getrusage(RUSAGE_CHILDREN)`` once they have been
    reaped (after `_stop_all`), less what each had used by the first submission (its imports,
    read from ``/proc/PID/stat`` while it waits for its arguments)."""

    def __init__(self, workers: Sequence[_Warm]) -> None:
        self.service_s = time.process_time()
        self.children_s = _children_cpu()
        self.start_up_s = sum(_proc_cpu(p.proc.pid) for p in workers)

    def workers_since(self) -> float:
        """The workers' CPU seconds since this clock started (call after they are reaped)."""
        return max(0.0, _children_cpu() - self.children_s - self.start_up_s)


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _proc_cpu(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (0 if it is gone: Linux ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stop_all(procs: list[_Warm]) -> None:
    for p in procs:
        if p.proc.poll() is None:
            p.proc.terminate()
    for p in procs:
        try:
            p.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.proc.kill()
            p.proc.wait()
        for pipe in (p.proc.stdin, p.proc.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()


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


def _worker_args(job: JobSpec) -> list[str]:
    """``inasched worker`` options that make a worker of `job` compute for ``job.iter_time_s``
    per iteration and allreduce ``job.grad_bytes``: the worker sizes both from its model's row
    of the model table, times ``--compute-scale`` and ``--scale``. A model the table does not
    know gets no compute time (the worker's behaviour), and its gradient from the join."""
    from workers.worker import model_cost

    cost = model_cost(job.model) if job.model else None
    if cost is None:
        return []
    full_bytes, full_iter_s = cost
    return [
        "--model",
        job.model,
        "--scale",
        repr(job.grad_bytes / full_bytes),
        "--compute-scale",
        repr(job.iter_time_s / full_iter_s if full_iter_s else 0.0),
    ]


# A worker process imported before its job exists: it prints "ready", reads its
# ``inasched worker`` arguments (one JSON line) from stdin and runs ``workers.worker.main``.
# Starting Python, numpy and httpx takes seconds on a busy 2-core machine; without this that
# start-up would be counted in every job's JCT (the job store's clock starts at submission).
_LAUNCHER = (
    "import json, sys\n"
    "import workers.worker as w\n"
    "print('ready', flush=True)\n"
    "line = sys.stdin.readline()\n"
    "sys.exit(w.main(json.loads(line)) if line.strip() else 0)\n"
)


class _Warm:
    """One pre-started worker process, waiting for its arguments."""

    def __init__(self, log_path: Path) -> None:
        with open(log_path, "wb") as err:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _LAUNCHER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
            )
        self.log_path = log_path

    def wait_ready(self, deadline: float) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # blocks until the imports are done
        if line.strip() != b"ready" or time.monotonic() > deadline:
            raise EmuError(f"worker process did not start: {self.log_path.read_text()[-2000:]}")

    def go(self, argv: list[str]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(argv) + "\n").encode())
        self.proc.stdin.close()


def _worker_argv(
    url: str, created: dict[str, Any], job: JobSpec, host: str | None = None
) -> list[str]:
    return [
        *(["--host", host] if host else []),
        "--service",
        url,
        "--job",
        str(created["id"]),
        "--token",
        str(created["join_token"]),
        "--timeout",
        str(WORKER_TIMEOUT_S),
        "--quiet",  # nothing reads the worker's stdout after "ready": its pipe would fill
        *_worker_args(job),
    ]


def _sample_switch(
    http: httpx.Client,
    util: list[tuple[float, float]],
    t0: float,
    occupied: tuple[int, ...],
    counters: dict[str, list[dict[str, int]]],
) -> None:
    """One ``GET /switch``: a memory utilisation point, and each installed job's counters.
    They are cumulative, so a job's latest sample replaces its earlier ones; they are keyed by
    switch job id, which a later job may reuse (its counters start again from zero)."""
    resp = http.get("/switch")
    if resp.status_code == 200:
        body = resp.json()
        runs = body.get("runs", [])
        busy = sum(run[1] for run in runs if len(run) < 4 or run[3] in occupied)
        util.append((time.monotonic() - t0, busy / max(1, body.get("aggregators", 1))))
        for job, values in body.get("counters", {}).get("jobs", {}).items():
            now = {k: int(v) for k, v in values.items() if k in DATAPLANE_COUNTERS}
            seen = counters.setdefault(str(job), [])
            if seen and now.get("job_aggregated", 0) >= seen[-1].get("job_aggregated", 0):
                seen[-1] = now
            else:
                seen.append(now)


def _dataplane(counters: dict[str, list[dict[str, int]]]) -> dict[str, int]:
    """The counters summed over every job seen (sampled every `POLL_S`, so a job's packets
    after its last sample are missed: a lower bound)."""
    every = [c for seen in counters.values() for c in seen]
    return {k: sum(c.get(k, 0) for c in every) for k in DATAPLANE_COUNTERS}


def _sleep_until(t: float, sample: Callable[[], None]) -> None:
    while time.monotonic() < t:
        sample()
        time.sleep(min(POLL_S, max(0.0, t - time.monotonic())))


def _wait(
    http: httpx.Client,
    ids: dict[int, int],
    sample: Callable[[], None],
    warm: dict[int, list[_Warm]],
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while True:
        sample()
        resp = http.get("/jobs", params={"limit": 500})
        resp.raise_for_status()
        mine = [j for j in resp.json()["items"] if j["id"] in ids]
        if len(mine) == len(ids) and all(
            j["state"] in ("finished", "failed", "cancelled") for j in mine
        ):
            return mine
        for procs in warm.values():
            for p in procs:
                code = p.proc.poll()
                if code not in (None, 0):
                    raise EmuError(
                        f"a worker exited with status {code}: "
                        f"{p.log_path.read_text(errors='replace')[-2000:]}"
                    )
        if time.monotonic() > deadline:
            stuck = sorted(j["id"] for j in mine if j["state"] not in ("finished", "failed"))
            raise EmuError(f"jobs {stuck} did not finish within {JOB_TIMEOUT_S:.0f} s")
        time.sleep(POLL_S)


def _ts(text: str | None) -> float:
    return datetime.fromisoformat(text).timestamp() if text else 0.0


def _outcome(policy: str, spec: JobSpec, row: dict[str, Any], t0_wall: float) -> JobOutcome:
    """The job as the service reports it (`row`); the run began at `t0_wall` (epoch s).

    Start and finish are the service's own stamps, from the run's start: counted from the
    job's planned arrival instead, a job the loaded harness sent late (by 0.15 s in one CI
    run) seemed to start earlier than it did, and the third job of a pool of two partitions
    before either of the first two finished."""
    submitted = _ts(row["submitted_at"])
    started = _ts(row.get("started_at")) or submitted
    return JobOutcome(
        policy=policy,
        job_id=spec.job_id,
        arrival_s=spec.arrival_s,
        start_s=started - t0_wall,
        finish_s=submitted + float(row["jct_s"]) - t0_wall,
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
