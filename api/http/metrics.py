"""Prometheus text exposition of the service: jobs, JCT, switch occupancy and counters, and
the counters of the embedded parameter server.

Written by hand (format 0.0.4) rather than with a client library: every value is read from the
job store, the scheduler's last switch read or the PS at scrape time, so there is no registry to
keep. Every family is always declared (``# HELP``/``# TYPE``), with or without samples, so that
a dashboard built on these names (dashboards/grafana/) can be checked against them. While the
job store is full or unreachable (`api.store.health`) the families read from it are declared
without samples and the rest is served, with ``inasched_store_fault_seconds`` saying so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from api.coordinator.fabriclink import FabricSwitches
from api.coordinator.scheduling import ACTIVE, TERMINAL, Coordinator
from api.store.db import DatabaseUnavailable
from api.store.health import KINDS, StoreHealth
from api.store.models import Job, Tenant
from workers.ps import PsCounters
from workers.ps_control import RemotePs

__all__ = ["JCT_BUCKETS_S", "PsCounterSource", "render_metrics"]

# From a few seconds (a demo job on loopback) to a day (a long Philly job).
JCT_BUCKETS_S = (1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)


@runtime_checkable
class PsCounterSource(Protocol):
    """A PS whose counters this process can read: the embedded `workers.ps.ParameterServer`.
    An external PS (``INASCHED_PS_ADDRESS``) runs in another process and is not scraped here."""

    def counters(self) -> PsCounters: ...


def _family(name: str, kind: str, help_text: str, samples: Iterable[str]) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples]


def _labels(**labels: str | float) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return "{" + inner + "}" if inner else ""


def render_metrics(session: Session, coord: Coordinator, *, tenants: bool = False) -> str:
    """The whole exposition as text, ending in a newline. Per-tenant series
    (``inasched_tenant_jobs``) only with `tenants`: for a scraper holding the metrics token."""
    stored = [_jobs, _tenant_jobs, _jct] if tenants else [_jobs, _jct]
    lines = [line for read in stored for line in _from_store(read, session, coord.health)]
    lines += _store(coord.health)
    lines += _switch(coord)
    unsupported = coord.progress.unsupported_total if coord.progress is not None else 0
    lines += _family(
        "inasched_unsupported_progress_total",
        "counter",
        "Progress reports the switch's per-job counters did not support (capped for priority).",
        [f"inasched_unsupported_progress_total {unsupported}"],
    )
    overran = coord.progress.overran_total if coord.progress is not None else 0
    lines += _family(
        "inasched_jobs_overran_declaration_total",
        "counter",
        "Jobs whose packets, as the switch counted them, passed their declared iterations "
        "(srtf ranks them by attained service).",
        [f"inasched_jobs_overran_declaration_total {overran}"],
    )
    lines += _loops(coord)
    source = coord.ps_registry
    counters = None
    # A PS of its own process (RemotePs has counters too) is not scraped: it may be away.
    if isinstance(source, PsCounterSource) and not isinstance(source, RemotePs):
        counters = source.counters()
    lines += _ps(counters)
    away = [] if coord.ps is None else [f"inasched_ps_away_seconds {coord.ps.away_s():.3f}"]
    lines += _family(
        "inasched_ps_away_seconds",
        "gauge",
        "Seconds since the service's calls to its PS began to fail (0 while it takes them); "
        "meanwhile new jobs wait queued with kind ps_unavailable.",
        away,
    )
    return "\n".join(lines) + "\n"


def _from_store(
    read: Callable[[Session], list[str]], session: Session, health: StoreHealth
) -> list[str]:
    """`read`'s families; while the store is full or away, the same families without samples
    (the fault is recorded in `health`; any other database error stays a bug)."""
    try:
        return read(session)
    except (SQLAlchemyError, DatabaseUnavailable) as exc:
        if health.fault(exc) is None:
            raise
        session.rollback()
        return [line for line in read(_NO_ROWS) if line.startswith("#")]


class _NoRows:
    """A stand-in session whose every query finds nothing: the families' declarations alone."""

    def execute(self, *_: object) -> list[tuple[object, ...]]:
        return []


_NO_ROWS: Session = _NoRows()  # type: ignore[assignment]


