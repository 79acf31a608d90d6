"""bench.streams at a tiny size: both cases run against real service processes with real
open event streams, and the table, the ratios and --json come out. No wall-clock asserts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.streams import main


def test_a_tiny_run_prints_both_cases_their_ratios_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_json = tmp_path / "streams.json"
    args = ["--streams", "4", "--jobs", "20", "--rate", "50", "--repeats", "1"]
    assert main([*args, "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    for key in ("p99_ms", "round_ms", "tick_ms"):
        assert f"{key}: 4 streams / none = " in out
    document = json.loads(out_json.read_text())
    assert [s["streams"] for s in document["samples"]] == [0, 4]
    assert all(s["errors"] == 0 for s in document["samples"])
    assert set(document["medians"]) == {"0", "4", "ratio"}


def test_nonsense_sizes_are_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--streams", "0"])
    assert exit_.value.code == 2
