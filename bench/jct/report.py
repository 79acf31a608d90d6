"""The Markdown report of a JCT run: parameters with sources, results, targets and why.

Targets (on the Philly week): esa's average JCT at least 1.35x lower than atp's and
lower than static's; esa's p99 JCT at most 1.1x atp's. The report says for each whether it
was met, with the numbers that explain it; nothing here changes a result. A ``--sim`` report
also states its own validation (`bench.jct.simcheck`): both simulators on a scaled-down slice
of the run's workload, the gap per policy, and a warning at the top when a gap exceeds 5%.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.jct.params import SOURCES
from bench.jct.results import DATAPLANE_COUNTERS, PolicyRun, PolicySummary
from bench.jct.simcheck import SimCheck, check_run, render_check

__all__ = ["Target", "Diagnostics", "diagnose", "evaluate_targets", "render_report"]

ESA_OVER_ATP_TARGET = 1.35
P99_SLACK = 1.1


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    met: bool | None  # None: a policy it needs was not run
    detail: str


@dataclass(frozen=True, slots=True)
class Diagnostics:
    """Per-policy numbers that explain a result (seconds are means over jobs)."""

    compute_s: float
    queue_s: float
    comm_s: float
    preemptions_suffered: float
    unfinished: int


def diagnose(run: PolicyRun) -> Diagnostics:
    jobs = run.jobs
    compute = float(np.mean([j.compute_s for j in jobs]))
    queue = float(np.mean([j.queue_s for j in jobs]))
    jct = float(np.mean([j.jct_s for j in jobs]))
    return Diagnostics(
        compute_s=compute,
        queue_s=queue,
        comm_s=jct - compute - queue,
        preemptions_suffered=float(np.mean([j.preemptions_suffered for j in jobs])),
        unfinished=run.unfinished,
    )


def evaluate_targets(
    s: Mapping[str, PolicySummary],
    ideal_avg: float | None,
    diagnostics: Mapping[str, Diagnostics] | None = None,
) -> list[Target]:
    """The three targets, met or not, each with the figures behind the verdict."""
    esa, atp, static = s.get("esa"), s.get("atp"), s.get("static")
    out = []
    if esa and atp:
        r = atp.avg_jct / esa.avg_jct
        why = f"atp {atp.avg_jct:,.0f} s / esa {esa.avg_jct:,.0f} s = {r:.3f}x"
        if ideal_avg:
            bound = atp.avg_jct / ideal_avg
            why += (
                f"; no memory policy can exceed {bound:.3f}x here: with every byte aggregated "
                f"in the switch at line rate and no queueing, the average JCT would still be "
                f"{ideal_avg:,.0f} s"
            )
        out.append(Target("esa avg JCT >= 1.35x lower than atp", r >= ESA_OVER_ATP_TARGET, why))
    else:
        out.append(Target("esa avg JCT >= 1.35x lower than atp", None, "esa or atp not run"))
    if esa and static:
        r = static.avg_jct / esa.avg_jct
        why = f"static {static.avg_jct:,.0f} s / esa {esa.avg_jct:,.0f} s = {r:.3f}x"
        d = (diagnostics or {}).get("static")
        if d is not None:
            why += (
                f"; static's jobs queue {d.queue_s:,.0f} s on average for a partition and "
                f"send no byte to a PS (esa's in-switch share: {esa.in_switch_share:.4f})"
            )
            if ideal_avg:
                why += f"; static is {static.avg_jct / ideal_avg - 1:.1%} above the lower bound"
        out.append(Target("esa avg JCT lower than static", esa.avg_jct < static.avg_jct, why))
    else:
        out.append(Target("esa avg JCT lower than static", None, "esa or static not run"))
    if esa and atp:
        r = esa.p99_jct / atp.p99_jct
        why = f"esa p99 {esa.p99_jct:,.0f} s / atp p99 {atp.p99_jct:,.0f} s = {r:.3f}"
        out.append(Target("esa p99 JCT <= 1.1x atp's", r <= P99_SLACK, why))
    else:
        out.append(Target("esa p99 JCT <= 1.1x atp's", None, "esa or atp not run"))
    return out


def _verdict(met: bool | None) -> str:
    return {True: "**met**", False: "**not met**", None: "not evaluated"}[met]


def render_report(
    *,
    command: str,
    workload: str,
    backend: str,
    n_jobs: int,
    parameters: Mapping[str, Any],
    extra_sources: Mapping[str, str],
    summaries: Mapping[str, PolicySummary],
    ratios: Mapping[str, float | None],
    runs: Sequence[PolicyRun],
    ideal_avg: float | None,
    notes: Sequence[str] = (),
    check: SimCheck | None = None,
    validate: bool = True,
) -> str:
    """The whole report as Markdown.

    A ``--sim`` report (`backend` ``"sim"``) carries `check`, the fluid model against the
    fragment-level one on a slice of its own workload; when not given it is run here
    (`bench.jct.simcheck.check_run`, seconds to a minute), unless not to `validate` (a
    fabric run, which the fragment-level model cannot run yet)."""
    if check is None and backend == "sim" and runs and validate:
        check = check_run(runs, parameters)
    warning, check_section = render_check(check) if check is not None else ([], [])
    lines = _heading(command, workload, backend, n_jobs, list(summaries), warning)
    lines += _results(summaries, ratios)
    lines += _targets_and_time(summaries, ideal_avg, runs)
    lines += _refused(runs)
    lines += _measured(runs)
    if ideal_avg:
        lines += [
            "",
            f"Lower bound on any policy's average JCT (each job alone, all bytes in the switch "
            f"at line rate, no queueing): {ideal_avg:,.1f} s.",
        ]
    lines += check_section
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    lines += ["", "## Parameters and their sources", "", "| parameter | value | source |"]
    lines += ["|---|---|---|"]
    sources = {**SOURCES, **extra_sources}
    for name, value in parameters.items():
        lines.append(f"| `{name}` | {_value(value)} | {sources.get(name, '')} |")
    lines += ["", "## Plots", ""]
    for alt, image in _PLOTS:
        lines += [f"![{alt}]({image})", ""]
    return "\n".join(lines)


_PLOTS = (
    ("JCT CDF", "jct_cdf.png"),
    ("average JCT", "avg_jct.png"),
    ("memory utilisation", "memory_utilisation.png"),
)


def _heading(
    command: str, workload: str, backend: str, n_jobs: int, policies: list[str], warning: list[str]
) -> list[str]:
    """The title, the validation's warning if any, the command and what the figures mean."""
    return [
        f"# JCT benchmark: {workload} ({backend})",
        *warning,
        "",
        "Command (run from the repository root):",
        "",
        "```",
        command,
        "```",
        "",
        "(`inasched bench jct ARGS` is `.venv/bin/python -m bench.jct ARGS`.)",
        "",
        f"{n_jobs} jobs; policies: {', '.join(policies)}. Times in seconds of virtual time "
        "(`--sim`) or wall time (`--emu`); ratio = baseline average JCT / esa average JCT.",
        "Memory utilisation is the time-averaged share of the aggregator pool that another "
        "job's fragment cannot claim: static's reserved partitions; atp's partial sums and "
        "complete sums awaiting the PS result; esa's partial sums only (under esa a complete "
        "aggregator is claimable at once, so esa holds memory only while a sum fills).",
    ]


