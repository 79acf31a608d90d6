"""One allreduce in flight: a float32 tensor cut into k-lane fragments, and its growing sum.

A `Transfer` owns the sequence numbers ``first_seq .. first_seq + fragments - 1`` of its job
(fragment i is ``seq = first_seq + i``). Its exponents are chosen when it becomes the next to
send (`activate`), because they come from the previous allreduce of the same tensor, which
must have finished by then (``workers.quant``). The client's I/O thread is its only writer;
the caller only waits on `finished`.

Per fragment the I/O thread only copies bytes: the gradient datagrams (header and quantized
lanes) are built with array operations a chunk of fragments at a time, just before the first
of the chunk is sent (`datagram`), and result lanes are copied as they arrive into one array
that `finish` dequantizes in one pass.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from p4ctl.protocol import (
    HEADER_DTYPE,
    HEADER_SIZE,
    LANE_DTYPE,
    RAW_DTYPE,
    VERSION,
    Flag,
    Kind,
)

from workers.quant import DEFAULT_EXPONENT, next_exponents, quantize, scale_bits
from workers.rendezvous import Placement

__all__ = ["Sender", "Transfer"]

# Fragments built per numpy pass: small enough that the first datagram of a transfer leaves
# within a millisecond or so (a late first send holds back every other worker's sums), large
# enough that the per-call overhead of numpy is negligible per fragment.
_BUILD_CHUNK = 256
# Fragments dequantized per numpy pass in `finish`: bounds the float64 temporary (~16 MB at
# 256 lanes).
_DEQUANT_CHUNK = 8192
_RAW_FLOAT = int(Flag.RAW_FLOAT)


@dataclass(frozen=True, slots=True)
class Sender:
    """What every gradient datagram of one worker carries besides its fragment."""

    job: int
    worker: int
    placement: Placement


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
        self.k = lanes
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
        self.next_exponents: npt.NDArray[np.int8] | None = None
        self.error: BaseException | None = None
        self.finished = threading.Event()
        # Datagrams to send (built by `_build`), and results as they came (wire byte order).
        self._row = HEADER_SIZE + 4 * lanes
        self._wire: npt.NDArray[np.uint8] | None = None
        self._built = 0
        self._sums: npt.NDArray[np.int32] | None = np.zeros((self.fragments, lanes), LANE_DTYPE)
        self._sum_bytes = self._sums.reshape(-1).view(np.uint8).data
        self._sum_exponent = np.zeros(self.fragments, dtype=np.int64)
        self._sum_raw = np.zeros(self.fragments, dtype=np.bool_)

    @property
    def end_seq(self) -> int:
        """One past the last sequence number of this transfer."""
        return self.first_seq + self.fragments

    @property
    def active(self) -> bool:
        """Whether `activate` has run (and `finish` has not freed the datagrams)."""
        return self._wire is not None

    def ready(self) -> bool:
        """Whether the exponents can be chosen: the previous allreduce of this key has ended."""
        return self.previous is None or self.previous.finished.is_set()

    def activate(self) -> None:
        """Choose the exponents (call once, when `ready`); datagrams are built on demand."""
        prev = self.previous
        self.previous = None  # a chain of finished transfers would otherwise never be freed
        exps = np.full(self.fragments, DEFAULT_EXPONENT, dtype=np.int8)
        if (
            prev is not None
            and prev.next_exponents is not None
            and (len(prev.next_exponents) == self.fragments)
        ):
            exps = prev.next_exponents
        self.exponents = exps
        self._wire = np.empty(self.fragments * self._row, dtype=np.uint8)
        self._built = 0

    def datagram(self, i: int, sender: Sender) -> memoryview:
        """The gradient datagram of fragment i (first send; the client sets RESEND itself)."""
        assert self._wire is not None
        while i >= self._built:
            self._build(sender)
        return self._wire.data[i * self._row : (i + 1) * self._row]

    def _build(self, sender: Sender) -> None:
        """Quantize the next `_BUILD_CHUNK` fragments and stamp their headers."""
        assert self._wire is not None and self.exponents is not None and self.padded is not None
        lo = self._built
        hi = min(lo + _BUILD_CHUNK, self.fragments)
        rows = self._wire[lo * self._row : hi * self._row].reshape(hi - lo, self._row)
        head = rows[:, :HEADER_SIZE].view(HEADER_DTYPE).reshape(-1)
        body = rows[:, HEADER_SIZE:].view(LANE_DTYPE)
        exps = self.exponents[lo:hi]
        q = quantize(self.padded[lo:hi], exps, self.fan_in)
        body[:] = q.lanes
        if q.raw.any():
            # Values that do not fit travel as float32 bits, flagged RAW_FLOAT.
            body[q.raw] = self.padded[lo:hi][q.raw].astype(RAW_DTYPE).view(LANE_DTYPE)
        seqs = range(self.first_seq + lo, self.first_seq + hi)
        located = [sender.placement.locate(sender.job, seq) for seq in seqs]
        head["version"] = VERSION
        head["kind"] = int(Kind.GRADIENT)
        head["flags"] = np.where(q.raw, _RAW_FLOAT, 0)
        head["job"] = sender.job
        head["worker"] = sender.worker
        head["fan_in"] = self.fan_in
        head["agg_index"] = [index for index, _ in located]
        head["seq"] = np.arange(self.first_seq + lo, self.first_seq + hi)
        head["shadow"] = [shadow for _, shadow in located]
        head["exponent"] = exps
        head["lanes"] = self.k
        head["bitmap"] = 1 << sender.worker
        self._built = hi

    def take(self, i: int, datagram: bytes | bytearray | memoryview) -> bool:
        """Store the sum for fragment i from a RESULT or PS_RESULT datagram (already checked
        to be one, of this job, with k lanes); False if it was known."""
        if self.done[i]:
            return False
        self._sum_bytes[i * 4 * self.k : (i + 1) * 4 * self.k] = datagram[HEADER_SIZE : self._row]
        self._sum_raw[i] = (datagram[2] << 8 | datagram[3]) & _RAW_FLOAT
        exponent = datagram[17]
        self._sum_exponent[i] = exponent - 256 if exponent > 127 else exponent
        self.done[i] = True
        self.remaining -= 1
        return True

    def finish(self, error: BaseException | None = None) -> None:
        """Mark the transfer ended (with `error` when it failed) and free what is not needed."""
        if self.finished.is_set():
            return
        self.error = error
        if error is None:
            self._dequantize()
            previous = (
                self.exponents
                if self.exponents is not None
                else np.full(self.fragments, DEFAULT_EXPONENT, np.int8)
            )
            self.next_exponents = next_exponents(self.out, previous)
        self.padded = self._wire = self._sums = None
        self._sum_bytes = memoryview(b"")
        self.previous = None
        self.finished.set()

    def _dequantize(self) -> None:
        """Fill `out` from the stored sums: ``lane * 2**(exponent - S)``, or float32 bits."""
        sums = self._sums
        assert sums is not None
        shift = scale_bits(self.fan_in)
        for lo in range(0, self.fragments, _DEQUANT_CHUNK):
            hi = lo + _DEQUANT_CHUNK
            scales = np.ldexp(1.0, self._sum_exponent[lo:hi] - shift)
            self.out[lo:hi] = sums[lo:hi].astype(np.float64) * scales[:, None]
        raw = np.flatnonzero(self._sum_raw)
        if raw.size:
            self.out[raw] = sums[raw].view(RAW_DTYPE)

    def result(self) -> npt.NDArray[np.float32]:
        """The flat float32 sum (raises the transfer's error if it failed)."""
        if self.error is not None:
            raise self.error
        return self.out.reshape(-1)[: self.size]
