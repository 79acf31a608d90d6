"""`SimConfig` (the network both simulators model) and `RunResult` (what a run reports)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from scheduler.jobs import JobResult
from scheduler.memory import DEFAULT_WINDOW, Pool
from scheduler.spec import PolicySpec

__all__ = [
    "HEADER_BYTES",
    "PER_JOB",
    "REORDER",
    "PsProcesses",
    "RunResult",
    "SimConfig",
    "UtilSample",
]

# 24-byte aggregation header (p4ctl.protocol.HEADER_SIZE) + UDP/IPv4/Ethernet with FCS.
HEADER_BYTES = 24 + 8 + 20 + 18

#: The worker client's fast retransmit (`workers.burst_io.REORDER`): a fragment overtaken by
#: more than this many later results, and older than twice the smoothed RTT, is resent at
#: once; one fewer than that from its iteration's end, only its timeout resends it.
REORDER = 8

#: `SimConfig.ps_processes` value for ATP's own deployment: one PS process per job.
PER_JOB = "per-job"
PsProcesses = int | Literal["per-job"]


@dataclass(frozen=True, slots=True)
class SimConfig:
    """The simulated policy (`spec`), switch, links and PS. Times in seconds, rates in bits
    per second.

    `worker_skew_s`: each worker of a job starts an iteration's allreduce up to this much later
    than the first (uniform), so an aggregator stays partial until the last one arrives.

    `ps_processes`: how many PS processes serve the jobs. 1 (default) is the architecture's
    ``inasched ps``, one UDP process serving every job; ``k`` processes serve job ``j`` on
    process ``j mod k``; ``"per-job"`` gives each job its own (ATP's deployment). Each process
    is one server of rate `ps_bps` (one packet per `ps_fragment_s`) with a queue; packets on a
    job's critical path (bypassed, evicted and flushed contributions; atp's complete sums) are
    served before esa's completion copies, which nothing waits for.

    `job_setup_s`: time from a job's admission to its first iteration (its workers join and
    the switch is programmed); the job holds its admission but sends nothing meanwhile.
    `iteration_overhead_s`: time after each iteration's allreduce before the next compute
    starts, the last iteration's included (a worker's blocking progress report to the
    service). Both are 0 for the model of a hardware testbed; ``bench.jct.validate`` measures
    them on the loopback emulation.

    `switch_pps`: packets per second the switch processes, shared by every job (0: line rate,
    as a hardware pipeline; a software switch is one CPU). A worker's first retransmission
    timeout then also allows for a switch queue of 64 windows. `ps_switch_cost`: switch
    packet-times each packet the PS receives takes on the switch's processor (0: the PS is a
    host of its own; on loopback the service's PS shares the CPU with the soft switch, and a
    PS packet costs more than a switch packet, so each takes ``ps_switch_cost / switch_pps``).
    """

    spec: PolicySpec = field(default_factory=PolicySpec)
    pool: Pool = field(default_factory=Pool)
    window: int = DEFAULT_WINDOW
    link_bps: float = 100e9
    link_latency_s: float = 1e-6
    switch_latency_s: float = 0.5e-6
    ps_bps: float = 20e9
    ps_processes: PsProcesses = 1
    loss_rate: float = 0.0
    worker_skew_s: float = 5e-6
    #: A worker's first retransmission timeout; None: 20 round trips through the PS.
    resend_timeout_s: float | None = None
    #: Priorities are recomputed every time a job completes this share of its iterations.
    progress_step: float = 0.1
    seed: int = 0
    job_setup_s: float = 0.0
    iteration_overhead_s: float = 0.0
    switch_pps: float = 0.0
    ps_switch_cost: float = 0.0

    def __post_init__(self) -> None:
        if self.ps_processes != PER_JOB and (
            not isinstance(self.ps_processes, int) or self.ps_processes < 1
        ):
            raise ValueError(f"ps_processes must be >= 1 or {PER_JOB!r}, got {self.ps_processes!r}")
        if not self.window >= 1:
            raise ValueError(f"window must be >= 1, got {self.window!r}")
        for name in ("job_setup_s", "iteration_overhead_s", "switch_pps", "ps_switch_cost"):
            # `not 0 <= x` also refuses NaN; an infinite time or rate is no setting either.
            if not 0 <= getattr(self, name) < math.inf:
                raise ValueError(f"{name} must be a number >= 0, got {getattr(self, name)!r}")

    def ps_of(self, job_id: int) -> int:
        """The PS process (a server id) that serves `job_id`."""
        if self.ps_processes == PER_JOB:
            return job_id
        assert isinstance(self.ps_processes, int)
        return job_id % self.ps_processes

    @property
    def payload_bytes(self) -> int:
        """Gradient bytes per fragment (k int32 lanes; 64 lanes when lanes is 0)."""
        return 4 * (self.pool.lanes or 64)

    @property
    def fragment_s(self) -> float:
        """Serialization time of one fragment on a worker's link."""
        return (self.payload_bytes + HEADER_BYTES) * 8 / self.link_bps

    @property
    def ps_fragment_s(self) -> float:
        """PS processing time of one fragment (the PS is a CPU, slower than the link)."""
        return (self.payload_bytes + HEADER_BYTES) * 8 / self.ps_bps

    @property
    def rtt_s(self) -> float:
        """Worker -> switch -> worker for a fragment aggregated in the switch."""
        return 2 * self.link_latency_s + self.switch_latency_s + self.fragment_s

    @property
    def rto_s(self) -> float:
        """A worker's first retransmission timeout (doubling after each resend)."""
        if self.resend_timeout_s is not None:
            return self.resend_timeout_s
        queue = 64 * self.window / self.switch_pps if self.switch_pps > 0 else 0.0
        return 20 * (self.rtt_s + self.ps_detour_s) + queue

    @property
    def ps_detour_s(self) -> float:
        """Extra time a fragment spends on the switch -> PS -> switch path."""
        return 2 * self.link_latency_s + self.switch_latency_s + self.ps_fragment_s


