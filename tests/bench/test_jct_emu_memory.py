"""``--emu-config memory``: the emulation whose jobs contend for aggregator memory.

A short static run on loopback (3 jobs, 3 iterations) checks that the configuration reaches the
service's switch (its pool holds two static partitions, so the third job starts only after an
earlier one finished) and that the report records the configuration and the CPU it used; the
rest checks the scaling and the series summary without processes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.jct import series
from bench.jct.cli import main
from bench.jct.emu import EMU_CONFIGS, MEMORY, emu_config, emu_workload
from bench.jct.output import read_jobs_csv
from scheduler.memory import COPIES_PER_SLOT, partition_slots
from scheduler.workload import JobSpec, write_workload


def three_jobs(path: Path) -> Path:
    # 102 MB / 16,000 = 6.4 kB of gradient (25 fragments); 3 iterations of 0.32 s compute.
    write_workload(
        [JobSpec(i, 10.0 * i, 2, "ResNet-50", 102_200_000, 0.3232, 3) for i in range(3)], path
    )
    return path


@pytest.mark.slow
def test_memory_config_queues_a_static_job_beyond_its_two_partitions(tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = ["--workload", str(three_jobs(tmp_path / "three.csv")), "--policies", "static"]
    assert main([*argv, "--emu", "--emu-config", "memory", "--out", str(out), "--quiet"]) == 0

    doc = json.loads((out / "summary.json").read_text())
    parameters = doc["parameters"]
    assert parameters["emu.config"] == "memory"
    assert (parameters["emu.aggregators"], parameters["emu.window"]) == (128, 32)
    assert "emu.config" in (out / "report.md").read_text()
    cpu = doc["emu_cpu"]["static"]
    assert cpu["service_s"] > 0 and cpu["span_s"] > 0 and cpu["busy_share"] > 0

    jobs = sorted(read_jobs_csv(out / "jobs.csv"), key=lambda j: j.job_id)
    assert len(jobs) == 3
    # Two partitions of 64 aggregators fill the pool of 128: the last job to arrive is admitted
    # only when a partition is released, i.e. after one of the first two finished.
    assert jobs[2].start_s >= min(jobs[0].finish_s, jobs[1].finish_s)


def test_memory_pool_holds_two_static_partitions_of_the_eight_jobs() -> None:
    partition = COPIES_PER_SLOT * partition_slots(MEMORY.window)
    assert MEMORY.aggregators // partition == 2
    assert MEMORY.aggregators < MEMORY.jobs * MEMORY.window  # less than the jobs ask for


def test_memory_workload_is_scaled_by_its_own_divisors(tmp_path: Path) -> None:
    csv = three_jobs(tmp_path / "three.csv")
    default = emu_workload(str(csv), 0, emu_config("default"))
    memory = emu_workload(str(csv), 0, MEMORY)
    assert [j.arrival_s for j in memory] == [0.0, MEMORY.arrival_gap_s, 2 * MEMORY.arrival_gap_s]
    assert [j.grad_bytes for j in memory] == [102_200_000 // MEMORY.grad_divisor // 4 * 4] * 3
    assert all(m.grad_bytes < d.grad_bytes for m, d in zip(memory, default, strict=True))
    assert emu_workload(str(csv), 0) == default


def test_unknown_config_is_refused_with_the_known_names(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="memory"):
        emu_config("cpu")
    assert set(EMU_CONFIGS) == {"default", "memory"}
    argv = ["--workload", "synthetic-10", "--out", str(tmp_path / "o")]
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--emu-config", "memory"])  # without --emu
    assert exc.value.code == 2


def _run(folder: Path, order: list[str], jct: dict[str, float], busy: float) -> None:
    folder.mkdir(parents=True)
    doc = {
        "policies": {p: {"avg_jct": jct[p]} for p in order},
        "ratios": {
            "esa_over_atp": jct["atp"] / jct["esa"],
            "esa_over_static": jct["static"] / jct["esa"],
        },
        "parameters": {"workload": "w", "emu.config": "memory"},
        "emu_cpu": {p: {"busy_share": busy} for p in order},
    }
    (folder / "summary.json").write_text(json.dumps(doc))


def test_series_counts_wins_and_spread_over_rotated_runs(tmp_path: Path) -> None:
    policies = ["static", "atp", "esa"]
    assert [series.rotated(policies, r) for r in range(4)] == [
        policies,
        ["atp", "esa", "static"],
        ["esa", "static", "atp"],
        policies,
    ]
    _run(tmp_path / "run-01", policies, {"static": 9.0, "atp": 6.0, "esa": 5.0}, 0.3)
    _run(
        tmp_path / "run-02",
        series.rotated(policies, 1),
        {"static": 8.0, "atp": 4.0, "esa": 5.0},
        0.5,
    )
    _run(
        tmp_path / "run-03",
        series.rotated(policies, 2),
        {"static": 10.0, "atp": 5.5, "esa": 5.0},
        0.4,
    )
    doc = series.summarise(tmp_path)
    atp = doc["wins"]["esa_over_atp"]
    assert (atp["wins"], atp["runs"]) == (2, 3)
    assert (atp["min"], atp["median"], atp["max"]) == pytest.approx((0.8, 1.1, 1.2))
    assert doc["wins"]["esa_over_static"]["wins"] == 3
    assert doc["cpu_busy_share"]["esa"] == pytest.approx({"min": 0.3, "median": 0.4, "max": 0.5})
    assert doc["runs"][1]["order"] == ["atp", "esa", "static"]
    assert "| esa_over_atp | 2 of 3 |" in series.render(doc)
