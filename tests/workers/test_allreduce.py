"""Allreduce over the real soft switch and PS: every policy, 2/4/8 workers, with and without
injected loss, equals the float64 sum within the bound of ``workers.quant``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from p4ctl.protocol import Policy

from workers.quant import DEFAULT_EXPONENT, error_bound, next_exponents, scale_bits

SIZE = 3000  # 47 fragments of 64 lanes: several windows, and a short last fragment


def inputs(n: int, seed: int, spread: float = 1.0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.uniform(-1, 1, SIZE) * spread).astype(np.float32) for _ in range(n)]


def assert_within_bound(
    results: list[Any], xs: list[np.ndarray], exponents: np.ndarray | int
) -> None:
    exact = np.sum([x.astype(np.float64) for x in xs], axis=0)
    abs_total = np.sum([np.abs(x.astype(np.float64)) for x in xs], axis=0)
    bound = error_bound(exact, abs_total, len(xs), exponents)
    for w, got in enumerate(results):
        assert not isinstance(got, BaseException), f"worker {w} failed: {got!r}"
        assert got.dtype == np.float32 and got.shape == exact.shape
        excess = np.abs(got.astype(np.float64) - exact) - bound
        assert excess.max() <= 0, f"worker {w} exceeds the bound by {excess.max()}"
    for got in results[1:]:
        np.testing.assert_array_equal(got, results[0])  # every worker sees the same sum


def per_element(exps: np.ndarray, lanes: int) -> np.ndarray:
    return np.repeat(exps.astype(np.int64), lanes)[:SIZE]


@pytest.mark.parametrize("drop_rate", [0.0, 0.01], ids=["lossless", "loss1pct"])
@pytest.mark.parametrize("policy", list(Policy), ids=lambda p: p.name.lower())
@pytest.mark.parametrize("n", [2, 4, 8])
def test_allreduce_equals_float64_sum_within_bound(
    make_rig: Any, run_all: Any, n: int, policy: Policy, drop_rate: float
) -> None:
    rig = make_rig(aggregators=256, drop_rate=drop_rate, seed=n)
    static = {"part_size": 16} if policy == Policy.STATIC else {}
    rig.install(3, n, policy, **static)
    clients = rig.clients(3, n, policy, **static)
    try:
        first = inputs(n, seed=1)
        got = run_all(clients, first, key="grad")
        assert_within_bound(got, first, DEFAULT_EXPONENT)
        # The second allreduce of the same tensor takes its exponents from the first's sum.
        exps = next_exponents(
            np.pad(got[0], (0, -SIZE % 64)).reshape(-1, 64),
            np.full(-(-SIZE // 64), DEFAULT_EXPONENT, np.int8),
        )
        second = inputs(n, seed=2)
        got = run_all(clients, second, key="grad")
        assert_within_bound(got, second, per_element(exps, 64))
    finally:
        for c in clients:
            c.close()
    counters = rig.control.counters()
    assert counters.jobs[3]["job_aggregated"] > 0
    stats = [c.stats() for c in clients]
    assert all(s.fast_resent <= s.resent for s in stats)
    if drop_rate:
        assert counters.drops["injected_loss"] > 0
        assert sum(s.resent for s in stats) > 0  # every lost packet is sent again


def test_values_that_do_not_fit_take_the_raw_path(make_rig: Any, run_all: Any) -> None:
    rig = make_rig(aggregators=256)
    rig.install(5, 3, Policy.ATP)
    clients = rig.clients(5, 3, Policy.ATP)
    try:
        xs = inputs(3, seed=3, spread=1e6)  # far above 2**DEFAULT_EXPONENT
        xs[1][7] = np.float32(3e38)  # sums past float32's range are still summed in float64
        got = run_all(clients, xs)
        exact = np.sum([x.astype(np.float64) for x in xs], axis=0)
        ok = np.isfinite(exact.astype(np.float32))
        assert_within_bound([g[ok] for g in got], [x[ok] for x in xs], DEFAULT_EXPONENT)
    finally:
        for c in clients:
            c.close()
    assert rig.ps.counters().outcomes["completed"] >= 47  # every fragment finished at the PS


def test_concurrent_buckets_do_not_mix(make_rig: Any) -> None:
    rig = make_rig(aggregators=256)
    rig.install(2, 2, Policy.ESA)
    clients = rig.clients(2, 2, Policy.ESA)
    try:
        sizes = [100, 5000, 1, 700]
        rng = np.random.default_rng(4)
        xs = [[rng.uniform(-1, 1, s).astype(np.float32) for s in sizes] for _ in range(2)]
        pending = [
            [c.allreduce_async(x, key=("bucket", i)) for i, x in enumerate(xs[w])]
            for w, c in enumerate(clients)
        ]
        for w in range(2):
            for i, p in enumerate(pending[w]):
                exact = xs[0][i].astype(np.float64) + xs[1][i]
                bound = error_bound(exact, np.abs(xs[0][i]) + np.abs(xs[1][i]), 2, 0)
                assert np.all(np.abs(p.wait(30) - exact) <= bound)
    finally:
        for c in clients:
            c.close()


def test_scale_bits_leave_room_for_an_n_way_sum() -> None:
    for n in range(1, 33):
        assert n * 2 ** scale_bits(n) <= 2**30


@pytest.mark.parametrize("lanes", [512, 1024])
@pytest.mark.parametrize("policy", list(Policy), ids=lambda p: p.name.lower())
def test_allreduce_with_wide_software_lanes(
    make_rig: Any, run_all: Any, policy: Policy, lanes: int
) -> None:
    """k=512 and 1,024 (2,072- and 4,120-byte datagrams, loopback only) give the same bounded,
    identical sums, with loss, through the switch and the PS on each data path."""
    rig = make_rig(aggregators=256, lanes=lanes, drop_rate=0.01, seed=lanes)
    static = {"part_size": 16} if policy == Policy.STATIC else {}
    rig.install(4, 3, policy, **static)
    clients = rig.clients(4, 3, policy, **static)
    try:
        xs = inputs(3, seed=lanes)
        xs[1][5] = 1e6  # a fragment that does not fit its exponent: raw floats via the PS
        got = run_all(clients, xs, key="wide")
        assert_within_bound(got, xs, DEFAULT_EXPONENT)
        assert all(
            c.stats().results_switch + c.stats().results_ps == -(-SIZE // lanes) for c in clients
        )
    finally:
        for c in clients:
            c.close()
