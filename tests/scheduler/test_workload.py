from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.errors import WorkloadError
from scheduler.workload import load_workload, model_table, read_workload, write_workload


def test_philly_week_maps_every_row_to_a_job() -> None:
    jobs = load_workload("philly")
    assert len(jobs) == 671
    assert all(j.model in model_table() for j in jobs)
    assert {j.workers for j in jobs} == {2, 4, 8, 16, 32}
    assert load_workload("philly") == jobs


def test_synthetic_is_seeded_and_sized() -> None:
    jobs = load_workload("synthetic-100")
    assert len(jobs) == 100
    assert jobs == load_workload("synthetic-100")
    assert jobs != load_workload("synthetic-100", seed=1)
    assert [j.arrival_s for j in jobs] == sorted(j.arrival_s for j in jobs)


def test_workload_file_round_trips(tmp_path: Path) -> None:
    jobs = load_workload("synthetic-20")
    path = tmp_path / "w.csv"
    write_workload(jobs, path)
    assert read_workload(path) == jobs
    assert load_workload(path) == jobs


def test_bad_workloads_say_what_to_fix(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="synthetic-N"):
        load_workload("nonsense")
    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,arrival_s\n1,2\n")
    with pytest.raises(WorkloadError, match="header"):
        read_workload(bad)
