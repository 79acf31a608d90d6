"""`Transfer` builds, with array operations, exactly the datagrams `protocol.encode` would, and
dequantizes results exactly as `quant.dequantize` would, fragment by fragment."""

from __future__ import annotations

import numpy as np
import pytest
from p4ctl.protocol import PS_WORKER_ID, Flag, Kind, Packet, encode

from workers.quant import dequantize, quantize
from workers.rendezvous import HashedPlacement, Placement, StaticPlacement
from workers.transfer import Sender, Transfer

LANES = 64


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
        assert bytes(t.datagram(i, sender)) == encode(want), f"fragment {i}"
    assert q.raw[1]


def test_results_dequantize_like_dequantize() -> None:
    t = Transfer(tensor(4), "key", LANES, first_seq=0, fan_in=2, previous=None)
    t.activate()
    rng = np.random.default_rng(1)
    sums = rng.integers(-(2**29), 2**29, (4, LANES)).astype(np.int32)
    raw = rng.uniform(-5, 5, LANES).astype(np.float32)
    for i, exponent in enumerate((-3, 0, 7)):
        pkt = Packet(Kind.RESULT, 5, 0, 2, 0, i, Flag.COMPLETE, 0, exponent, 3, sums[i])
        assert t.take(i, memoryview(encode(pkt)))
    flags = Flag.COMPLETE | Flag.RAW_FLOAT
    pkt = Packet(Kind.PS_RESULT, 5, PS_WORKER_ID, 2, 0, 3, flags, 0, 0, 3, raw)
    assert t.take(3, encode(pkt))
    assert not t.take(3, encode(pkt))  # a late duplicate
    assert t.remaining == 0
    t.finish()
    for i, exponent in enumerate((-3, 0, 7)):
        want = dequantize(sums[i], exponent, 2).astype(np.float32)
        np.testing.assert_array_equal(t.out[i], want)
    np.testing.assert_array_equal(t.out[3], raw)
