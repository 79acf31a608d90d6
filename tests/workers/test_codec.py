"""The compiled fragment codec (``p4ctl._engine``: quantize_rows, dequantize_rows) is held to
the numpy code of ``workers.transfer`` byte for byte: the datagrams a `Transfer` builds, the
float32 sums it dequantizes and the exponents it picks for the next allreduce, on values
that reach every branch (raw fragments, NaN, inf, subnormals, values at ``2**e``, exponents
over the whole header byte)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from p4ctl import engine
from p4ctl.protocol import HEADER_DTYPE, HEADER_SIZE, Flag, Kind

from workers.quant import MAX_EXPONENT, MIN_EXPONENT
from workers.rendezvous import HashedPlacement
from workers.transfer import Sender, Transfer

codec = engine.engine_module()
pytestmark = pytest.mark.skipif(codec is None, reason="p4ctl._engine is not built")

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


def pair(x: np.ndarray, k: int, fan_in: int) -> tuple[Transfer, Transfer]:
    return (
        Transfer(x.reshape(-1), "key", k, 100, fan_in, None),
        Transfer(x.reshape(-1), "key", k, 100, fan_in, None, codec),
    )


@settings(max_examples=120, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    m=st.integers(1, 300),
    k=st.sampled_from([64, 256]),
    fan_in=st.integers(1, 32),
    spice=st.sampled_from([0.0, 0.001, 0.05]),
)
def test_quantize_rows_builds_the_numpy_datagrams(
    seed: int, m: int, k: int, fan_in: int, spice: float
) -> None:
    rng = np.random.default_rng(seed)
    exps = rng.integers(MIN_EXPONENT, MAX_EXPONENT + 1, m).astype(np.int8)
    x = values(rng, m, k, exps, spice)
    sender = Sender(job=9, worker=fan_in - 1, placement=HashedPlacement(seed=3, pool=4096))
    built = []
    for t in pair(x, k, fan_in):
        t.activate()
        t.exponents = exps
        built.append(t.datagrams(0, m, sender).tobytes())
    assert built[0] == built[1]


def test_quantize_rows_sends_what_does_not_fit_as_raw_floats() -> None:
    x = np.zeros((3, 64), np.float32)
    x[0, 5] = 1.0  # exactly 2**0: does not fit exponent 0
    x[1, 7] = np.nan
    x[2] = 0.25
    python, compiled = pair(x, 64, 2)
    sender = Sender(job=1, worker=0, placement=HashedPlacement(seed=1, pool=64))
    for t in (python, compiled):
        t.activate()
    rows = compiled.datagrams(0, 3, sender)
    head = rows[:, :HEADER_SIZE].view(HEADER_DTYPE)[:, 0]
    assert list(head["flags"] & int(Flag.RAW_FLOAT) != 0) == [True, True, False]
    assert rows.tobytes() == python.datagrams(0, 3, sender).tobytes()


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
def test_dequantize_rows_gives_the_numpy_sums_and_next_exponents(
    seed: int, m: int, k: int, fan_in: int, spice: float, bursts: int, in_order: bool
) -> None:
    rng = np.random.default_rng(seed)
    rows = results(rng, m, k, fan_in, spice)
    if in_order:  # as results mostly come: long runs without a gap
        rows = rows[np.argsort(rows[:, 12:16].copy().view(">u4").reshape(-1))]
    fragments = rows[:, 12:16].copy().view(">u4").reshape(-1).astype(np.int64) - 100
    done = []
    # In bursts of random sizes (results arrive in random order here): the codec dequantizes
    # each run of results without a gap as it completes, the rest at `finish`.
    inner = rng.choice(np.arange(1, m), min(m - 1, bursts - 1), replace=False)
    cuts = np.r_[np.sort(inner), m]
    for t in pair(np.zeros(m * k, np.float32), k, fan_in):
        t.activate()
        for lo, hi in zip(np.r_[0, cuts[:-1]], cuts, strict=True):
            taken = t.take_many(rows[lo:hi], np.arange(hi - lo), fragments[lo:hi])
            assert taken.all()
        assert t.remaining == 0
        t.finish()
        done.append(t)
    python, compiled = done
    # Compared as bits: NaN lanes must be the same NaN.
    assert python.out.view(np.uint32).tobytes() == compiled.out.view(np.uint32).tobytes()
    assert python.next_exponents is not None and compiled.next_exponents is not None
    assert python.next_exponents.tobytes() == compiled.next_exponents.tobytes()


def test_codec_refuses_buffers_too_small() -> None:
    assert codec is not None
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
