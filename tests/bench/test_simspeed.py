"""bench.simspeed --validate-only: the light and the contended families side by side."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.simspeed import POINT_TARGET_S, main


def test_validate_only_prints_light_and_new_families_side_by_side(
    capsys: pytest.CaptureFixture[str],
) -> None:
    main(["--validate-only", "--cases", "1", "--families", "light,ps-0.6"])
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines()]
    table = [r for r in rows if r and r[0] in ("light", "ps-0.6") and len(r) == 6]
    assert {(r[0], r[1]) for r in table} == {
        (f, p) for f in ("light", "ps-0.6") for p in ("static", "atp", "esa")
    }
    # Every row states whether its family is within the bound.
    assert all(r[-1] in ("yes", "NO") for r in table)
    assert "fragment-level vs aggregate simulator" in out


def test_speed_reports_each_policy_and_its_target_ratio_as_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "speed.json"
    main(["--workload", "synthetic-20", "--speed-only", "--json", str(out)])
    [figures] = json.loads(out.read_text())
    assert figures["workload"] == "synthetic-20"
    assert set(figures["policies"]) == {"static", "atp", "esa"}
    total = sum(p["cpu_s"] for p in figures["policies"].values())
    assert figures["cpu_s"] == pytest.approx(total)
    assert figures["target_s"] is None and figures["over_target"] is None  # no stated target
    assert "aggregate vs fragment-level" not in capsys.readouterr().out


def test_a_heatmap_point_is_timed_against_the_point_target(tmp_path: Path) -> None:
    out = tmp_path / "point.json"
    argv = ["--workload", "synthetic-20", "--speed-only", "--json", str(out)]
    main([*argv, "--set", "aggregators=1024", "--set", "load=4"])
    [figures] = json.loads(out.read_text())
    assert figures["params"]["aggregators"] == 1024 and figures["params"]["load"] == 4.0
    assert figures["over_target"] == pytest.approx(figures["cpu_s"] / POINT_TARGET_S)


def test_speed_times_the_policies_asked_for_ablations_too(tmp_path: Path) -> None:
    out = tmp_path / "some.json"
    argv = ["--workload", "synthetic-20", "--speed-only", "--json", str(out)]
    main([*argv, "--policies", "esa-nopreempt,esa", "--set", "aggregators=2048"])
    [figures] = json.loads(out.read_text())
    assert list(figures["policies"]) == ["esa-nopreempt", "esa"]
    assert figures["target_s"] is None  # the targets are for all three policies together


def test_speed_runs_the_fabric_simulator_on_a_topology_with_its_racks(tmp_path: Path) -> None:
    out = tmp_path / "fabric.json"
    topology = "scheduler/data/topology-2tors.json"
    argv = ["--workload", "synthetic-20", "--speed-only", "--json", str(out)]
    main([*argv, "--topology", topology, "--racks", "4"])
    [figures] = json.loads(out.read_text())
    assert "4 racks" in figures["topology"]
    assert set(figures["policies"]) == {"static", "atp", "esa"}
    assert all(p["events"] > 0 for p in figures["policies"].values())


def test_racks_without_a_topology_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--workload", "synthetic-20", "--speed-only", "--racks", "4"])
    assert "--racks sets a fabric's racks; add --topology FILE" in capsys.readouterr().err
