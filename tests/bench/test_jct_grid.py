"""Two ``--sweep`` of ``inasched bench jct``: a 2x2 grid on a tiny synthetic workload in --sim,
its folders, its CSV, its heatmaps (drawn from the CSV's numbers) and the refused sweeps."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest

from bench.jct.cli import main
from bench.jct.grid import (
    HEATMAPS,
    P99_RATIO,
    Heatmap,
    grid_matrix,
    heatmap_figure,
    read_grid_csv,
    write_heatmaps,
)
from bench.jct.params import parse_sweeps

WORKLOAD = "synthetic-6"
# 256 aggregators are scarce for six jobs, 16,384 are not: the ratios differ across the grid.
MEMORY = ("256", "16384")
LOAD = ("1", "4")
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def grid_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("grid")
    argv = ["--workload", WORKLOAD, "--out", str(out), "--sim", "--quiet"]
    sweeps = ["--sweep", f"memory={','.join(MEMORY)}", "--sweep", f"load={','.join(LOAD)}"]
    assert main([*argv, *sweeps]) == 0
    return out


def test_the_csv_has_one_row_per_point_matching_its_folder(grid_dir: Path) -> None:
    rows = read_grid_csv(grid_dir / "sweep.csv")
    assert [(r["memory"], r["load"]) for r in rows] == [(m, x) for m in MEMORY for x in LOAD]
    for row in rows:
        folder = grid_dir / f"memory={row['memory']},load={row['load']}"
        doc = json.loads((folder / "summary.json").read_text())
        assert doc["parameters"]["aggregators"] == int(row["memory"])
        assert doc["parameters"]["load"] == float(row["load"])
        for policy in ("static", "atp", "esa"):
            got = doc["policies"][policy]
            assert float(row[f"{policy}_avg_jct"]) == pytest.approx(got["avg_jct"])
            assert float(row[f"{policy}_p99_jct"]) == pytest.approx(got["p99_jct"])
        for name in ("esa_over_atp", "esa_over_static"):
            assert float(row[name]) == pytest.approx(doc["ratios"][name])
        esa, atp = doc["policies"]["esa"], doc["policies"]["atp"]
        assert float(row[P99_RATIO]) == pytest.approx(esa["p99_jct"] / atp["p99_jct"])
    # The grid is not flat: scarce memory changes esa's lead over static.
    over_static = {float(r["esa_over_static"]) for r in rows}
    assert max(over_static) > min(over_static) * 1.01


def test_every_heatmap_is_a_png(grid_dir: Path) -> None:
    for heatmap in HEATMAPS:
        assert (grid_dir / heatmap.file).read_bytes()[:8] == PNG, heatmap.file


@pytest.mark.parametrize("spec", HEATMAPS, ids=[h.column for h in HEATMAPS])
def test_a_heatmap_draws_the_csv_ratios(grid_dir: Path, spec: Heatmap) -> None:
    rows = read_grid_csv(grid_dir / "sweep.csv")
    matrix = grid_matrix(rows, ("memory", MEMORY), ("load", LOAD), spec.column)
    assert (matrix.x_name, matrix.y_name) == ("memory", "load")
    assert matrix.values.shape == (len(LOAD), len(MEMORY))
    for row in rows:
        cell = matrix.values[LOAD.index(row["load"]), MEMORY.index(row["memory"])]
        assert cell == float(row[spec.column])
    fig = heatmap_figure(matrix, spec, "test")
    try:
        (ax, _colour_bar) = fig.axes
        array = ax.images[0].get_array()
        assert array is not None
        drawn = np.ma.filled(array, np.nan)
        np.testing.assert_array_equal(drawn, matrix.values)
        labels = sorted(t.get_text() for t in ax.texts)
        assert labels == sorted(f"{v:.2f}" for v in matrix.values.ravel())
        assert [t.get_text() for t in ax.get_xticklabels()] == list(MEMORY)
        assert [t.get_text() for t in ax.get_yticklabels()] == list(LOAD)
        assert (ax.get_xlabel(), ax.get_ylabel()) == ("memory", "load")
        # Centred on 1.0: a ratio of 1 is the middle of the colour scale.
        centre = np.asarray(ax.images[0].norm(np.array([1.0])))
        assert centre[0] == pytest.approx(0.5)
    finally:
        plt.close(fig)


def test_a_heatmap_whose_policies_did_not_run_is_skipped(grid_dir: Path, tmp_path: Path) -> None:
    shutil.copy(grid_dir / "sweep.csv", tmp_path / "sweep.csv")
    sweeps = [("memory", MEMORY), ("load", LOAD)]
    written, skipped = write_heatmaps(tmp_path, sweeps, ["atp", "esa"], "test")
    assert [p.name for p in written] == ["heatmap_esa_over_atp.png", "heatmap_p99_esa_over_atp.png"]
    assert skipped == ["heatmap_esa_over_static.png skipped: needs static in --policies"]
    assert not (tmp_path / "heatmap_esa_over_static.png").exists()


def test_a_missing_cell_is_nan_and_marked() -> None:
    rows = [{"memory": "1", "load": "1", "esa_over_atp": "2.0"}, {"memory": "2", "load": "1"}]
    matrix = grid_matrix(rows, ("memory", ["1", "2"]), ("load", ["1"]), "esa_over_atp")
    assert matrix.values[0, 0] == 2.0 and math.isnan(matrix.values[0, 1])
    fig = heatmap_figure(matrix, HEATMAPS[0], "test")
    try:
        assert sorted(t.get_text() for t in fig.axes[0].texts) == ["-", "2.00"]
    finally:
        plt.close(fig)


def test_link_gbps_and_window_can_be_swept() -> None:
    assert parse_sweeps(["link_gbps=10,100", "window=64,128"]) == [
        ("link_gbps", ["10", "100"]),
        ("window", ["64", "128"]),
    ]


@pytest.mark.parametrize(
    ("sweeps", "says"),
    [
        (
            ["memory=1024", "memory=2048"],
            "--sweep memory and --sweep memory both sweep aggregators",
        ),
        (["memory=1024", "aggregators=2048"], "both sweep aggregators; give each parameter once"),
        (["memory=1", "load=1", "window=8"], "--sweep is given at most 2 times"),
        (["memory=", "load=1"], "--sweep 'memory=' has no values; give PARAM=V1,V2,..."),
        (["load=1", "memory= , "], "--sweep 'memory= , ' has no values"),
        (["memory=1024,2048,1024"], "--sweep memory lists 1024 more than once"),
        (["load=2", "link_gbps=0"], "link_gbps=0: link_gbps must be a number > 0"),
    ],
)
def test_a_bad_sweep_is_one_line_and_runs_nothing(
    sweeps: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = ["--workload", "synthetic-3", "--out", str(out), "--quiet"]
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, *(a for s in sweeps for a in ("--sweep", s))])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("inasched bench jct: error: ")
    assert says in lines[0]
    assert captured.out == ""
    assert not out.exists()


def test_a_sweep_in_two_processes_writes_the_same_csv_as_in_one(tmp_path: Path) -> None:
    # Two points, one per process (each point's report runs its own validation: the grid of
    # the module's fixture costs about a minute on its own).
    sweeps = ["--sweep", "memory=256,16384", "--sweep", "load=4"]
    csvs = []
    for jobs in ("1", "2"):
        out = tmp_path / f"jobs-{jobs}"
        argv = ["--workload", WORKLOAD, "--out", str(out), "--sim", "--quiet", "--jobs", jobs]
        assert main([*argv, *sweeps]) == 0
        csvs.append((out / "sweep.csv").read_bytes())
        # The CPU seconds differ between runs, so they have a file of their own.
        cpu = read_grid_csv(out / "cpu.csv")
        assert [(r["memory"], r["load"]) for r in cpu] == [("256", "4"), ("16384", "4")]
        for row in cpu:
            runs = [float(v) for k, v in row.items() if k.endswith("_cpu_s")]
            assert len(runs) == 3 and all(s >= 0 for s in runs) and sum(runs) > 0
            assert float(row["total"]) == pytest.approx(sum(runs), abs=0.003)
    assert csvs[0] == csvs[1]
    assert len(csvs[0].splitlines()) == 3  # the header and one row per point


def test_jobs_below_one_and_jobs_with_emu_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for extra in (["--sim", "--jobs", "0"], ["--emu", "--jobs", "2"]):
        with pytest.raises(SystemExit) as exc:
            main(["--workload", WORKLOAD, "--out", str(tmp_path / "x"), *extra])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "--jobs" in err
