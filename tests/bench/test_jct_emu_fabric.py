"""``inasched bench jct --emu --topology``: the service on a fabric of soft switch processes,
each job's workers bound to addresses of the racks the fabric simulator placed it on.

One tiny run end to end (2 jobs of 2 workers across 2 racks, 3 iterations): the output files,
every job finished, the fabric section; and where the workers go, without processes."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

import bench.jct.emu as emu
import bench.jct.emufabric as emufabric
from bench.jct.cli import main
from bench.jct.emu import EmuError
from bench.jct.fabric import FabricSetting
from bench.jct.output import PLOTS
from bench.jct.params import BenchParams
from scheduler.fabric import load_fabric
from scheduler.workload import JobSpec, write_workload

# 2 racks of 2 one-GPU servers on 127.0.1.x and 127.0.2.x; the spine holds one static
# partition of a window of 32 (64 aggregators, two copies), each ToR two.
TOPOLOGY = """{
  "lanes": 64, "gpus_per_server": 1,
  "switches": [
    {"name": "spine", "aggregators": 64},
    {"name": "tor0", "aggregators": 128, "parent": "spine",
     "rack": {"servers": 2, "networks": ["127.0.1.0/24"]}},
    {"name": "tor1", "aggregators": 128, "parent": "spine",
     "rack": {"servers": 2, "networks": ["127.0.2.0/24"]}}
  ]
}
"""

JOBS = [
    JobSpec(0, 0.0, 2, "ResNet-50", 102_200_000, 0.3232, 50),
    JobSpec(1, 1.0, 2, "ResNet-101", 178_200_000, 0.2954, 50),
]


def _topology(tmp_path: Path, text: str = TOPOLOGY) -> Path:
    path = tmp_path / "topology.json"
    path.write_text(text)
    return path


@pytest.mark.slow
def test_a_tiny_fabric_emulation_runs_every_job_across_both_racks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workload = tmp_path / "two.csv"
    write_workload(JOBS, workload)
    monkeypatch.setattr(emu, "EMU_JOBS", 2)
    monkeypatch.setattr(emu, "EMU_ITERATIONS", 3)
    monkeypatch.setattr(emu, "GRAD_DIVISOR", 20_000)
    monkeypatch.setattr(emu, "ARRIVAL_GAP_S", 0.5)
    monkeypatch.setattr(emu, "JOB_TIMEOUT_S", 60.0)
    seen: list[tuple[list[str], dict[str, Any]]] = []
    real = emufabric._run_policy

    def spy(*args: Any) -> Any:
        hosts, topology = args[5], args[6]
        seen.append((list(hosts), json.loads(Path(topology).read_text())))
        return real(*args)

    monkeypatch.setattr(emufabric, "_run_policy", spy)
    out = tmp_path / "out"
    argv = ["--workload", str(workload), "--policies", "static,esa", "--out", str(out), "--emu",
            "--topology", str(_topology(tmp_path)), "--placement", "spread", "--quiet"]  # fmt: skip
    assert main(argv) == 0

    for name in ("summary.json", "jobs.csv", "report.md", "workload.csv", *PLOTS):
        assert (out / name).stat().st_size > 0, name
    doc = json.loads((out / "summary.json").read_text())
    assert set(doc["policies"]) == {"static", "esa"}
    assert doc["parameters"]["backend"] == "emu" and doc["parameters"]["placement"] == "spread"
    assert "64 above" in doc["parameters"]["topology"]
    with open(out / "jobs.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted((r["policy"], r["job_id"]) for r in rows) == [
        ("esa", "0"), ("esa", "1"), ("static", "0"), ("static", "1"),
    ]  # fmt: skip
    report = (out / "report.md").read_text()
    assert "## Fabric" in report and "Emulation: the service on one soft switch process" in report
    assert "| static |" in report and "| esa |" in report

    # Each policy's service ran on the file's three switches, each job's two workers one in
    # each rack (spread), every worker on an address of its own.
    assert len(seen) == 2
    for hosts, topology in seen:
        assert [s["name"] for s in topology["switches"]] == ["spine", "tor0", "tor1"]
        assert len(hosts) == len(set(hosts)) == 4
        for job in (hosts[0:2], hosts[2:4]):
            assert sorted(h.rsplit(".", 2)[1] for h in job) == ["1", "2"]


def test_workers_go_to_the_racks_the_simulator_placed_their_job_on(tmp_path: Path) -> None:
    jobs = [JobSpec(0, 0.0, 2, "ResNet-50", 4_000, 0.01, 2), JobSpec(1, 0.0, 1, "", 4_000, 0.01, 2)]
    setting = FabricSetting(str(_topology(tmp_path)), "packed")
    placed = emufabric.placements(jobs, "esa", BenchParams(), setting)
    # Packed: the two-server job fills tor0's rack, the one-server job goes to tor1's.
    assert placed == {0: (("tor0", 2),), 1: (("tor1", 1),)}
    hosts = emufabric.worker_hosts(jobs, placed, load_fabric(setting.path))
    assert hosts == ["127.0.1.1", "127.0.1.2", "127.0.2.1"]


def test_a_fabric_of_many_gpus_per_server_or_a_fabric_policy_is_refused(tmp_path: Path) -> None:
    run = emufabric.emu_fabric_runner(
        FabricSetting(
            str(
                _topology(
                    tmp_path, TOPOLOGY.replace('"gpus_per_server": 1', '"gpus_per_server": 8')
                )
            )
        )
    )
    with pytest.raises(EmuError, match="one worker per server; give it gpus_per_server 1"):
        run(JOBS, "esa", BenchParams())
    with pytest.raises(EmuError, match="tiered decides per switch"):
        run(JOBS, "tiered", BenchParams())
