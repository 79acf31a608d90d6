"""Where esa's gain over atp comes from: release, preemption and priority.

esa differs from atp in two switch mechanisms and one scheduler choice; the ablations of
`scheduler.ablations` switch them on one at a time, and the average JCTs of the chain
atp -> esa-nopreempt -> esa (``fifo`` levels) -> esa (the run's priority) telescope to
atp / esa, so each step's ratio is that step's factor of esa's gain:

- **release**: atp / esa-nopreempt. The switch frees an aggregator when its sum completes
  instead of after the PS round trip; nothing is preempted.
- **preemption**: esa-nopreempt / esa with ``fifo`` levels (the earliest arrival wins).
- **priority**: esa with ``fifo`` levels / esa (1 when the run's function is ``fifo``).

When esa-norelease ran too, the other order is shown beside it (atp / esa-norelease, then
esa-norelease / esa). Where the two orders give a mechanism different factors, the
mechanisms interact.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from bench.jct.results import PolicySummary
from scheduler.ablations import EsaNoPreemptPolicy, EsaNoReleasePolicy
from scheduler.atp import AtpPolicy
from scheduler.esa import EsaPolicy

__all__ = ["BASELINE_PRIORITY", "Decomposition", "decompose", "needs_baseline", "render"]

ATP, ESA = AtpPolicy.name, EsaPolicy.name
NOPREEMPT, NORELEASE = EsaNoPreemptPolicy.name, EsaNoReleasePolicy.name
#: The priority function whose levels stand for "preemption without priority".
BASELINE_PRIORITY = "fifo"


@dataclass(frozen=True, slots=True)
class Decomposition:
    """esa's gain over atp (atp avg JCT / esa avg JCT) as the product of its three steps;
    `preempt_first` / `release_second`: the other order's factors (None: esa-norelease not
    run)."""

    esa_over_atp: float
    release: float
    preemption: float
    priority: float
    preempt_first: float | None = None
    release_second: float | None = None

    def as_dict(self) -> dict[str, float | None]:
        return {
            "esa_over_atp": self.esa_over_atp,
            "release": self.release,
            "preemption": self.preemption,
            "priority": self.priority,
            "preemption_without_release": self.preempt_first,
            "release_with_preemption": self.release_second,
        }


def needs_baseline(policies: list[str] | tuple[str, ...], priority: str) -> bool:
    """Whether a decomposition needs the extra run of esa with `BASELINE_PRIORITY` levels:
    the chain's policies ran, and the run's own priority function is another one."""
    return {ATP, NOPREEMPT, ESA} <= set(policies) and priority != BASELINE_PRIORITY


def decompose(
    summaries: Mapping[str, PolicySummary], esa_by_arrival: PolicySummary | None
) -> Decomposition | None:
    """The decomposition of `summaries` (None unless atp, esa-nopreempt and esa ran).
    `esa_by_arrival`: esa with `BASELINE_PRIORITY` levels; None when esa itself had them."""
    atp, nopreempt, esa = (summaries.get(n) for n in (ATP, NOPREEMPT, ESA))
    if atp is None or nopreempt is None or esa is None:
        return None
    by_arrival = esa_by_arrival or esa
    norelease = summaries.get(NORELEASE)
    return Decomposition(
        esa_over_atp=atp.avg_jct / esa.avg_jct,
        release=atp.avg_jct / nopreempt.avg_jct,
        preemption=nopreempt.avg_jct / by_arrival.avg_jct,
        priority=by_arrival.avg_jct / esa.avg_jct,
        preempt_first=atp.avg_jct / norelease.avg_jct if norelease else None,
        release_second=norelease.avg_jct / esa.avg_jct if norelease else None,
    )


def render(d: Decomposition, priority: str) -> list[str]:
    """The report's section: one row per step, the factors multiplying to esa over atp."""
    lines = [
        "",
        "## Where esa's gain over atp comes from",
        "",
        "Average JCT of each step's policies, before / after (> 1: the step made jobs faster); "
        "the three factors multiply to esa over atp (`bench.jct.ablation`).",
        "",
        "| step | runs compared | factor |",
        "|---|---|---:|",
        f"| release | atp / esa-nopreempt | {d.release:.3f} |",
        f"| preemption | esa-nopreempt / esa with {BASELINE_PRIORITY} levels | "
        f"{d.preemption:.3f} |",
        f"| priority | esa with {BASELINE_PRIORITY} levels / esa with {priority} levels | "
        f"{d.priority:.3f} |",
        f"| **esa over atp** | atp / esa | **{d.esa_over_atp:.3f}** |",
    ]
    if d.preempt_first is not None and d.release_second is not None:
        lines += [
            "",
            f"The other order: preemption without release (atp / esa-norelease) "
            f"{d.preempt_first:.3f}, then release (esa-norelease / esa) {d.release_second:.3f}.",
        ]
    return lines
