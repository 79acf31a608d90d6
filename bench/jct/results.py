"""What one JCT run produces, and the statistics the report shows.

A back-end (simulator or emulation) turns a workload and one policy into a `PolicyRun`: one
`JobOutcome` per job plus memory utilisation over time. Everything in ``summary.json`` is
computed here from those rows, so the per-job CSV and the summary can never disagree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

import numpy as np

__all__ = [
    "DATAPLANE_COUNTERS",
    "CpuUse",
    "InaScore",
    "JOB_COLUMNS",
    "JobOutcome",
    "PolicyRun",
    "PolicySummary",
    "ratios",
    "summarise",
]


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """One job under one policy; times in seconds from the start of the run, bytes total.

    `compute_s` is the job's pure compute time (iterations x iteration time): the JCT it would
    have with free, instant communication and no queueing.
    """

    policy: str
    job_id: int
    arrival_s: float
    start_s: float
    finish_s: float
    jct_s: float
    queue_s: float
    compute_s: float
    workers: int
    model: str
    grad_bytes: int
    iterations: int
    bytes_switch: float
    bytes_ps: float
    preemptions_caused: int = 0
    preemptions_suffered: int = 0


JOB_COLUMNS = tuple(f.name for f in fields(JobOutcome))

# The switch's per-job counters (GET /switch) an --emu run sums per policy: contributions
# aggregated in the switch, sent to the PS by a collision, preempting, evicted, and resends.
DATAPLANE_COUNTERS = (
    "job_aggregated",
    "job_bypassed",
    "job_preempted",
    "job_evicted",
    "job_resent",
)


@dataclass(frozen=True, slots=True)
class PolicyRun:
    """A whole run of one policy.

    `utilisation` is ``(t, share of aggregators not free)`` points of a step function, for the
    plot; `memory_utilisation` its exact time average over the run; `unfinished` counts jobs
    that never finished (rejected, or cut off), which have no row in `jobs`; `refused` is
    ``(job_id, reason)`` of each rejected one (``--sim`` only). `ps_load`
    (``--sim`` only) is the PS processes' offered load as a share of their capacity;
    `dataplane` (``--emu`` only) the switch's per-job counters summed over the jobs
    (``job_aggregated``, ``job_bypassed``, ``job_preempted``, ``job_evicted``, ``job_resent``);
    `cpu` (``--emu`` only) the CPU the emulation used while its jobs ran.
    """

    policy: str
    jobs: tuple[JobOutcome, ...]
    utilisation: tuple[tuple[float, float], ...]
    memory_utilisation: float
    unfinished: int = 0
    ps_load: PsLoad | None = None
    dataplane: Mapping[str, int] | None = None
    cpu: CpuUse | None = None
    refused: tuple[tuple[int, str], ...] = ()
    #: ``--topology`` only: Mina's INA efficiency score (`bench.jct.fabric.ina_score`).
    ina: InaScore | None = None


@dataclass(frozen=True, slots=True)
class InaScore:
    """Mina's INA efficiency score of a fabric run and the host-weighted sums it is made of
    (`bench.jct.fabric.SCORE_DEFINITION`; `score` None when T_none = T_ina): run time from
    admission `t_s`, with exclusive INA `t_ina_s`, with none `t_none_s`; jobs spanning racks
    (`cross_rack`) and those of them that aggregated at their ToRs only for a while
    (`at_tors`)."""

    score: float | None
    t_s: float
    t_ina_s: float
    t_none_s: float
    cross_rack: int
    at_tors: int


@dataclass(frozen=True, slots=True)
class CpuUse:
    """CPU seconds an ``--emu`` run used from its first job's submission until its last job
    ended: `service_s` by the service process (REST, scheduler, soft switch, PS and the
    harness's polling: all threads of one process), `workers_s` by the worker processes,
    over `span_s` seconds of wall time on `cores` cores."""

    service_s: float
    workers_s: float
    span_s: float
    cores: int

    @property
    def busy_share(self) -> float:
        """The share of the machine's cores the emulation kept busy (0-1)."""
        capacity = self.span_s * self.cores
        return (self.service_s + self.workers_s) / capacity if capacity > 0 else 0.0


@dataclass(frozen=True, slots=True)
class PsLoad:
    """Time averages of the PS processes' offered load over a run, as shares of their capacity:
    `critical` (packets a job waits for) and `copies` (esa's completion copies, which wait
    for nothing); `copies_over` is the share of the run's time with copies above capacity."""

    critical: float
    copies: float
    copies_over: float


@dataclass(frozen=True, slots=True)
class PolicySummary:
    """The numbers ``summary.json`` holds for one policy (seconds, fractions)."""

    avg_jct: float
    p50_jct: float
    p95_jct: float
    p99_jct: float
    memory_utilisation: float
    in_switch_share: float

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def time_average(series: Sequence[tuple[float, float]]) -> float:
    """Time-weighted mean of a step function given as ``(t, value)`` points (value holds until
    the next point); the plain mean when all points share one time; 0 when empty."""
    if not series:
        return 0.0
    t = np.array([p[0] for p in series], dtype=float)
    v = np.array([p[1] for p in series], dtype=float)
    span = t[-1] - t[0]
    if span <= 0:
        return float(v.mean())
    return float(np.sum(v[:-1] * np.diff(t)) / span)


def summarise(run: PolicyRun) -> PolicySummary:
    """Average and percentiles of JCT, time-averaged utilisation, share of bytes in the switch."""
    rows = list(run.jobs)
    if not rows:
        raise ValueError("no finished jobs to summarise")
    jct = np.array([r.jct_s for r in rows], dtype=float)
    switch = sum(r.bytes_switch for r in rows)
    total = switch + sum(r.bytes_ps for r in rows)
    return PolicySummary(
        avg_jct=float(jct.mean()),
        p50_jct=float(np.percentile(jct, 50)),
        p95_jct=float(np.percentile(jct, 95)),
        p99_jct=float(np.percentile(jct, 99)),
        memory_utilisation=run.memory_utilisation,
        in_switch_share=switch / total if total > 0 else 0.0,
    )


def ratios(summaries: Mapping[str, PolicySummary]) -> dict[str, float | None]:
    """Baseline average JCT / esa average JCT (>1: esa is faster); None when not run."""
    esa = summaries.get("esa")
    out: dict[str, float | None] = {}
    for base in ("atp", "static"):
        other = summaries.get(base)
        ok = esa is not None and other is not None and esa.avg_jct > 0
        out[f"esa_over_{base}"] = other.avg_jct / esa.avg_jct if ok else None  # type: ignore[union-attr]
    return out


def finite(x: float | None) -> float | None:
    """`x` if it is a finite number (JSON has no inf/nan), else None."""
    return x if x is not None and math.isfinite(x) else None