@dataclass(frozen=True, slots=True)
class UtilSample:
    """Switch memory over [start_s, end_s): average shares of the pool (sum to 1).

    `ps_critical` / `ps_copies`: offered load of critical-path packets / of esa's completion
    copies on the PS processes, as a share of their total capacity (above 1: overloaded).
    """

    start_s: float
    end_s: float
    live: float
    complete: float
    idle: float
    ps_critical: float = 0.0
    ps_copies: float = 0.0


@dataclass(frozen=True, slots=True)
class RunResult:
    """One simulated run: per-job results, memory utilisation over time, event count;
    `unfinished` jobs have no result, the `refused` among them (``(job_id, reason)``) were
    rejected by the scheduler."""

    config: SimConfig
    jobs: tuple[JobResult, ...]
    utilisation: tuple[UtilSample, ...]
    events: int
    unfinished: int = 0
    refused: tuple[tuple[int, str], ...] = ()

    def jct_summary(self) -> dict[str, float]:
        """``{"mean", "p50", "p95", "p99"}`` of JCT in seconds (NaN when no job finished)."""
        jcts = sorted(j.jct_s for j in self.jobs)
        if not jcts:
            nan = float("nan")
            return {"mean": nan, "p50": nan, "p95": nan, "p99": nan}

        def pct(q: float) -> float:
            return jcts[min(len(jcts) - 1, int(q * len(jcts)))]

        return {"mean": statistics.fmean(jcts), "p50": pct(0.5), "p95": pct(0.95), "p99": pct(0.99)}

    def switch_share(self) -> float:
        """Share of gradient bytes aggregated in the switch (the rest went to a PS)."""
        sw = sum(j.bytes_switch for j in self.jobs)
        ps = sum(j.bytes_ps for j in self.jobs)
        return sw / (sw + ps) if sw + ps else 0.0

    def mean_utilisation(
        self, names: Sequence[str] = ("live", "complete", "idle")
    ) -> dict[str, float]:
        """Time-weighted means of the `UtilSample` fields `names` (by default the
        ``{"live", "complete", "idle"}`` shares of the pool); an empty run is an idle one."""
        total = sum(u.end_s - u.start_s for u in self.utilisation)
        if total <= 0:
            return {name: 1.0 if name == "idle" else 0.0 for name in names}
        return {
            name: sum(getattr(u, name) * (u.end_s - u.start_s) for u in self.utilisation) / total
            for name in names
        }
