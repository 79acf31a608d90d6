"""Block floating point for gradient fragments (``p4/PROTOCOL.md`` section 1).

A fragment of ``k`` float32 values travels as ``k`` int32 lanes and one signed 8-bit exponent
``e``: ``lane = round(x * 2**(S - e))`` with ``S = 30 - ceil(log2(fan_in))``. A worker uses
``e`` only when every ``|x| < 2**e``, so the sum of ``fan_in`` lanes stays within ``2**30`` and
the switch's int32 adders never overflow; a fragment that does not fit (or holds inf/NaN) goes
as RAW_FLOAT float32 lanes, which the PS sums in float64. Every worker must use the same
exponent for the same fragment, so each derives it from what all see: `DEFAULT_EXPONENT` at
first, then `next_exponents` of the previous result at that position (one bit of headroom).

**Error bound.** For exact sum ``T`` over ``n = fan_in`` workers, a fixed-point result ``y``
satisfies ``|y - T| <= n * 2**(e - S - 1) * (1 + 2**-24) + 2**-24 * |T|``; a raw-float one
``|y - T| <= 2**-24 * |T| + n * 2**-53 * sum_i |x_i|``. `error_bound` returns the sum of the
two, which also covers a fragment whose contributions were mixed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from p4ctl.protocol import LANE_DTYPE

__all__ = [
    "DEFAULT_EXPONENT",
    "MAX_EXPONENT",
    "MIN_EXPONENT",
    "Quantized",
    "dequantize",
    "error_bound",
    "exponents_from_peaks",
    "next_exponents",
    "quantize",
    "scale_bits",
]

# Gradients of a trained-from-scratch model are mostly below 1 in magnitude; a larger value
# costs one raw fragment on the first allreduce only.
DEFAULT_EXPONENT = 0

# The header field is a signed byte; keeping well inside it leaves 2**(S - e) a normal float64
# for every fan-in, so quantize and dequantize never hit subnormals or infinity.
MIN_EXPONENT = -96
MAX_EXPONENT = 96

# Largest int32 lane magnitude is 2**S with S = 30 - ceil(log2(fan_in)): fan_in of those sum to
# at most 2**30, one bit short of int32's limit, so even rounding up cannot overflow.
_HEADROOM_BITS = 30


def scale_bits(fan_in: int) -> int:
    """``S = 30 - ceil(log2(fan_in))``: the fixed-point scale of a job with `fan_in` workers."""
    if fan_in < 1:
        raise ValueError(f"fan_in must be >= 1, got {fan_in}")
    return _HEADROOM_BITS - (fan_in - 1).bit_length()


@dataclass(frozen=True, slots=True)
class Quantized:
    """Fragments ready for the wire.

    ``lanes[i]`` is fragment i as big-endian int32 (zeros where ``raw[i]``); ``raw[i]`` says the
    fragment does not fit its exponent and goes out as float32 with RAW_FLOAT.
    """

    lanes: npt.NDArray[np.int32]
    raw: npt.NDArray[np.bool_]


def quantize(
    frags: npt.NDArray[np.float32], exponents: npt.NDArray[np.int8], fan_in: int
) -> Quantized:
    """Quantize ``(m, k)`` fragments with one exponent each; see `Quantized`."""
    exps = exponents.astype(np.int64)
    limit = np.ldexp(1.0, exps)
    # NaN compares False, so a fragment holding NaN or inf takes the raw path.
    fits = (np.abs(frags) < limit[:, None]).all(axis=1)
    scaled = frags.astype(np.float64) * np.ldexp(1.0, scale_bits(fan_in) - exps)[:, None]
    scaled[~fits] = 0.0
    lanes = np.rint(scaled).astype(LANE_DTYPE)
    return Quantized(lanes=lanes, raw=np.logical_not(fits))


def dequantize(lanes: npt.NDArray[np.int32], exponent: int, fan_in: int) -> npt.NDArray[np.float64]:
    """The float64 values of fixed-point `lanes` (a sum or one contribution) at `exponent`."""
    values: npt.NDArray[np.float64] = lanes.astype(np.float64) * np.ldexp(
        1.0, exponent - scale_bits(fan_in)
    )
    return values


def next_exponents(
    result: npt.NDArray[np.float32], previous: npt.NDArray[np.int8]
) -> npt.NDArray[np.int8]:
    """Exponent per fragment for the next allreduce of the same tensor, from its ``(m, k)`` sum.

    ``e = floor(log2(max |sum|)) + 2``: one bit of headroom above the largest summed value,
    because one worker's value may exceed the sum when others cancel it. A fragment whose sum is
    all zero or not finite keeps `previous`.
    """
    return exponents_from_peaks(np.abs(result).max(axis=1), previous)


def exponents_from_peaks(
    peaks: npt.NDArray[np.float32], previous: npt.NDArray[np.int8]
) -> npt.NDArray[np.int8]:
    """`next_exponents` from each fragment's largest ``|sum|`` (NaN where a lane is NaN)."""
    with np.errstate(invalid="ignore"):  # a raw lane may hold a signaling NaN: any bits
        peak = peaks.astype(np.float64)
    _, power = np.frexp(peak)  # peak < 2**power
    usable = np.isfinite(peak) & (peak > 0)
    chosen = np.clip(power + 1, MIN_EXPONENT, MAX_EXPONENT)
    return np.where(usable, chosen, previous).astype(np.int8)


def error_bound(
    total: npt.NDArray[np.float64],
    abs_total: npt.NDArray[np.float64],
    fan_in: int,
    exponent: int | npt.NDArray[np.int64],
) -> npt.NDArray[np.float64]:
    """Per-element bound on ``|allreduce result - exact sum|`` (module docstring).

    `total` is the exact sum, `abs_total` the sum of absolute values, `exponent` the fragment's
    exponent (scalar or broadcastable per element).
    """
    step = np.ldexp(1.0, np.asarray(exponent, dtype=np.int64) - scale_bits(fan_in) - 1)
    rounding = fan_in * step * (1 + 2.0**-24)
    return rounding + 2.0**-24 * np.abs(total) + fan_in * 2.0**-53 * abs_total
