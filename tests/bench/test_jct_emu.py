"""``bench.jct --emu`` end to end on loopback: service, soft switch, PS and worker processes.

One minimal run (2 jobs x 2 workers, one policy, tiny gradients) checks the output files'
schema and that every JCT in them is the one the service's job store reported.
"""

from __future__ import annotations

import csv
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

import bench.jct.emu as emu
from bench.jct.cli import main
from bench.jct.output import PLOTS
from bench.jct.results import JOB_COLUMNS
from scheduler.workload import JobSpec, write_workload

POLICY_KEYS = {"avg_jct", "p50_jct", "p95_jct", "p99_jct", "memory_utilisation", "in_switch_share"}


@pytest.mark.slow
def test_minimal_emu_run_writes_outputs_from_the_job_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workload = tmp_path / "two.csv"
    write_workload(
        [
            JobSpec(0, 0.0, 2, "ResNet-50", 102_200_000, 0.3232, 50),
            JobSpec(1, 1.0, 2, "ResNet-101", 178_200_000, 0.2954, 50),
        ],
        workload,
    )
    # Tiny: 3 iterations of 5-9 kB gradients (20-35 fragments), arrivals 0.5 s apart.
    monkeypatch.setattr(emu, "EMU_JOBS", 2)
    monkeypatch.setattr(emu, "EMU_ITERATIONS", 3)
    monkeypatch.setattr(emu, "GRAD_DIVISOR", 20_000)
    monkeypatch.setattr(emu, "ARRIVAL_GAP_S", 0.5)
    monkeypatch.setattr(emu, "JOB_TIMEOUT_S", 50.0)
    store_rows: list[dict[str, Any]] = []
    real_wait = emu._wait

    def spy(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        rows = real_wait(*args, **kwargs)
        store_rows.extend(rows)
        return rows

    monkeypatch.setattr(emu, "_wait", spy)
    out = tmp_path / "out"
    argv = ["--workload", str(workload), "--policies", "esa", "--out", str(out), "--emu"]
    assert main([*argv, "--quiet"]) == 0

    for name in ("summary.json", "jobs.csv", "report.md", "workload.csv", *PLOTS):
        assert (out / name).stat().st_size > 0, name
    doc = json.loads((out / "summary.json").read_text())
    assert set(doc) == {"policies", "ratios", "parameters", "emu_cpu"}
    assert set(doc["policies"]) == {"esa"}
    assert set(doc["policies"]["esa"]) == POLICY_KEYS
    assert doc["parameters"]["backend"] == "emu"
    assert doc["parameters"]["emu.jobs"] == 2
    report = (out / "report.md").read_text()
    assert "| policy | aggregated | bypassed | preempted | evicted | resent |" in report
    assert "| esa | 0 |" not in report  # the switch counted the two jobs' contributions

    # The JCTs are the job store's: GET /jobs rows, finished, jct_s = finished - submitted.
    assert len(store_rows) == 2
    store_jct = set()
    for row in store_rows:
        assert row["state"] == "finished"
        assert row["policy"] == "esa"
        assert row["iterations_done"] == row["iterations"] == 3
        span = datetime.fromisoformat(row["finished_at"]) - datetime.fromisoformat(
            row["submitted_at"]
        )
        assert row["jct_s"] == pytest.approx(span.total_seconds(), abs=1e-3)
        assert row["bytes_switch"] + row["bytes_ps"] > 0
        store_jct.add(round(row["jct_s"], 6))
    with open(out / "jobs.csv", newline="") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames or ()) == JOB_COLUMNS
        rows = list(reader)
    assert len(rows) == 2
    assert {round(float(r["jct_s"]), 6) for r in rows} == store_jct
    assert doc["policies"]["esa"]["avg_jct"] == pytest.approx(sum(store_jct) / 2, rel=1e-6)


class _SwitchBody:
    status_code = 200

    def json(self) -> dict[str, Any]:
        # 10 aggregators: 2 partial, 3 complete, 1 flushed (static's), the rest free.
        return {"aggregators": 10, "runs": [[0, 2, 7, 1], [2, 3, 7, 2], [5, 1, 8, 3]]}


class _Http:
    def __init__(self, bodies: list[dict[str, Any]] | None = None) -> None:
        self.bodies = bodies or []

    def get(self, path: str) -> Any:
        assert path == "/switch"
        if not self.bodies:
            return _SwitchBody()
        body = self.bodies.pop(0)
        return type("Resp", (), {"status_code": 200, "json": lambda self: body})()


def switch_body(jobs: dict[str, dict[str, int]]) -> dict[str, Any]:
    return {"aggregators": 10, "runs": [], "counters": {"jobs": jobs, "drops": {}}}


def test_dataplane_counters_take_each_jobs_latest_sample_and_survive_id_reuse() -> None:
    http = _Http(
        [
            switch_body({"1": {"job_aggregated": 10, "job_resent": 1}, "2": {"job_aggregated": 4}}),
            switch_body({"1": {"job_aggregated": 30, "job_resent": 2}}),  # job 2 has left
            switch_body({"1": {"job_aggregated": 5, "job_bypassed": 3}}),  # a new job, id 1
        ]
    )
    util: list[tuple[float, float]] = []
    counters: dict[str, list[dict[str, int]]] = {}
    for _ in range(3):
        emu._sample_switch(http, util, 0.0, (1,), counters)  # type: ignore[arg-type]
    total = emu._dataplane(counters)
    assert total["job_aggregated"] == 30 + 4 + 5
    assert (total["job_resent"], total["job_bypassed"], total["job_preempted"]) == (2, 3, 0)


@pytest.mark.parametrize(("policy", "share"), [("static", 0.6), ("atp", 0.5), ("esa", 0.2)])
def test_utilisation_counts_what_another_job_cannot_claim(policy: str, share: float) -> None:
    util: list[tuple[float, float]] = []
    occupied = emu.occupancy_states(policy)
    emu._sample_switch(_Http(), util, 0.0, occupied, {})  # type: ignore[arg-type]
    assert util[0][1] == pytest.approx(share)
