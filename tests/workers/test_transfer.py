"""`Transfer` builds exactly the datagrams `protocol.encode` would, with the lanes
`quant.quantize` gives, and dequantizes results exactly as `quant.dequantize` would, fragment
by fragment; `locate_many` places fragments exactly as the rule does, and a burst is taken as
its results one by one."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from p4ctl.protocol import (
    HEADER_DTYPE,
    HEADER_SIZE,
    LANE_DTYPE,
    PS_WORKER_ID,
    RAW_DTYPE,
    Flag,
    Kind,
    Packet,
    encode,
)

from workers.quant import MAX_EXPONENT, MIN_EXPONENT, dequantize, quantize
from workers.rendezvous import HashedPlacement, Placement, StaticPlacement
from workers.transfer import Sender, Transfer, locate_many

LANES = 64


def take(t: Transfer, i: int, datagram: bytes) -> bool:
    """`Transfer.take_many` of one result: whether it was taken."""
    row = np.frombuffer(datagram, np.uint8).reshape(1, -1)
    return bool(t.take_many(row, np.arange(1), np.array([i], np.int64))[0])


def tensor(fragments: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).uniform(-1, 1, fragments * LANES - 5).astype(np.float32)
    x[70] = 1e6  # fragment 1 does not fit exponent 0: raw floats
    return x


@pytest.mark.parametrize(
    "placement", [StaticPlacement(8, 16), HashedPlacement(seed=7, pool=4096)], ids=str
)
def test_datagrams_equal_encoded_packets(placement: Placement) -> None:
    x = tensor(600)  # more than one build chunk
    t = Transfer(x, "key", LANES, first_seq=1000, fan_in=3, previous=None)
    sender = Sender(job=5, worker=2, placement=placement)
    t.activate()
    padded = np.zeros(600 * LANES, np.float32)
    padded[: x.size] = x
    frags = padded.reshape(600, LANES)
    q = quantize(frags, np.zeros(600, np.int8), 3)
    for i in (0, 1, 255, 256, 599):
        index, shadow = placement.locate(5, 1000 + i)
        want = Packet(
            kind=Kind.GRADIENT,
            job=5,
            worker=2,
            fan_in=3,
            agg_index=index,
            seq=1000 + i,
            flags=Flag.RAW_FLOAT if q.raw[i] else Flag.NONE,
            shadow=shadow,
            exponent=0,
            bitmap=1 << 2,
            lanes=frags[i] if q.raw[i] else q.lanes[i],
        )
        assert t.datagrams(i, i + 1, sender)[0].tobytes() == encode(want), f"fragment {i}"
    assert q.raw[1]


def test_results_dequantize_like_dequantize() -> None:
    t = Transfer(tensor(4), "key", LANES, first_seq=0, fan_in=2, previous=None)
    t.activate()
    rng = np.random.default_rng(1)
    sums = rng.integers(-(2**29), 2**29, (4, LANES)).astype(np.int32)
    raw = rng.uniform(-5, 5, LANES).astype(np.float32)
    for i, exponent in enumerate((-3, 0, 7)):
        pkt = Packet(Kind.RESULT, 5, 0, 2, 0, i, Flag.COMPLETE, 0, exponent, 3, sums[i])
        assert take(t, i, encode(pkt))
    flags = Flag.COMPLETE | Flag.RAW_FLOAT
    pkt = Packet(Kind.PS_RESULT, 5, PS_WORKER_ID, 2, 0, 3, flags, 0, 0, 3, raw)
    assert take(t, 3, encode(pkt))
    assert not take(t, 3, encode(pkt))  # a late duplicate
    assert t.remaining == 0
    t.finish()
    for i, exponent in enumerate((-3, 0, 7)):
        want = dequantize(sums[i], exponent, 2).astype(np.float32)
        np.testing.assert_array_equal(t.out[i], want)
    np.testing.assert_array_equal(t.out[3], raw)


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    pool=st.one_of(st.integers(1, 2**20), st.integers(2**31 - 4, 2**32 - 1)),
    job=st.integers(0, 1023),
    first=st.integers(0, 2**32 - 2000),
)
def test_locate_many_is_hashed_index_per_fragment(
    seed: int, pool: int, job: int, first: int
) -> None:
    placement = HashedPlacement(seed, pool)
    seqs = np.arange(first, first + 1000, dtype=np.int64)
    index, shadow = locate_many(placement, job, seqs)
    assert [(int(i), int(s)) for i, s in zip(index, shadow, strict=True)] == [
        placement.locate(job, int(seq)) for seq in seqs
    ]


@settings(max_examples=200, deadline=None)
@given(
    base=st.integers(0, 2**20),
    bits=st.integers(0, 14),
    first=st.integers(0, 2**32 - 2000),
)
def test_locate_many_is_static_index_per_fragment(base: int, bits: int, first: int) -> None:
    placement = StaticPlacement(base, 1 << bits)
    seqs = np.arange(first, first + 1000, dtype=np.int64)
    index, shadow = locate_many(placement, 9, seqs)
    assert [(int(i), int(s)) for i, s in zip(index, shadow, strict=True)] == [
        placement.locate(9, int(seq)) for seq in seqs
    ]


def test_locate_many_refuses_what_the_rule_refuses() -> None:
    with pytest.raises(ValueError, match="power of two"):
        locate_many(StaticPlacement(0, 24), 1, np.arange(4, dtype=np.int64))


def test_a_burst_of_results_is_taken_like_one_result_at_a_time() -> None:
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, 40 * LANES).astype(np.float32)
    one, many = (Transfer(x, "key", LANES, 0, 3, None) for _ in range(2))
    sums = rng.integers(-(2**28), 2**28, (40, LANES)).astype(np.int32)
    # Exponents across the whole int8 header field: the float32 product where it is exact
    # for every lane, the float64 one beyond.
    exponents = rng.choice([-128, -100, -96, -3, 0, 7, 96, 100, 127], 40)
    raw = rng.random(40) < 0.2
    datagrams = []
    for i in rng.permutation(40):
        flags = Flag.COMPLETE | (Flag.RAW_FLOAT if raw[i] else Flag.NONE)
        lanes = sums[i].view(np.float32) if raw[i] else sums[i]
        pkt = Packet(Kind.RESULT, 5, 0, 3, 0, int(i), flags, 0, int(exponents[i]), 7, lanes)
        datagrams += [encode(pkt)] * (2 if i % 5 == 0 else 1)  # some duplicates
    rows = np.frombuffer(b"".join(datagrams), np.uint8).reshape(len(datagrams), -1)
    fragments = rows[:, 12:16].copy().view(">u4").reshape(-1).astype(np.int64)
    taken = many.take_many(rows, np.arange(len(rows)), fragments)
    assert [take(one, int(f), d) for f, d in zip(fragments, datagrams, strict=True)] == list(taken)
    assert many.remaining == one.remaining == 0
    one.finish()
    many.finish()
    np.testing.assert_array_equal(many.out, one.out)
    for i in range(40):
        want = sums[i].view(np.float32) if raw[i] else dequantize(sums[i], exponents[i], 3)
        np.testing.assert_array_equal(one.out[i], want.astype(np.float32))


SPECIAL = np.array(
    [0.0, -0.0, 1e-45, -1e-40, 1.1754944e-38, 0.5, 0.9999999, 1.0, 3e38, np.inf, -np.inf, np.nan],
    np.float32,
)


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    exponents=st.lists(st.integers(MIN_EXPONENT, MAX_EXPONENT), min_size=4, max_size=4),
    fan_in=st.integers(1, 32),
    scale=st.integers(-140, 120),
)
def test_built_lanes_are_the_lanes_of_quantize(
    seed: int, exponents: list[int], fan_in: int, scale: int
) -> None:
    rng = np.random.default_rng(seed)
    with np.errstate(over="ignore"):
        frags = np.ldexp(rng.uniform(-1, 1, (4, LANES)), scale).astype(np.float32)
    specials = rng.random((4, LANES)) < 0.05
    frags[specials] = rng.choice(SPECIAL, int(specials.sum()))
    exps = np.array(exponents, np.int8)
    want = quantize(frags, exps, fan_in)
    t = Transfer(frags.reshape(-1), "key", LANES, 0, fan_in, None)
    t.activate()
    t.exponents = exps
    rows = t.datagrams(0, 4, Sender(job=1, worker=0, placement=HashedPlacement(1, 64)))
    raw = (rows[:, :HEADER_SIZE].view(HEADER_DTYPE)[:, 0]["flags"] & int(Flag.RAW_FLOAT)) != 0
    np.testing.assert_array_equal(raw, want.raw)
    got = rows[:, HEADER_SIZE:].view(LANE_DTYPE)
    np.testing.assert_array_equal(got[~raw], want.lanes[~raw])
    assert got[raw].tobytes() == frags[raw].astype(RAW_DTYPE).tobytes()
