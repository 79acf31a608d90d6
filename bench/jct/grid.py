"""A JCT sweep over a grid of one or two parameters: its points, its CSV and its heatmaps.

Each point of the grid (``--sweep memory=4096,16384 --sweep load=1,4``: four points) runs
every policy into a folder of its own named after the point (``memory=4096,load=4``), and
``sweep.csv`` gets one row per point: the swept parameters, then each policy's average and
p99 JCT and in-switch share, the ratios of `bench.jct.results.ratios` (baseline / esa: above
1 esa is faster) and, for two parameters, ``p99_esa_over_atp`` (esa's p99 / atp's: below 1 esa
is faster). ``cpu.csv`` has a row per point too: the CPU seconds each run took in the process
that ran it, and their total (`cpu_row`); it differs between runs, ``sweep.csv`` does not.
A two-parameter grid also gets one PNG heatmap per entry of `HEATMAPS` whose
policies ran, drawn from ``sweep.csv`` itself (`grid_matrix`), so a figure can be redrawn
from the CSV alone and never disagrees with it.
"""

from __future__ import annotations

import csv
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never a display

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import TwoSlopeNorm  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from bench.jct.params import BenchParams  # noqa: E402
from bench.jct.results import PolicySummary  # noqa: E402

__all__ = [
    "HEATMAPS",
    "P99_RATIO",
    "GridMatrix",
    "Heatmap",
    "Point",
    "cpu_row",
    "grid_matrix",
    "grid_points",
    "grid_row",
    "heatmap_figure",
    "point_folder",
    "point_params",
    "read_grid_csv",
    "write_grid_csv",
    "write_heatmaps",
]

# One point of the grid: (parameter, value) per --sweep, in the order given.
Point = tuple[tuple[str, str], ...]

P99_RATIO = "p99_esa_over_atp"


@dataclass(frozen=True, slots=True)
class Heatmap:
    """One heatmap: the CSV column it draws, the policies that column needs, and which side
    of 1.0 is esa's win (`esa_wins_above`)."""

    file: str
    column: str
    policies: tuple[str, ...]
    title: str
    esa_wins_above: bool


HEATMAPS = (
    Heatmap(
        "heatmap_esa_over_atp.png",
        "esa_over_atp",
        ("atp", "esa"),
        "atp avg JCT / esa avg JCT (above 1: esa faster)",
        esa_wins_above=True,
    ),
    Heatmap(
        "heatmap_esa_over_static.png",
        "esa_over_static",
        ("static", "esa"),
        "static avg JCT / esa avg JCT (above 1: esa faster)",
        esa_wins_above=True,
    ),
    Heatmap(
        "heatmap_p99_esa_over_atp.png",
        P99_RATIO,
        ("atp", "esa"),
        "esa p99 JCT / atp p99 JCT (below 1: esa faster)",
        esa_wins_above=False,
    ),
)


@dataclass(frozen=True, slots=True)
class GridMatrix:
    """What a heatmap draws: ``values[i, j]`` is the point (y_values[i], x_values[j]); NaN
    where the CSV has no number."""

    x_name: str
    x_values: tuple[str, ...]
    y_name: str
    y_values: tuple[str, ...]
    values: np.ndarray[Any, np.dtype[np.float64]]


def grid_points(sweeps: Sequence[tuple[str, Sequence[str]]]) -> list[Point]:
    """Every combination of the sweeps' values, the first sweep varying slowest; ``[()]``
    (one run, no folder of its own) without a sweep."""
    names = [name for name, _ in sweeps]
    return [
        tuple(zip(names, combo, strict=True))
        for combo in itertools.product(*(v for _, v in sweeps))
    ]


def point_folder(point: Point) -> str:
    """``memory=4096,load=2``: the point's folder under ``--out``."""
    return ",".join(f"{name}={value}" for name, value in point)


def point_params(params: BenchParams, point: Point) -> BenchParams:
    for name, value in point:
        params = params.with_value(name, value)
    return params


def grid_row(
    point: Point,
    summaries: Mapping[str, PolicySummary],
    ratios: Mapping[str, float | None],
    decomposition: Mapping[str, float | None],
) -> dict[str, Any]:
    """The point's ``sweep.csv`` row (see module docstring)."""
    row: dict[str, Any] = dict(point)
    for name, s in summaries.items():
        row[f"{name}_avg_jct"] = s.avg_jct
        row[f"{name}_p99_jct"] = s.p99_jct
        row[f"{name}_in_switch"] = s.in_switch_share
    row.update(ratios)
    if len(point) > 1:
        esa, atp = summaries.get("esa"), summaries.get("atp")
        ok = esa is not None and atp is not None and atp.p99_jct > 0
        row[P99_RATIO] = esa.p99_jct / atp.p99_jct if ok else None  # type: ignore[union-attr]
    row.update({f"gain_{k}": v for k, v in decomposition.items()})
    return row


