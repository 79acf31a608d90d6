"""``bench.allreduce --topology``: the plan it wires, a bad file's one-line error, and a tiny
run's shape (two levels beside one level and gloo, with exact sums)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.allreduce import main
from bench.allreduce_fabric import PATHS, plan
from scheduler.fabric import Fabric, Rack, Switch, load_fabric

TOPOLOGY = Path(__file__).parents[2] / "scheduler" / "data" / "topology-2tors.json"


def test_workers_are_split_evenly_over_the_tors_in_order() -> None:
    fabric = Fabric(
        (Switch("s", 64), *(Switch(f"t{i}", 64, "s", rack=Rack()) for i in range(3))), lanes=64
    )
    assert plan(fabric, 4, "f").racks == ((0, 1), (2,), (3,))
    assert plan(fabric, 2, "f").tors == ("t0", "t1")
    assert plan(load_fabric(TOPOLOGY), 4, "f").racks == ((0, 1), (2, 3))


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ("not json", "not JSON"),
        ({"switches": [{"name": "only", "rack": {}}]}, "has 1"),
        (
            {
                "switches": [
                    {"name": "s", "aggregators": 64},
                    {"name": "a", "aggregators": 32, "parent": "s", "rack": {}},
                    {"name": "b", "aggregators": 64, "parent": "s", "rack": {}},
                ]
            },
            "same aggregators",
        ),
        (
            {
                "switches": [
                    {"name": "s"},
                    {"name": "m", "parent": "s"},
                    {"name": "a", "parent": "m", "rack": {}},
                ]
            },
            "has 3",
        ),
    ],
)
def test_a_topology_it_cannot_wire_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], doc: object, says: str
) -> None:
    path = tmp_path / "t.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    assert main(["--topology", str(path)]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_missing_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--topology", str(tmp_path / "none.json")]) == 2
    err = capsys.readouterr().err
    assert "cannot read" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "flags", [["--lanes", "256"], ["--full"], ["--workers", "1"], ["--sizes", "x"], ["--reps", "0"]]
)
def test_flags_the_file_decides_or_out_of_range_are_usage_errors(flags: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--topology", str(TOPOLOGY), *flags])
    assert exit_.value.code == 2


@pytest.mark.slow
def test_a_tiny_run_times_every_path_and_the_two_level_sums_are_exact(tmp_path: Path) -> None:
    out = tmp_path / "fabric.json"
    argv = ["--topology", str(TOPOLOGY), "--sizes", "0.05", "--reps", "2", "--json", str(out)]
    assert main(argv) == 0
    (case,) = json.loads(out.read_text())["cases"]
    assert (case["workers"], case["policy"], case["reps"]) == (4, "esa", 2)
    assert tuple(case["paths"]) == PATHS
    for row in case["paths"].values():
        assert len(row["runs_s"]) == 2 and row["MBps_min"] <= row["MBps"] <= row["MBps_max"]
    for ratio in ("two_over_one", "two_over_gloo"):
        assert set(case[ratio]) == {"median", "min", "max"}
    two = case["paths"]["two-level"]
    assert two["within_bound"] and two["identical"] and two["worst_error"] <= 1.0
    # Fixed-point sums are the same whichever switch adds which part.
    assert case["same_sum_as_one_level"]