def _store(health: StoreHealth) -> list[str]:
    """Store faults by kind: operations refused, and how long the open episode has lasted."""
    current = health.current
    away = health.away_s()
    lines = _family(
        "inasched_store_faults_total",
        "counter",
        "Store operations (requests, scheduling rounds) refused because the job store was full "
        "or unreachable, by kind.",
        (f"inasched_store_faults_total{_labels(kind=k)} {health.by_kind[k]}" for k in KINDS),
    )
    lines += _family(
        "inasched_store_fault_seconds",
        "gauge",
        "Seconds since the job store became full or unreachable (the kind of the open episode; "
        "0 while it answers).",
        (
            f"inasched_store_fault_seconds{_labels(kind=k)} "
            f"{away if current is not None and current.kind == k else 0.0:.3f}"
            for k in KINDS
        ),
    )
    return lines


def _jobs(session: Session) -> list[str]:
    """Jobs by state, every state with a sample."""
    by_state: dict[str, int] = {
        state: count
        for state, count in session.execute(select(Job.state, func.count()).group_by(Job.state))
    }
    return _family(
        "inasched_jobs",
        "gauge",
        "Jobs by state.",
        (f"inasched_jobs{_labels(state=s)} {by_state.get(s, 0)}" for s in ACTIVE + TERMINAL),
    )


_USED = {1: "partial", 2: "complete", 3: "flushed"}
_COUNTED = (
    ("inasched_switch_preemptions_total", "job_preempted", "Partial sums preempted (esa)."),
    ("inasched_switch_bypasses_total", "job_bypassed", "Fragments sent on to the PS."),
    ("inasched_switch_aggregated_total", "job_aggregated", "Fragments aggregated."),
    ("inasched_switch_resent_total", "job_resent", "Retransmissions seen."),
)


@dataclass(frozen=True, slots=True)
class _SwitchRead:
    """One switch as the families show it: its labels (``switch`` on a fabric) and last read."""

    labels: dict[str, str]
    aggregators: int
    runs: Sequence[tuple[int, int, int, int]]
    counters: Mapping[int, Mapping[str, int]]
    drops: Mapping[str, int]


def _switch_reads(coord: Coordinator) -> list[_SwitchRead]:
    """The service's switch, or on a fabric every switch of it, labelled with its name."""
    backend = coord.backend
    if not isinstance(backend, FabricSwitches):
        return [
            _SwitchRead(
                {}, coord.pool.aggregators, coord.occupancy_runs, coord.counters, coord.drops
            )
        ]
    return [
        _SwitchRead(
            {"switch": read.name},
            backend.switches[read.name].aggregators,
            read.occupancy.runs(),
            read.counters.jobs,
            read.counters.drops,
        )
        for read in backend.reads()
    ]


def _switch(coord: Coordinator) -> list[str]:
    """The switch's families at the scheduler's last read: the pool and its aggregators in
    use by state, the per-job counters summed over the jobs, and drops by reason; on a fabric
    one series per switch (label ``switch``), and which switches are lost."""
    reads = _switch_reads(coord)
    lines = _family(
        "inasched_switch_aggregators",
        "gauge",
        "Aggregators of the switch pool.",
        [f"inasched_switch_aggregators{_labels(**r.labels)} {r.aggregators}" for r in reads],
    )
    used_lines = []
    for read in reads:
        used: dict[int, int] = {}
        for _, length, _, state in read.runs:
            used[state] = used.get(state, 0) + length
        used_lines += [
            f"inasched_switch_aggregators_used{_labels(**read.labels, state=n)} {used.get(st, 0)}"
            for st, n in _USED.items()
        ]
    lines += _family(
        "inasched_switch_aggregators_used",
        "gauge",
        "Aggregators not free, by state, at the last switch read.",
        used_lines,
    )
    totals: list[dict[str, int]] = []
    for read in reads:
        total: dict[str, int] = {}
        for counters in read.counters.values():
            for name, value in counters.items():
                total[name] = total.get(name, 0) + value
        totals.append(total)
    for metric, counter, help_text in _COUNTED:
        samples = [
            f"{metric}{_labels(**r.labels)} {t.get(counter, 0)}"
            for r, t in zip(reads, totals, strict=True)
        ]
        lines += _family(metric, "counter", help_text, samples)
    lines += _family(
        "inasched_switch_drops_total",
        "counter",
        "Packets dropped by the switch, by reason.",
        (
            f"inasched_switch_drops_total{_labels(**r.labels, reason=why)} {n}"
            for r in reads
            for why, n in sorted(r.drops.items())
        ),
    )
    if isinstance(coord.backend, FabricSwitches):
        lost = coord.backend.lost()
        lines += _family(
            "inasched_switch_lost",
            "gauge",
            "1 for a switch of the fabric that stopped answering (its jobs failed).",
            (
                f"inasched_switch_lost{_labels(switch=r.labels['switch'])} "
                f"{int(r.labels['switch'] in lost)}"
                for r in reads
            ),
        )
    return lines


