"""``bench.training --quick``: two torchrun ranks learn the digits under gloo and under the
inasched backend with the asynchronous hook, and the curves agree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.training import main


@pytest.mark.slow
def test_quick_run_learns_the_digits_through_the_switch_as_gloo_does(tmp_path: Path) -> None:
    out = tmp_path / "training.json"
    assert main(["--quick", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    gloo, inasched = result["runs"]
    assert (gloo["mode"], inasched["mode"]) == ("gloo", "async")
    assert gloo["workers"] == inasched["workers"] == 2
    assert len(gloo["loss"]) == len(inasched["loss"]) == result["steps"]
    assert gloo["loss"][-1] < 0.5 * gloo["loss"][0]  # it does learn
    assert gloo["final_accuracy"] > 50
    # The gradients went through the switch (the hook bypasses the backend's allreduce).
    assert inasched["bytes_switch"] > 0
    assert inasched["fallbacks"] == {}
    (versus,) = result["comparisons"]
    assert versus["max_loss_rel_diff"] < 1e-3
    assert abs(versus["accuracy_delta"]) <= 1.0
    assert versus["step_time_ratio"] > 0
