"""The compiled fragment codec (``p4ctl._engine``: quantize_rows, dequantize_rows) is held to
``workers.quant``, the readable statement of block floating point, byte for byte: the lanes
and raw flags of the datagrams a `Transfer` builds (`quant.quantize`), the float32 sums it
dequantizes (`quant.dequantize`, or the float32 bits of a raw result) and the exponents it
picks for the next allreduce (`quant.next_exponents`), on values that reach every branch (raw
fragments, NaN, inf, subnormals, values at ``2**e``, exponents over the whole header byte)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from p4ctl import engine
from p4ctl.protocol import HEADER_DTYPE, HEADER_SIZE, LANE_DTYPE, RAW_DTYPE, Flag, Kind

from workers.quant import (
    DEFAULT_EXPONENT,
    MAX_EXPONENT,
    MIN_EXPONENT,
    dequantize,
    next_exponents,
    quantize,
)
from workers.rendezvous import HashedPlacement
from workers.transfer import Sender, Transfer

codec = engine.engine_module()

SPECIALS = np.array(
    [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-40, 3e38, 0.5, -1.0, 1.0, 2.0, 4.0],
    np.float32,
)


def values(rng: np.random.Generator, m: int, k: int, exps: np.ndarray, spice: float) -> np.ndarray:
    """Fragments mostly within their exponents (at 2**e and just below it too), some not."""
    scale = np.ldexp(np.float32(1.0), exps.astype(np.int32))[:, None]
    x = (rng.uniform(-1, 1, (m, k)) * scale).astype(np.float32)
    edge = rng.random((m, k)) < 0.02
    x[edge] = np.broadcast_to(scale, (m, k))[edge] * rng.choice([1, -1, 0.99999994], edge.sum())
    special = rng.random((m, k)) < spice
    x[special] = rng.choice(SPECIALS, special.sum())
    return x


def transfer(x: np.ndarray, k: int, fan_in: int) -> Transfer:
    return Transfer(x.reshape(-1), "key", k, 100, fan_in, None)


def wire_lanes(frags: np.ndarray, exps: np.ndarray, fan_in: int) -> tuple[bytes, np.ndarray]:
    """`quant.quantize`'s lanes on the wire (float32 bits where raw), and its raw mask."""
    q = quantize(frags, exps, fan_in)
    lanes = q.lanes.astype(LANE_DTYPE)
    lanes[q.raw] = frags[q.raw].astype(RAW_DTYPE).view(LANE_DTYPE)
    return lanes.tobytes(), q.raw


@settings(max_examples=120, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    m=st.integers(1, 300),
    k=st.sampled_from([64, 256]),
    fan_in=st.integers(1, 32),
    spice=st.sampled_from([0.0, 0.001, 0.05]),
)
def test_quantize_rows_builds_the_lanes_of_quantize(
    seed: int, m: int, k: int, fan_in: int, spice: float
) -> None:
    rng = np.random.default_rng(seed)
    exps = rng.integers(MIN_EXPONENT, MAX_EXPONENT + 1, m).astype(np.int8)
    x = values(rng, m, k, exps, spice)
    sender = Sender(job=9, worker=fan_in - 1, placement=HashedPlacement(seed=3, pool=4096))
    t = transfer(x, k, fan_in)
    t.activate()
    t.exponents = exps
    rows = t.datagrams(0, m, sender)
    lanes, raw = wire_lanes(x, exps, fan_in)
    assert rows[:, HEADER_SIZE:].tobytes() == lanes
    head = rows[:, :HEADER_SIZE].view(HEADER_DTYPE)[:, 0]
    np.testing.assert_array_equal(head["flags"] & int(Flag.RAW_FLOAT) != 0, raw)


def test_quantize_rows_sends_what_does_not_fit_as_raw_floats() -> None:
    x = np.zeros((3, 64), np.float32)
    x[0, 5] = 1.0  # exactly 2**0: does not fit exponent 0
    x[1, 7] = np.nan
    x[2] = 0.25
    t = transfer(x, 64, 2)
    sender = Sender(job=1, worker=0, placement=HashedPlacement(seed=1, pool=64))
    t.activate()
    rows = t.datagrams(0, 3, sender)
    head = rows[:, :HEADER_SIZE].view(HEADER_DTYPE)[:, 0]
    assert list(head["flags"] & int(Flag.RAW_FLOAT) != 0) == [True, True, False]
    assert rows[:, HEADER_SIZE:].tobytes() == wire_lanes(x, np.zeros(3, np.int8), 2)[0]