def _results(
    summaries: Mapping[str, PolicySummary], ratios: Mapping[str, float | None]
) -> list[str]:
    """The results table per policy, and the ratios."""
    lines = [
        "",
        "## Results",
        "",
        "| policy | avg JCT | p50 | p95 | p99 | memory utilisation | in-switch share |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in summaries.items():
        lines.append(
            f"| {name} | {s.avg_jct:,.1f} | {s.p50_jct:,.1f} | {s.p95_jct:,.1f} | "
            f"{s.p99_jct:,.1f} | {s.memory_utilisation:.3f} | {s.in_switch_share:.4f} |"
        )
    lines += ["", "| ratio | value |", "|---|---:|"]
    lines += [f"| {k} | {_num(v)} |" for k, v in ratios.items()]
    return lines


def _targets_and_time(
    summaries: Mapping[str, PolicySummary], ideal_avg: float | None, runs: Sequence[PolicyRun]
) -> list[str]:
    """Each target's verdict with its figures, and where each policy's time goes."""
    lines = ["", "## Targets", ""]
    diagnostics = {run.policy: diagnose(run) for run in runs}
    for t in evaluate_targets(summaries, ideal_avg, diagnostics):
        lines.append(f"- {t.name}: {_verdict(t.met)} ({t.detail})")
    lines += ["", "## Where the time goes (means over jobs)", ""]
    lines += [
        "| policy | compute | queueing | communication | preemptions suffered | unfinished |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        d = diagnostics[run.policy]
        lines.append(
            f"| {run.policy} | {d.compute_s:,.1f} | {d.queue_s:,.1f} | {d.comm_s:,.1f} | "
            f"{d.preemptions_suffered:,.0f} | {d.unfinished} |"
        )
    return lines


def _refused(runs: Sequence[PolicyRun]) -> list[str]:
    """The jobs a policy refused and why, once for the jobs every policy refused alike;
    they have no JCT and are in no figure above."""
    if not any(run.refused for run in runs):
        return []
    common = set.intersection(*(set(run.refused) for run in runs))
    lines = ["", "## Refused jobs (no JCT, in no figure above)", ""]
    lines += [f"- job {job_id}, under every policy: {why}" for job_id, why in sorted(common)]
    for run in runs:
        lines += [
            f"- job {job_id}, under {run.policy}: {why}"
            for job_id, why in run.refused
            if (job_id, why) not in common
        ]
    return lines


def _measured(runs: Sequence[PolicyRun]) -> list[str]:
    """The tables of what the back-end measured beside the JCTs (each only where it did):
    PS load, the switch's data-plane counters, the emulation's CPU."""
    loads = [(run.policy, run.ps_load) for run in runs if run.ps_load is not None]
    lines = _titled_table(
        "PS load (time averages, as shares of the PS processes' capacity; the simulator "
        "serves critical packets before esa's completion copies, which delay nothing and "
        "only queue; `workers.ps` does the same, storing the copies when its socket is "
        "empty):",
        ("critical packets", "esa's copies", "time with copies over capacity"),
        [
            (name, f"{load.critical:.3f}", f"{load.copies:.3f}", f"{load.copies_over:.1%}")
            for name, load in loads
        ],
    )
    planes = [(run.policy, run.dataplane) for run in runs if run.dataplane is not None]
    lines += _titled_table(
        "Data plane (the switch's per-job counters from GET /switch, summed over the jobs; "
        "sampled every 0.5 s, so what a job did after its last sample is missing): "
        "contributions aggregated in the switch, contributions sent to the PS by a "
        "collision, preemptions, evicted partial sums, and worker resends:",
        ("aggregated", "bypassed", "preempted", "evicted", "resent"),
        [(name, *(f"{c.get(k, 0):,}" for k in DATAPLANE_COUNTERS)) for name, c in planes],
    )
    cpus = [(run.policy, run.cpu) for run in runs if run.cpu is not None]
    lines += _titled_table(
        "CPU of the emulation from the first submission until the last job ended (the "
        "service process's threads: REST, scheduler, soft switch, PS; and the worker "
        "processes, less their start-up): a busy share near 1 means the jobs waited for the "
        "CPU, well below 1 that they waited for something else (memory, compute, the window):",
        ("service CPU (s)", "workers CPU (s)", "span (s)", "busy share of the cores"),
        [
            (name, f"{c.service_s:,.1f}", f"{c.workers_s:,.1f}", f"{c.span_s:,.1f}",
             f"{c.busy_share:.2f} of {c.cores}")
            for name, c in cpus
        ],
    )  # fmt: skip
    return lines


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _value(v: Any) -> str:
    text = str(v)
    return text.replace("|", "\\|")


def _titled_table(title: str, columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    """A paragraph and a table of one row per policy (numbers right-aligned); nothing when
    there are no rows (the back-end does not measure it)."""
    if not rows:
        return []
    return [
        "",
        title,
        "",
        "| policy | " + " | ".join(columns) + " |",
        "|---|" + "---:|" * len(columns),
        *("| " + " | ".join(row) + " |" for row in rows),
    ]