def _loops(coord: Coordinator) -> list[str]:
    """How long the decision rounds and the scheduling ticks (which watch the workers' heartbeats
    and read the switch) take: summaries, and the longest pass so far."""
    lines: list[str] = []
    for name, what, times in (
        ("inasched_decision_round_seconds", "Decision rounds", coord.round_times),
        ("inasched_scheduling_tick_seconds", "Scheduling ticks", coord.tick_times),
    ):
        lines += _family(
            name,
            "summary",
            f"{what}: seconds each took.",
            [f"{name}_sum {times.total_s:.6f}", f"{name}_count {times.count}"],
        )
        lines += _family(
            f"{name}_max",
            "gauge",
            f"{what}: the longest so far, seconds.",
            [f"{name}_max {times.max_s:.6f}"],
        )
    return lines


def _ps(counters: PsCounters | None) -> list[str]:
    """The PS's families; declared without samples when there is no PS in this process."""
    if counters is None:
        received: list[str] = []
        outcomes: list[str] = []
        drops: list[str] = []
        jobs: list[str] = []
    else:
        received = [f"inasched_ps_received_total {counters.received}"]
        outcomes = [
            f"inasched_ps_outcomes_total{_labels(outcome=o)} {n}"
            for o, n in sorted(counters.outcomes.items())
        ]
        drops = [
            f"inasched_ps_drops_total{_labels(reason=r)} {n}"
            for r, n in sorted(counters.drops.items())
        ]
        jobs = [f"inasched_ps_jobs {len(counters.jobs)}"]
    return [
        *_family(
            "inasched_ps_received_total",
            "counter",
            "Datagrams received by the embedded parameter server.",
            received,
        ),
        *_family(
            "inasched_ps_outcomes_total",
            "counter",
            "Fragments the embedded PS handled, by outcome (added, completed, stored, "
            "answered, duplicate).",
            outcomes,
        ),
        *_family(
            "inasched_ps_drops_total",
            "counter",
            "Datagrams the embedded PS dropped, by reason.",
            drops,
        ),
        *_family(
            "inasched_ps_jobs",
            "gauge",
            "Jobs with partial sums or results held by the embedded PS.",
            jobs,
        ),
    ]


def _jct(session: Session) -> list[str]:
    rows = session.execute(
        select(Job.policy, Job.jct_s).where(Job.state == "finished", Job.jct_s.is_not(None))
    )
    per_policy: dict[str, list[float]] = {}
    for policy, jct in rows:
        per_policy.setdefault(policy or "none", []).append(float(jct or 0.0))
    samples: list[str] = []
    for policy, values in sorted(per_policy.items()):
        for bound in JCT_BUCKETS_S:
            n = sum(1 for v in values if v <= bound)
            samples.append(f"inasched_jct_seconds_bucket{_labels(policy=policy, le=bound)} {n}")
        samples.append(
            f"inasched_jct_seconds_bucket{_labels(policy=policy, le='+Inf')} {len(values)}"
        )
        samples.append(f"inasched_jct_seconds_sum{_labels(policy=policy)} {sum(values):.6f}")
        samples.append(f"inasched_jct_seconds_count{_labels(policy=policy)} {len(values)}")
    return _family(
        "inasched_jct_seconds", "histogram", "Job completion time, submit to finish.", samples
    )


def _tenant_jobs(session: Session) -> list[str]:
    """Active jobs by tenant and state (tenants with none have no sample)."""
    rows = session.execute(
        select(Tenant.name, Job.state, func.count())
        .join(Job, Job.tenant_id == Tenant.id)
        .where(Job.state.in_(ACTIVE))
        .group_by(Tenant.name, Job.state)
        .order_by(Tenant.name, Job.state)
    )
    return _family(
        "inasched_tenant_jobs",
        "gauge",
        "Active jobs by tenant and state (only for the metrics token).",
        (
            f"inasched_tenant_jobs{_labels(tenant=_escaped(t), state=str(s))} {n}"
            for t, s, n in rows
        ),
    )


def _escaped(value: str) -> str:
    """A label value in the exposition format's escaping (names stored before names were
    checked may hold any character)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
