"""Prometheus text exposition of the service: jobs, JCT, switch occupancy and counters.

Written by hand (format 0.0.4) rather than with a client library: every value is read from the
job store or the scheduler's last switch read at scrape time, so there is no registry to keep.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.models import Job
from api.scheduling import ACTIVE, TERMINAL, Coordinator

__all__ = ["JCT_BUCKETS_S", "render_metrics"]

# From a few seconds (a demo job on loopback) to a day (a long Philly job).
JCT_BUCKETS_S = (1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)


def _family(name: str, kind: str, help_text: str, samples: Iterable[str]) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples]


def _labels(**labels: str | float) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return "{" + inner + "}" if inner else ""


def render_metrics(session: Session, coord: Coordinator) -> str:
    """The whole exposition as text, ending in a newline."""
    lines: list[str] = []
    by_state: dict[str, int] = {
        state: count
        for state, count in session.execute(select(Job.state, func.count()).group_by(Job.state))
    }
    lines += _family(
        "inasched_jobs",
        "gauge",
        "Jobs by state.",
        (f"inasched_jobs{_labels(state=s)} {by_state.get(s, 0)}" for s in ACTIVE + TERMINAL),
    )
    lines += _jct(session)
    runs = coord.occupancy_runs
    used: dict[int, int] = {}
    for _, length, _, state in runs:
        used[state] = used.get(state, 0) + length
    names = {1: "partial", 2: "complete", 3: "flushed"}
    lines += _family(
        "inasched_switch_aggregators",
        "gauge",
        "Aggregators of the switch pool.",
        [f"inasched_switch_aggregators {coord.pool.aggregators}"],
    )
    lines += _family(
        "inasched_switch_aggregators_used",
        "gauge",
        "Aggregators not free, by state, at the last switch read.",
        (
            f"inasched_switch_aggregators_used{_labels(state=n)} {used.get(s, 0)}"
            for s, n in names.items()
        ),
    )
    totals: dict[str, int] = {}
    for counters in coord.counters.values():
        for name, value in counters.items():
            totals[name] = totals.get(name, 0) + value
    for metric, counter, help_text in (
        ("inasched_switch_preemptions_total", "job_preempted", "Partial sums preempted (esa)."),
        ("inasched_switch_bypasses_total", "job_bypassed", "Fragments sent on to the PS."),
        ("inasched_switch_aggregated_total", "job_aggregated", "Fragments aggregated."),
        ("inasched_switch_resent_total", "job_resent", "Retransmissions seen."),
    ):
        lines += _family(metric, "counter", help_text, [f"{metric} {totals.get(counter, 0)}"])
    lines += _family(
        "inasched_switch_drops_total",
        "counter",
        "Packets dropped by the switch, by reason.",
        (
            f"inasched_switch_drops_total{_labels(reason=r)} {n}"
            for r, n in sorted(coord.drops.items())
        ),
    )
    return "\n".join(lines) + "\n"


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
