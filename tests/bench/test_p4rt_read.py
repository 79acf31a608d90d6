"""``bench.p4rt_read``: its summary's ratios, and one small run on both protobuf runtimes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench.p4rt_read import main, summary


def test_summary_ratios_are_ratios_of_medians() -> None:
    runs: dict[str, dict[str, Any]] = {
        "python": {"protobuf": "7", "p4runtime_s": [4.0, 6.0, 5.0], "in_process_s": [1.0]},
        "upb": {"protobuf": "7", "p4runtime_s": [0.2, 0.1, 0.3], "in_process_s": [0.02, 0.01]},
    }
    result = summary(runs)
    assert result["ratios"]["python_over_upb"] == pytest.approx(25.0)
    assert result["ratios"]["upb_over_in_process"] == pytest.approx(0.2 / 0.015)
    assert result["runtimes"]["python"]["p4runtime_s"] == {"median": 5.0, "min": 4.0, "max": 6.0}


def test_summary_leaves_out_an_unavailable_runtime() -> None:
    runs: dict[str, dict[str, Any]] = {
        "python": {"error": "boom"},
        "upb": {"protobuf": "7", "p4runtime_s": [0.1], "in_process_s": [0.1]},
    }
    result = summary(runs)
    assert "python_over_upb" not in result["ratios"]
    assert result["runtimes"]["python"] == {"error": "boom"}


def test_small_run_reads_over_both_runtimes(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--aggregators", "256", "--repeats", "2", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert set(result["runtimes"]) == {"python", "upb"}
    for runtime, figures in result["runtimes"].items():
        assert "error" not in figures, figures
        assert len(result["raw"][runtime]["p4runtime_s"]) == 2
        assert result["raw"][runtime]["implementation"] == runtime
    assert result["ratios"]["python_over_upb"] > 0
