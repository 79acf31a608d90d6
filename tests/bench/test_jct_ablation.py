"""The ablations in ``inasched bench jct --sim``: esa's gain over atp decomposed into release,
preemption and priority, factors that multiply to it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench.jct.ablation import needs_baseline
from bench.jct.cli import main

ABLATED = "atp,esa-nopreempt,esa-norelease,esa"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # A pool of 512 under 12 synthetic jobs of window 128: memory contends.
    out = tmp_path_factory.mktemp("ablation")
    argv = ["--workload", "synthetic-12", "--policies", ABLATED, "--set", "aggregators=512"]
    assert main([*argv, "--out", str(out), "--quiet"]) == 0
    return out


def test_every_ablation_is_a_policy_of_the_run(run_dir: Path) -> None:
    doc = json.loads((run_dir / "summary.json").read_text())
    assert list(doc["policies"]) == ABLATED.split(",")


def test_the_factors_multiply_to_esa_over_atp(run_dir: Path) -> None:
    doc = json.loads((run_dir / "summary.json").read_text())
    d = doc["decomposition"]
    avg = {name: p["avg_jct"] for name, p in doc["policies"].items()}
    assert d["esa_over_atp"] == pytest.approx(avg["atp"] / avg["esa"])
    assert d["esa_over_atp"] == pytest.approx(doc["ratios"]["esa_over_atp"])
    assert d["release"] == pytest.approx(avg["atp"] / avg["esa-nopreempt"])
    assert math.prod((d["release"], d["preemption"], d["priority"])) == pytest.approx(
        d["esa_over_atp"]
    )
    assert d["preemption_without_release"] == pytest.approx(avg["atp"] / avg["esa-norelease"])
    other = d["preemption_without_release"] * d["release_with_preemption"]
    assert other == pytest.approx(d["esa_over_atp"])


def test_the_report_shows_the_decomposition(run_dir: Path) -> None:
    report = (run_dir / "report.md").read_text()
    assert "## Where esa's gain over atp comes from" in report
    for row in ("| release | atp / esa-nopreempt |", "| priority | esa with fifo levels / esa"):
        assert row in report


def test_no_decomposition_without_the_chain(tmp_path: Path) -> None:
    assert not needs_baseline(("atp", "esa"), "srtf")
    assert not needs_baseline(("atp", "esa-nopreempt", "esa"), "fifo")  # esa is the baseline
    assert needs_baseline(("static", "atp", "esa-nopreempt", "esa"), "srtf")
    argv = ["--workload", "synthetic-3", "--policies", "atp,esa", "--out", str(tmp_path)]
    assert main([*argv, "--quiet"]) == 0
    assert "decomposition" not in json.loads((tmp_path / "summary.json").read_text())
