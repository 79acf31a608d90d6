"""``bench.allreduce``: the error-bound check, the grids, and one quick run's JSON."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.allreduce import DEFAULT_GRID, FULL_GRID, _grid, _parser, check_result, main
from workers.quant import scale_bits


def test_check_result_is_below_one_within_the_bound_and_above_past_it() -> None:
    xs = np.random.default_rng(3).uniform(-1, 1, (2, 128)).astype(np.float64)
    exact, abs_total = xs.sum(axis=0), np.abs(xs).sum(axis=0)
    exponents = np.zeros(2, np.int8)
    assert check_result(exact.astype(np.float32), exact, abs_total, 2, exponents, 64) <= 1.0
    step = 2.0 ** -scale_bits(2)  # one fixed-point step at exponent 0: twice the bound
    off = (exact + 2 * step).astype(np.float32)
    assert check_result(off, exact, abs_total, 2, exponents, 64) > 1.0


def test_the_default_grid_is_a_part_of_the_full_one_and_flags_replace_its_axes() -> None:
    parser = _parser()
    assert _grid(parser, parser.parse_args([])) == DEFAULT_GRID
    assert _grid(parser, parser.parse_args(["--full"])) == FULL_GRID
    for axis in ("sizes_mb", "workers", "lanes"):
        assert set(getattr(DEFAULT_GRID, axis)) <= set(getattr(FULL_GRID, axis))
    chosen = _grid(parser, parser.parse_args(["--full", "--lanes", "64", "--workers", "3"]))
    assert (chosen.sizes_mb, chosen.workers, chosen.lanes) == (FULL_GRID.sizes_mb, (3,), (64,))
    with pytest.raises(SystemExit):
        _grid(parser, parser.parse_args(["--lanes", "100"]))


@pytest.mark.slow
def test_quick_run_writes_a_case_per_k(tmp_path: Path) -> None:
    out = tmp_path / "allreduce.json"
    argv = ["--quick", "--sizes", "0.25", "--policies", "esa", "--lanes", "256,1024"]
    assert main([*argv, "--json", str(out)]) == 0
    cases = json.loads(out.read_text())["cases"]
    assert [c["lanes"] for c in cases] == [256, 1024]
    for case in cases:
        assert (case["size_mb"], case["workers"], case["policy"]) == (0.25, 2, "esa")
        assert {"inasched_MBps", "gloo_MBps", "ratio", "worst_error"} <= set(case)
        assert case["within_bound"] and case["identical"]
