"""One allreduce in flight: a float32 tensor cut into k-lane fragments, and its growing sum.

A `Transfer` owns the sequence numbers ``first_seq .. first_seq + fragments - 1`` of its job
(fragment i is ``seq = first_seq + i``). It is quantized when it becomes the next to send
(`activate`), because its exponents come from the previous allreduce of the same tensor, which
must have finished by then (``workers.quant``). The client's I/O thread is its only writer;
the caller only waits on `finished`.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable

import numpy as np
import numpy.typing as npt
from p4ctl.protocol import Flag, Packet

from workers.quant import DEFAULT_EXPONENT, dequantize, next_exponents, quantize

__all__ = ["Transfer"]

# Fragments quantized per numpy call: bounds the float64 temporary to ~16 MB at 256 lanes while
# keeping per-call overhead negligible.
_QUANT_CHUNK = 8192


class Transfer:
    """The state of one allreduce (see the module docstring)."""

    def __init__(
        self,
        data: npt.NDArray[np.float32],
        key: Hashable,
        lanes: int,
        first_seq: int,
        fan_in: int,
        previous: Transfer | None,
    ) -> None:
        self.size = data.size
        self.key = key
        self.fan_in = fan_in
        self.fragments = -(-data.size // lanes)
        self.first_seq = first_seq
        self.padded: npt.NDArray[np.float32] | None = np.zeros((self.fragments, lanes), np.float32)
        self.padded.reshape(-1)[: data.size] = data.reshape(-1)
        self.out = np.zeros((self.fragments, lanes), dtype=np.float32)
        self.done = np.zeros(self.fragments, dtype=np.bool_)
        self.remaining = self.fragments
        self.previous = previous
        self.exponents: npt.NDArray[np.int8] | None = None
        self.lanes: npt.NDArray[np.int32] | None = None
        self.raw: npt.NDArray[np.bool_] | None = None
        self.next_exponents: npt.NDArray[np.int8] | None = None
        self.error: BaseException | None = None
        self.finished = threading.Event()

    @property
    def end_seq(self) -> int:
        """One past the last sequence number of this transfer."""
        return self.first_seq + self.fragments

    def ready(self) -> bool:
        """Whether the exponents can be chosen: the previous allreduce of this key has ended."""
        return self.previous is None or self.previous.finished.is_set()

    def activate(self) -> None:
        """Choose the exponents and quantize every fragment (call once, when `ready`)."""
        prev = self.previous
        self.previous = None  # a chain of finished transfers would otherwise never be freed
        exps = np.full(self.fragments, DEFAULT_EXPONENT, dtype=np.int8)
        if (
            prev is not None
            and prev.next_exponents is not None
            and (len(prev.next_exponents) == self.fragments)
        ):
            exps = prev.next_exponents
        assert self.padded is not None
        lanes = np.empty(self.padded.shape, dtype=">i4")
        raw = np.empty(self.fragments, dtype=np.bool_)
        for lo in range(0, self.fragments, _QUANT_CHUNK):
            hi = lo + _QUANT_CHUNK
            q = quantize(self.padded[lo:hi], exps[lo:hi], self.fan_in)
            lanes[lo:hi] = q.lanes
            raw[lo:hi] = q.raw
        self.exponents, self.lanes, self.raw = exps, lanes, raw

    def payload(self, i: int) -> tuple[Flag, int, npt.NDArray[np.int32] | npt.NDArray[np.float32]]:
        """``(flags, exponent, lanes)`` of fragment i's gradient packet."""
        assert self.exponents is not None and self.lanes is not None and self.raw is not None
        assert self.padded is not None
        if self.raw[i]:
            return Flag.RAW_FLOAT, int(self.exponents[i]), self.padded[i]
        return Flag.NONE, int(self.exponents[i]), self.lanes[i]

    def take(self, i: int, pkt: Packet) -> bool:
        """Store the sum for fragment i from a RESULT or PS_RESULT; False if it was known."""
        if self.done[i]:
            return False
        if pkt.flags & Flag.RAW_FLOAT:
            self.out[i] = pkt.lanes
        else:
            self.out[i] = dequantize(pkt.lanes, pkt.exponent, self.fan_in)
        self.done[i] = True
        self.remaining -= 1
        return True

    def finish(self, error: BaseException | None = None) -> None:
        """Mark the transfer ended (with `error` when it failed) and free what is not needed."""
        if self.finished.is_set():
            return
        self.error = error
        if error is None:
            previous = (
                self.exponents
                if self.exponents is not None
                else np.full(self.fragments, DEFAULT_EXPONENT, np.int8)
            )
            self.next_exponents = next_exponents(self.out, previous)
        self.padded = self.lanes = self.raw = None
        self.previous = None
        self.finished.set()

    def result(self) -> npt.NDArray[np.float32]:
        """The flat float32 sum (raises the transfer's error if it failed)."""
        if self.error is not None:
            raise self.error
        return self.out.reshape(-1)[: self.size]