def results(rng: np.random.Generator, m: int, k: int, fan_in: int, spice: float) -> np.ndarray:
    """RESULT datagrams for fragments 0..m-1 of job 9 (seq 100 + i), in random order."""
    rows = np.zeros((m, HEADER_SIZE + 4 * k), np.uint8)
    head = rows[:, :HEADER_SIZE].view(HEADER_DTYPE)[:, 0]
    raw = rng.random(m) < spice * 4
    head["version"] = 1
    head["kind"] = int(Kind.RESULT)
    head["flags"] = np.where(raw, int(Flag.COMPLETE | Flag.RAW_FLOAT), int(Flag.COMPLETE))
    head["job"] = 9
    head["fan_in"] = fan_in
    head["seq"] = 100 + np.arange(m)
    head["exponent"] = rng.integers(-128, 128, m)
    head["lanes"] = k
    head["bitmap"] = (1 << fan_in) - 1
    lanes = rows[:, HEADER_SIZE:].view(">i4")
    lanes[:] = rng.integers(-(2**30), 2**30, (m, k))
    floats = rows[raw, HEADER_SIZE:].view(">f4")
    floats[:] = rng.uniform(-1e6, 1e6, floats.shape)
    special = rng.random(floats.shape) < spice
    floats[special] = rng.choice(SPECIALS, special.sum())
    rows[raw, HEADER_SIZE:] = floats.view(np.uint8)
    return rows[rng.permutation(m)]


@settings(max_examples=120, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    m=st.integers(1, 300),
    k=st.sampled_from([64, 256]),
    fan_in=st.integers(1, 32),
    spice=st.sampled_from([0.0, 0.01, 0.2]),
    bursts=st.integers(1, 12),
    in_order=st.booleans(),
)
def test_dequantize_rows_gives_the_sums_and_next_exponents_of_quant(
    seed: int, m: int, k: int, fan_in: int, spice: float, bursts: int, in_order: bool
) -> None:
    rng = np.random.default_rng(seed)
    rows = results(rng, m, k, fan_in, spice)
    if in_order:  # as results mostly come: long runs without a gap
        rows = rows[np.argsort(rows[:, 12:16].copy().view(">u4").reshape(-1))]
    fragments = rows[:, 12:16].copy().view(">u4").reshape(-1).astype(np.int64) - 100
    # In bursts of random sizes (results arrive in random order here): the codec dequantizes
    # each run of results without a gap as it completes, the rest at `finish`.
    inner = rng.choice(np.arange(1, m), min(m - 1, bursts - 1), replace=False)
    cuts = np.r_[np.sort(inner), m]
    t = transfer(np.zeros(m * k, np.float32), k, fan_in)
    t.activate()
    for lo, hi in zip(np.r_[0, cuts[:-1]], cuts, strict=True):
        taken = t.take_many(rows[lo:hi], np.arange(hi - lo), fragments[lo:hi])
        assert taken.all()
    assert t.remaining == 0
    t.finish()
    # The reference, fragment by fragment, in fragment order.
    by_fragment = rows[np.argsort(fragments)]
    head = by_fragment[:, :HEADER_SIZE].view(HEADER_DTYPE)[:, 0]
    sums = by_fragment[:, HEADER_SIZE:].view(LANE_DTYPE)
    want = np.empty((m, k), np.float32)
    for i in range(m):
        if head["flags"][i] & int(Flag.RAW_FLOAT):
            want[i] = sums[i].view(RAW_DTYPE)
        else:
            with np.errstate(over="ignore"):  # past float32's range is inf, as in the codec
                want[i] = dequantize(sums[i], int(head["exponent"][i]), fan_in)
    # Compared as bits: NaN lanes must be the same NaN.
    assert t.out.view(np.uint32).tobytes() == want.view(np.uint32).tobytes()
    assert t.next_exponents is not None
    previous = np.full(m, DEFAULT_EXPONENT, np.int8)  # a first allreduce's
    assert t.next_exponents.tobytes() == next_exponents(want, previous).tobytes()


def test_codec_refuses_buffers_too_small() -> None:
    frags = np.zeros((2, 64), np.float32)
    rows = np.zeros((2, HEADER_SIZE + 4 * 64), np.uint8)
    with pytest.raises(ValueError, match="raw"):
        codec.quantize_rows(
            frags,
            2,
            64,
            np.zeros(2, np.int8),
            29,
            rows,
            rows.shape[1],
            HEADER_SIZE,
            np.zeros(1, np.bool_),
        )
    with pytest.raises(ValueError, match="bad shape"):
        codec.quantize_rows(
            frags, 2, 64, np.zeros(2, np.int8), 29, rows, 100, HEADER_SIZE, np.zeros(2, np.bool_)
        )
    with pytest.raises(ValueError, match="out"):
        codec.dequantize_rows(
            np.zeros((2, 64), ">i4"),
            2,
            64,
            np.zeros(2, np.int64),
            np.zeros(2, np.bool_),
            29,
            np.zeros(64, np.float32),
            np.zeros(2, np.float32),
        )
