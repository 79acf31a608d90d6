"""Probe jobs on the loopback emulation: what an iteration and a job cost under each policy.

`c` probe jobs of `PROBE_WORKERS` workers (``--concurrency``, default `PROBE_JOBS`) that
compute for ``--probe-compute`` seconds per iteration, submitted together (staggered when they
compute), run for `K1` and `K2` iterations with the same service, soft switch, PS and worker
processes as the emulation (`bench.jct.emu`). The difference of the two
JCTs divided by ``K2 - K1`` is the per-iteration time, free of the per-job fixed cost, which is
the rest. `measure_rates` returns, per policy and for a one-fragment and a lone probe::

    {"probe_bytes", "probe_workers", "probe_jobs", "probe_compute_s",
     "static" | "atp" | "esa" | "overhead" | "static_alone":
         {"per_iteration_s", "fixed_s", "jct_s": [[short, long], ...], "iterations": [K1, K2],
          "fragments_per_s_per_worker"}}

`measure_occupancy` (``--skew``) samples how long aggregators stay partial under esa probes.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from bench.jct.emu import EMU_AGGREGATORS, EMU_WINDOW, EmuConfig, emu_config
from bench.jct.fabric import FabricSetting
from bench.jct.params import BenchParams
from scheduler.memory import COPIES_PER_SLOT, partition_slots
from scheduler.registry import policy_names
from scheduler.workload import JobSpec

__all__ = [
    "FRAGMENT_BYTES",
    "K1",
    "K2",
    "PROBE_COMPUTE",
    "PROBE_JOBS",
    "PROBE_MODEL",
    "PROBE_WORKERS",
    "measure_occupancy",
    "measure_rates",
    "probe_concurrency",
    "probe_jobs",
]

PROBE_WORKERS = 2

# As many probe jobs as the emulation's static partitions hold (256 aggregators, 64 per
# window of 32): the most jobs static runs at once, so no probe queues, and about as many as
# the emulated workload has in the system (about 5). The probes compute like its jobs
# (`PROBE_COMPUTE`), so they load the 2 cores as it does. Two probes that only communicated
# ranked esa first where the loopback ranks static first: they
# measure the shared policies' CPU cost per fragment at a load far below the workload's.
PROBE_JOBS = EMU_AGGREGATORS // (COPIES_PER_SLOT * partition_slots(EMU_WINDOW))
PROBE_COMPUTE = "workload"

# The model a probe with compute time runs as (``--probe-compute``): any row of the model table
# does, since the worker scales its compute time and gradient to the probe's.
PROBE_MODEL = "ResNet-50"
FRAGMENT_BYTES = 256  # 64 lanes of 4 B: the emulation's fragment payload
K1, K2 = 2, 22


def probe_jobs(
    grad_bytes: int, iterations: int, concurrent: int, compute_s: float = 0.0
) -> list[JobSpec]:
    """`concurrent` probe jobs of `PROBE_WORKERS` workers. Without compute they all arrive at
    0; with `compute_s` per iteration (a `PROBE_MODEL` job, so that the emulated worker
    sleeps that long) they arrive ``compute_s / concurrent`` apart, so that they do not
    compute and communicate in lockstep."""
    compute_s = max(0.0, compute_s)
    model = PROBE_MODEL if compute_s else "probe"
    gap = compute_s / concurrent
    return [
        JobSpec(i, i * gap, PROBE_WORKERS, model, grad_bytes, compute_s, iterations)
        for i in range(concurrent)
    ]


def probe_concurrency(config: EmuConfig) -> int:
    """How many probe jobs run together by default: as many as `config`'s pool holds static
    partitions (`PROBE_JOBS` for the default configuration)."""
    return max(1, config.aggregators // (COPIES_PER_SLOT * partition_slots(config.window)))


def _probe_jct(
    policy: str,
    grad_bytes: int,
    iterations: int,
    concurrent: int,
    compute_s: float = 0.0,
    config: EmuConfig | None = None,
    fabric: FabricSetting | None = None,
) -> float:
    """Mean JCT (s) of `concurrent` identical probe jobs submitted to the emulation (with
    `config`'s pool and window, the default configuration's when None; on `fabric`'s soft
    switches, placed as the fabric simulator places them, when given)."""
    from bench.jct.emu import emu_runner
    from bench.jct.emufabric import emu_fabric_runner

    jobs = probe_jobs(grad_bytes, iterations, concurrent, compute_s)
    runner = emu_runner(config) if fabric is None else emu_fabric_runner(fabric, config)
    run = runner(jobs, policy, BenchParams())
    if len(run.jobs) != concurrent:
        raise RuntimeError(f"the {policy} probe of {iterations} iterations did not finish")
    return statistics.fmean(j.jct_s for j in run.jobs)


def _per_iteration(
    policy: str,
    grad_bytes: int,
    repeat: int,
    concurrent: int,
    compute_s: float = 0.0,
    config: EmuConfig | None = None,
    fabric: FabricSetting | None = None,
) -> dict[str, Any]:
    """Per-iteration time and fixed cost per job of `concurrent` probes under `policy`."""
    per_iter, fixed, raw = [], [], []
    for _ in range(repeat):
        short = _probe_jct(policy, grad_bytes, K1, concurrent, compute_s, config, fabric)
        long = _probe_jct(policy, grad_bytes, K2, concurrent, compute_s, config, fabric)
        raw.append([short, long])
        step = (long - short) / (K2 - K1)
        per_iter.append(step)
        fixed.append(short - K1 * step)
    return {
        "per_iteration_s": statistics.median(per_iter),
        "fixed_s": statistics.median(fixed),
        "jct_s": raw,
        "iterations": [K1, K2],
        "fragments_per_s_per_worker": math.ceil(grad_bytes / FRAGMENT_BYTES)
        / statistics.median(per_iter),
    }


def measure_rates(
    grad_bytes: int,
    repeat: int,
    concurrent: int,
    compute_s: float = 0.0,
    config: EmuConfig | None = None,
    fabric: FabricSetting | None = None,
) -> dict[str, Any]:
    """Per-iteration allreduce time (s) and fixed cost per job (s) of `concurrent` probe jobs
    sharing the loopback, per policy; of a one-fragment probe (``overhead``: what an
    iteration costs besides its gradient's fragments); and of one static probe alone
    (``static_alone``: whether a lone job is held back by more than its share of the switch).
    The probes run on `config`'s pool and window (the default configuration's when None),
    which the rates record for the fit; on `fabric`'s soft switches when given."""
    cfg = config or emu_config("default")
    out: dict[str, Any] = {
        "probe_bytes": grad_bytes,
        "probe_workers": PROBE_WORKERS,
        "probe_jobs": concurrent,
        "probe_compute_s": compute_s,
        "emu_config": cfg.name,
        "aggregators": cfg.aggregators,
        "window": cfg.window,
    }
    if fabric is not None:
        out["topology"], out["placement"] = fabric.describe(), fabric.placement
    for policy in policy_names():
        out[policy] = _per_iteration(policy, grad_bytes, repeat, concurrent, compute_s, cfg, fabric)
    out["overhead"] = _per_iteration(
        "static", FRAGMENT_BYTES, repeat, concurrent, compute_s, cfg, fabric
    )
    if concurrent > 1:
        out["static_alone"] = _per_iteration(
            "static", grad_bytes, repeat, 1, compute_s, cfg, fabric
        )
    return out


def measure_occupancy(
    grad_bytes: int, concurrent: int, config: EmuConfig | None = None
) -> dict[str, Any]:
    """Mean share of the pool held by partial aggregators (state 1) while `concurrent` esa probe
    jobs run together, sampled from GET /switch: how long an aggregator waits for the last
    worker's contribution on this loopback (the simulator's ``worker_skew_s``)."""
    import bench.jct.emu as emu

    jobs = probe_jobs(grad_bytes, K2, concurrent)
    # esa's utilisation counts partial aggregators only (emu.occupancy_states).
    run = emu.emu_runner(config)(jobs, "esa", BenchParams())
    first_start = min(j.start_s for j in run.jobs)
    first_end = min(j.finish_s for j in run.jobs)
    samples = [v for t, v in run.utilisation if first_start <= t <= first_end]
    return {
        "live_share": statistics.fmean(samples) if samples else 0.0,
        "samples": len(samples),
        "probe_jobs": concurrent,
        "probe_bytes": grad_bytes,
    }
