"""``--workload philly:FILE``: any CSV in the public Philly trace's format, mapped as the bundled
week is, with the mapping's seed named in the output."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from bench.jct.cli import main
from scheduler.registry import ablation_names, policy_names
from scheduler.scheduler import too_wide
from scheduler.workload import philly_jobs

BUNDLED = Path(__file__).resolve().parents[2] / "scheduler" / "data" / "jobs_philly.csv"


def test_a_philly_format_trace_runs_with_its_seed_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "week.csv"
    trace.write_text("\n".join(BUNDLED.read_text().splitlines()[:9]) + "\n")  # 8 jobs
    out = tmp_path / "out"
    argv = ["--workload", f"philly:{trace}", "--policies", "atp,esa", "--seed", "3"]
    assert main([*argv, "--out", str(out), "--quiet"]) == 0
    assert f"philly:{trace}: 8 jobs, models mapped with seed 3 (--seed)" in capsys.readouterr().out
    doc = json.loads((out / "summary.json").read_text())
    assert doc["parameters"]["jobs"] == 8 and doc["parameters"]["seed"] == 3
    mapping = doc["parameters"]["model_mapping"]
    assert f"the Philly-format trace {trace}" in mapping and "random.Random(3)" in mapping
    assert "random.Random(3)" in (out / "report.md").read_text()
    # Mapped exactly as the bundled week's first 8 jobs are, with the same seed.
    with open(out / "jobs.csv", newline="") as f:
        models = {(int(r["job_id"]), r["model"]) for r in csv.DictReader(f)}
    assert models == {(j.job_id, j.model) for j in philly_jobs(3)[:8]}


def test_a_bad_philly_trace_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "log.csv"
    trace.write_text("job,submitted,gpus\n1,2017-10-03,4\n")
    with pytest.raises(SystemExit) as info:
        main(["--workload", f"philly:{trace}", "--out", str(tmp_path / "out"), "--quiet"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{trace}: not in the Philly trace's format, no column job_id" in err


def test_a_philly_job_wider_than_the_switch_is_refused_under_every_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A Philly job of 64 GPUs (a later week of the trace has one); one switch counts 32.
    trace = tmp_path / "wide.csv"
    trace.write_text(
        "job_id,submit_time,arrival_s,num_gpus,num_workers,servers_8gpu,duration_s,gpu_hours,vc\n"
        "0,2017-11-07 00:00:10,10,4,4,1,60,0.067,ee9e8c\n"
        "1,2017-11-07 00:00:20,20,64,64,8,90,1.6,ee9e8c\n"
        "2,2017-11-07 00:00:30,30,8,8,1,75,0.167,6214e9\n"
    )
    out = tmp_path / "out"
    policies = ",".join(policy_names() + ablation_names())
    argv = ["--workload", f"philly:{trace}", "--policies", policies, "--out", str(out)]
    assert main([*argv, "--quiet"]) == 0
    assert "Traceback" not in capsys.readouterr().err
    why = too_wide(64)
    assert why is not None
    doc = json.loads((out / "summary.json").read_text())
    assert set(doc["refused"]) == set(policy_names() + ablation_names())
    assert all(jobs == [{"job_id": 1, "reason": why}] for jobs in doc["refused"].values())
    with open(out / "jobs.csv", newline="") as f:
        assert {int(r["job_id"]) for r in csv.DictReader(f)} == {0, 2}
    assert f"- job 1, under every policy: {why}" in (out / "report.md").read_text()