def cpu_row(point: Point, cpu_s: Mapping[str, float]) -> dict[str, Any]:
    """The point's ``cpu.csv`` row: the swept values, CPU seconds per run, and their total."""
    row: dict[str, Any] = dict(point)
    row.update({f"{name}_cpu_s": round(s, 3) for name, s in cpu_s.items()})
    row["total"] = round(sum(cpu_s.values()), 3)
    return row


def write_grid_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def read_grid_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def grid_matrix(
    rows: Sequence[Mapping[str, Any]],
    x: tuple[str, Sequence[str]],
    y: tuple[str, Sequence[str]],
    column: str,
) -> GridMatrix:
    """`column` of `rows` (``sweep.csv``'s) laid out on the grid of sweeps `x` and `y`."""
    (x_name, x_values), (y_name, y_values) = x, y
    values = np.full((len(y_values), len(x_values)), np.nan)
    cols = {v: j for j, v in enumerate(x_values)}
    lines = {v: i for i, v in enumerate(y_values)}
    for row in rows:
        cell = row.get(column)
        if cell not in (None, ""):
            values[lines[str(row[y_name])], cols[str(row[x_name])]] = float(cell)
    return GridMatrix(x_name, tuple(x_values), y_name, tuple(y_values), values)


def heatmap_figure(matrix: GridMatrix, heatmap: Heatmap, title: str) -> Figure:
    """The heatmap of `matrix`: each cell annotated with its value; the colour scale centred
    on 1.0, blue where esa wins and red where it loses, on every heatmap."""
    values = matrix.values
    finite = values[np.isfinite(values)]
    # Symmetric in ratio: 2x faster and 2x slower are equally deep; at least +-5%.
    spread = max([math.log(1.05), *(abs(math.log(v)) for v in finite if v > 0)])
    norm = TwoSlopeNorm(vcenter=1.0, vmin=math.exp(-spread), vmax=math.exp(spread))
    cmap = "RdBu" if heatmap.esa_wins_above else "RdBu_r"
    fig, ax = plt.subplots(figsize=(1.2 * len(matrix.x_values) + 3, 0.8 * len(matrix.y_values) + 2))
    image = ax.imshow(
        np.ma.masked_invalid(values), cmap=cmap, norm=norm, origin="lower", aspect="auto"
    )
    for (i, j), v in np.ndenumerate(values):
        dark = not math.isnan(v) and abs(float(norm(v)) - 0.5) > 0.3  # white on deep colour
        label = "-" if math.isnan(v) else f"{v:.2f}"
        ax.text(j, i, label, ha="center", va="center", fontsize=9, color="w" if dark else "k")
    ax.set_xticks(range(len(matrix.x_values)), matrix.x_values)
    ax.set_yticks(range(len(matrix.y_values)), matrix.y_values)
    ax.set_xlabel(matrix.x_name)
    ax.set_ylabel(matrix.y_name)
    ax.set_title(f"{heatmap.title}\n{title}", fontsize=10)
    fig.colorbar(image, ax=ax, label=heatmap.column)
    fig.tight_layout()
    return fig


def write_heatmaps(
    out: Path,
    sweeps: Sequence[tuple[str, Sequence[str]]],
    policies: Sequence[str],
    title: str,
    heatmaps: Sequence[Heatmap] = HEATMAPS,
) -> tuple[list[Path], list[str]]:
    """The heatmaps of a two-parameter grid from ``out/sweep.csv`` (first sweep on x, second
    on y): the files written, and one line per heatmap skipped for a policy that did not run."""
    rows = read_grid_csv(out / "sweep.csv")
    (x_name, x_values), (y_name, y_values) = sweeps
    written, skipped = [], []
    for heatmap in heatmaps:
        missing = [p for p in heatmap.policies if p not in policies]
        if missing:
            skipped.append(f"{heatmap.file} skipped: needs {', '.join(missing)} in --policies")
            continue
        matrix = grid_matrix(rows, (x_name, x_values), (y_name, y_values), heatmap.column)
        fig = heatmap_figure(matrix, heatmap, title)
        path = out / heatmap.file
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    return written, skipped
