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


BUNDLED = Path(__file__).resolve().parents[2] / "scheduler" / "data" / "jobs_philly.csv"


def _trace(tmp_path: Path, lines: list[str], name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_philly_format_file_is_mapped_as_the_bundled_week(tmp_path: Path) -> None:
    rows = BUNDLED.read_text().splitlines()
    path = _trace(tmp_path, rows[:41])  # the header and the week's first 40 jobs
    for seed in (0, 7):
        week = load_workload("philly", seed)
        assert load_workload(f"philly:{path}", seed) == week[:40]
    # The mapping reads its four columns by name: their order and the others do not matter.
    header = rows[0].split(",")
    order = [header.index(c) for c in ("duration_s", "num_workers", "arrival_s", "job_id")]
    shuffled = [",".join(row.split(",")[i] for i in order) for row in rows[:41]]
    other = _trace(tmp_path, shuffled, "shuffled.csv")
    assert load_workload(f"philly:{other}") == load_workload(f"philly:{path}")


@pytest.mark.parametrize(
    ("lines", "says"),
    [
        (["job_id,arrival_s,num_gpus", "0,1,4"], "no column num_workers, duration_s"),
        (["job_id,arrival_s,num_workers,duration_s", "0,1,4,60", "1,2,four,60"], "trace.csv:3"),
        (["job_id,arrival_s,num_workers,duration_s", "0,1,4,-60"], "duration_s must be"),
        (["job_id,arrival_s,num_workers,duration_s", "0,1,0,60"], "workers, iterations"),
        (["job_id,arrival_s,num_workers,duration_s", "0,1,4,60", "0,2,4,60"], "3: job id 0 again"),
        (["job_id,arrival_s,num_workers,duration_s"], "no jobs"),
        ([], "no column job_id"),
    ],
)
def test_a_bad_philly_file_is_one_error_naming_the_file(
    tmp_path: Path, lines: list[str], says: str
) -> None:
    path = _trace(tmp_path, lines)
    with pytest.raises(WorkloadError, match=says) as info:
        load_workload(f"philly:{path}")
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_an_unreadable_philly_file_is_one_error(tmp_path: Path) -> None:
    (tmp_path / "binary.csv").write_bytes(b"\xff\xfe\x00job_id")
    for path in (tmp_path / "missing.csv", tmp_path, tmp_path / "binary.csv"):
        with pytest.raises(WorkloadError, match="cannot read the Philly trace"):
            load_workload(f"philly:{path}")
