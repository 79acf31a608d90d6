"""Files a JCT run leaves in its output folder: summary.json, jobs.csv, PNG plots, a table.

``summary.json`` has exactly this shape (times in seconds, ratios baseline / esa)::

    {"policies": {"esa": {"avg_jct", "p50_jct", "p95_jct", "p99_jct",
                          "memory_utilisation", "in_switch_share"}, ...},
     "ratios": {"esa_over_atp", "esa_over_static"},
     "parameters": {...}}

and, from `bench.jct.cli.run_bench`, ``"decomposition"`` when esa's gain over atp is decomposed and
``"emu_cpu"`` (``--emu``: per policy ``busy_share``, ``service_s``, ``workers_s``, ``span_s``,
``cores``; `bench.jct.results.CpuUse`).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import astuple
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never a display

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from bench.jct.results import JOB_COLUMNS, JobOutcome, PolicyRun, PolicySummary, finite  # noqa: E402

__all__ = [
    "PLOTS",
    "format_table",
    "read_jobs_csv",
    "summary_document",
    "write_jobs_csv",
    "write_plots",
    "write_summary",
]

PLOTS = ("jct_cdf.png", "avg_jct.png", "memory_utilisation.png")


def summary_document(
    summaries: Mapping[str, PolicySummary],
    ratio: Mapping[str, float | None],
    parameters: Mapping[str, Any],
) -> dict[str, Any]:
    """The ``summary.json`` document (see module docstring)."""
    return {
        "policies": {
            name: {k: finite(v) for k, v in s.as_dict().items()} for name, s in summaries.items()
        },
        "ratios": {k: finite(v) for k, v in ratio.items()},
        "parameters": dict(parameters),
    }


def write_summary(out: Path, document: Mapping[str, Any]) -> Path:
    path = out / "summary.json"
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return path


def write_jobs_csv(out: Path, runs: Iterable[PolicyRun], name: str = "jobs.csv") -> Path:
    """One row per job and policy, columns `JOB_COLUMNS`."""
    path = out / name
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(JOB_COLUMNS)
        for run in runs:
            writer.writerows(astuple(job) for job in run.jobs)
    return path


def read_jobs_csv(path: Path) -> list[JobOutcome]:
    """Rows of a ``jobs.csv`` back as `JobOutcome` values."""
    kinds = {name: type(value) for name, value in zip(JOB_COLUMNS, _EXAMPLE, strict=True)}
    with open(path, newline="", encoding="utf-8") as f:
        return [JobOutcome(**{k: kinds[k](v) for k, v in row.items()}) for row in csv.DictReader(f)]


_EXAMPLE = astuple(JobOutcome("p", 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1, "m", 1, 1, 0.0, 0.0))


def write_plots(out: Path, runs: Sequence[PolicyRun], title: str) -> list[Path]:
    """JCT CDF per policy, average JCT bars, memory utilisation over time."""
    paths = [out / name for name in PLOTS]

    fig, ax = plt.subplots(figsize=(6, 4))
    for run in runs:
        jct = np.sort([j.jct_s for j in run.jobs])
        if len(jct):
            ax.step(jct, np.arange(1, len(jct) + 1) / len(jct), where="post", label=run.policy)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(f"JCT CDF: {title}")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(paths[0], dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5, 4))
    names = [r.policy for r in runs]
    means = [float(np.mean([j.jct_s for j in r.jobs])) if r.jobs else 0.0 for r in runs]
    # Paul Tol's qualitative palette, one colour per policy run (ablations included).
    palette = ["#888888", "#4477aa", "#cc6677", "#ddcc77", "#117733", "#88ccee"]
    bars = ax.bar(names, means, color=[palette[i % len(palette)] for i in range(len(names))])
    ax.bar_label(bars, fmt="%.0f")
    ax.set_ylabel("average JCT (s)")
    ax.set_title(f"Average JCT: {title}")
    fig.tight_layout()
    fig.savefig(paths[1], dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for run in runs:
        if run.utilisation:
            t = [p[0] / 3600 for p in run.utilisation]
            ax.step(t, [p[1] for p in run.utilisation], where="post", label=run.policy, lw=0.8)
    ax.set_xlabel("time (h)")
    ax.set_ylabel("aggregators in use (share)")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"Switch memory utilisation: {title}")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(paths[2], dpi=100)
    plt.close(fig)
    return paths


def format_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A fixed-width text table (numbers right-aligned, 3 significant decimals)."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [
        max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(header)
    ]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def _cell(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if abs(v) >= 100:
            return f"{v:,.0f}"
        return f"{v:.3f}"
    return str(v)
