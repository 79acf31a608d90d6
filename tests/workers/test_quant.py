"""Block floating point: the stated error bound holds, and an n-way int32 sum cannot overflow."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from workers.quant import (
    MAX_EXPONENT,
    dequantize,
    error_bound,
    next_exponents,
    quantize,
    scale_bits,
)

LANES = 8


@settings(max_examples=100, deadline=None)
@given(
    n=st.integers(1, 32),
    exponent=st.integers(-20, 20),
    data=st.data(),
)
def test_fixed_point_sum_is_within_the_bound_and_never_overflows(
    n: int, exponent: int, data: st.DataObject
) -> None:
    limit = 2.0**exponent
    values = st.floats(-limit, limit, allow_nan=False, width=32, exclude_max=True, exclude_min=True)
    xs = [data.draw(arrays(np.float32, LANES, elements=values)) for _ in range(n)]
    exps = np.array([exponent], np.int8)
    quantized = [quantize(x.reshape(1, -1), exps, n) for x in xs]
    assert not any(q.raw[0] for q in quantized)
    total_lanes = np.sum([q.lanes[0].astype(np.int64) for q in quantized], axis=0)
    assert np.abs(total_lanes).max() < 2**31  # what the switch's int32 adders hold
    result = dequantize(total_lanes.astype(np.int32), exponent, n).astype(np.float32)
    exact = np.sum([x.astype(np.float64) for x in xs], axis=0)
    abs_total = np.sum([np.abs(x.astype(np.float64)) for x in xs], axis=0)
    assert np.all(np.abs(result - exact) <= error_bound(exact, abs_total, n, exponent))


def test_values_at_or_above_the_limit_and_non_finite_go_raw() -> None:
    frags = np.array([[0.5, -0.25], [1.0, 0.0], [np.nan, 0.0], [-np.inf, 0.0]], np.float32)
    q = quantize(frags, np.zeros(4, np.int8), 2)
    assert q.raw.tolist() == [False, True, True, True]
    assert q.lanes[0].tolist() == [2 ** (scale_bits(2) - 1), -(2 ** (scale_bits(2) - 2))]


def test_next_exponent_leaves_one_bit_of_headroom_and_keeps_the_old_one_for_zeros() -> None:
    sums = np.array([[3.0, -1.0], [0.0, 0.0], [np.inf, 1.0], [1e-3, 0.0]], np.float32)
    got = next_exponents(sums, np.array([5, 6, 7, 8], np.int8))
    assert got.tolist() == [3, 6, 7, -8]  # 3 < 2**2, plus one bit; 1e-3 < 2**-9, plus one
    assert next_exponents(np.array([[1e30]], np.float32), np.zeros(1, np.int8)) == MAX_EXPONENT
