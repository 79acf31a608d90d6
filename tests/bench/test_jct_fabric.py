"""``inasched bench jct --topology``: a small end-to-end run and sweep on a fabric, the score's
arithmetic, and every bad fabric argument as one line with exit status 2."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from bench.jct.cli import main
from bench.jct.fabric import SCORE_DEFINITION, FabricSetting, ina_score
from scheduler.config import RunResult, SimConfig
from scheduler.fabricsim import FabricJob, FabricRun
from scheduler.jobs import JobResult

TOPOLOGY = "scheduler/data/topology-2tors.json"


def test_a_fabric_run_reports_topology_placement_and_each_policys_score(tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = ["--workload", "synthetic-12", "--topology", TOPOLOGY, "--placement", "spread",
            "--policies", "esa,tiered", "--set", "spine_memory=256", "--out", str(out),
            "--quiet"]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads((out / "summary.json").read_text())
    fabric = doc["fabric"]
    assert fabric["placement"] == "spread" and fabric["score_definition"] == SCORE_DEFINITION
    assert "256 above" in fabric["topology"] and "spine_memory=256" in fabric["topology"]
    for policy in ("esa", "tiered"):
        got = fabric["policies"][policy]
        assert got["t_ina_s"] * (1 - 1e-9) <= got["t_s"] < got["t_none_s"]
        assert 0 < got["ina_score"] <= 1 + 1e-9
    assert doc["parameters"]["placement"] == "spread"
    report = (out / "report.md").read_text()
    assert "Placement: spread" in report and "Topology: 3 switches" in report
    assert "| tiered |" in report and "Mina's INA efficiency score" in report
    assert "Validation: fluid model against the fragment-level model" not in report


def test_a_fabric_sweep_has_score_columns_and_the_fabric_heatmaps(tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = ["--workload", "synthetic-8", "--topology", TOPOLOGY, "--policies", "esa,tiered",
            "--sweep", "racks=2,4", "--sweep", "memory=512,2048", "--out", str(out),
            "--quiet"]  # fmt: skip
    assert main(argv) == 0
    with open(out / "sweep.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["racks"], r["memory"]) for r in rows] == [
        ("2", "512"), ("2", "2048"), ("4", "512"), ("4", "2048")
    ]  # fmt: skip
    assert all(float(r["tiered_ina_score"]) > 0 and float(r["esa_over_tiered"]) > 0 for r in rows)
    assert (out / "heatmap_esa_over_tiered.png").exists()
    doc = json.loads((out / "racks=4,memory=512" / "summary.json").read_text())
    assert (
        "4 racks" in doc["fabric"]["topology"]
        and "aggregators 512 per ToR" in (doc["fabric"]["topology"])
    )
    assert doc["parameters"]["aggregators"] == 512


def _run(times: dict[int, tuple[float, float]], jobs: list[FabricJob]) -> FabricRun:
    results = tuple(
        JobResult(i, 0.0, start, end, 0.0, 0.0, 0.0, 0.0) for i, (start, end) in times.items()
    )
    return FabricRun(RunResult(SimConfig(), results, (), 0), tuple(jobs), "f", "p")


def test_the_score_is_a_ratio_of_host_weighted_sums_from_admission() -> None:
    jobs = [
        FabricJob(0, 1, (("tor0", 1),), ("tor0",), 0.0, t_ina_s=10.0, t_none_s=20.0),
        FabricJob(1, 3, (("tor0", 2), ("tor1", 1)), ("tor0", "tor1", "spine"), 4.0,
                  t_ina_s=10.0, t_none_s=30.0),
    ]  # fmt: skip
    # Job 0 runs 15 s after queueing 100 s (not counted); job 1 runs 10 s, as with exclusive INA.
    score = ina_score(_run({0: (100.0, 115.0), 1: (0.0, 10.0)}, jobs))
    assert score.t_s == 15 + 3 * 10 and score.t_ina_s == 10 + 30 and score.t_none_s == 20 + 90
    assert score.score == pytest.approx((110 - 45) / (110 - 40))
    assert (score.cross_rack, score.at_tors) == (1, 1)


def test_a_fabric_setting_builds_what_its_keys_say() -> None:
    setting = FabricSetting(TOPOLOGY, "packed").with_value("racks", "3")
    setting = setting.with_value("spine_memory", "100").with_value("oversubscription", "4")
    fabric = setting.fabric()
    assert [t.name for t in fabric.tors] == ["tor0", "tor1", "tor2"]
    assert fabric.root.aggregators == 100 and fabric.tors[0].aggregators == 16384
    assert fabric.uplink_gbps("tor0") == pytest.approx(800 / 4)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--policies", "tiered"], "unknown policies ['tiered']"),
        (["--placement", "spread"], "--placement places jobs onto a fabric's racks"),
        (["--topology", "/no/such.json"], "cannot read the topology file /no/such.json"),
        (["--topology", TOPOLOGY, "--sweep", "racks=0"], "racks must be > 0"),
        (["--topology", TOPOLOGY, "--set", "spine_memory=x"], "spine_memory must be a whole"),
        (["--topology", TOPOLOGY, "--placement", "trace"], "the trace carries none"),
        (["--topology", TOPOLOGY, "--emu", "--policies", "esa,tiered"], "tiered run in --sim"),
        (["--topology", TOPOLOGY, "--emu", "--emu-hosts", "127.0.1.1"], "the topology's racks"),
        (["--topology", TOPOLOGY, "--sweep", "racks=2", "--sweep", "racks=4"], "twice"),
    ],
)
def test_a_bad_fabric_argument_is_one_line(
    argv: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--workload", "synthetic-3", "--out", str(tmp_path / "out"), "--quiet", *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and says in err, err
    assert not (tmp_path / "out").exists()
