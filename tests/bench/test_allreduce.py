"""``bench.allreduce``: the error-bound check, and one quick run's JSON on both data paths."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.allreduce import check_result, main
from workers.quant import scale_bits


def test_check_result_is_below_one_within_the_bound_and_above_past_it() -> None:
    xs = np.random.default_rng(3).uniform(-1, 1, (2, 128)).astype(np.float64)
    exact, abs_total = xs.sum(axis=0), np.abs(xs).sum(axis=0)
    exponents = np.zeros(2, np.int8)
    assert check_result(exact.astype(np.float32), exact, abs_total, 2, exponents, 64) <= 1.0
    step = 2.0 ** -scale_bits(2)  # one fixed-point step at exponent 0: twice the bound
    off = (exact + 2 * step).astype(np.float32)
    assert check_result(off, exact, abs_total, 2, exponents, 64) > 1.0


@pytest.mark.slow
def test_quick_run_writes_a_case_per_data_path_and_k(tmp_path: Path) -> None:
    out = tmp_path / "allreduce.json"
    argv = ["--quick", "--sizes", "0.25", "--policies", "esa", "--json", str(out)]
    assert main(argv) == 0
    cases = json.loads(out.read_text())["cases"]
    assert [(c["datapath"], c["lanes"]) for c in cases] == [
        ("engine", 256),
        ("engine", 1024),
        ("python", 256),
        ("python", 1024),
    ]
    for case in cases:
        assert (case["size_mb"], case["workers"], case["policy"]) == (0.25, 2, "esa")
        assert {"inasched_MBps", "gloo_MBps", "ratio", "worst_error"} <= set(case)
        assert case["within_bound"] and case["identical"]
