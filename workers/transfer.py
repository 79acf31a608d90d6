"""One allreduce in flight: a float32 tensor cut into k-lane fragments, and its growing sum.

A `Transfer` owns the sequence numbers ``first_seq .. first_seq + fragments - 1`` of its job
(fragment i is ``seq = first_seq + i``). Its exponents are chosen when it becomes the next to
send (`activate`), because they come from the previous allreduce of the same tensor, which
must have finished by then (``workers.quant``). The client's I/O thread is its only writer;
the caller only waits on `finished`.

Per fragment the I/O thread only copies bytes: the gradient datagrams (header and quantized
lanes) are built with array operations a chunk of fragments at a time, just before the first
of the chunk is sent (`datagram`, or `datagrams` for a span of them), and result lanes are
copied as they arrive (`take`, or `take_many` for a burst) into one array that `finish`
dequantizes in one pass. The datagram and sum buffers pass from one allreduce of a tensor to
the next (`activate`), so steady-state iterations touch no fresh memory.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from types import ModuleType

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

from workers.quant import DEFAULT_EXPONENT, exponents_from_peaks, next_exponents, scale_bits
from workers.rendezvous import HashedPlacement, Placement

__all__ = ["Sender", "Transfer", "locate_many", "quantize_into"]

# Fragments built per numpy pass: small enough that the first datagram of a transfer leaves
# within a millisecond or so (a late first send holds back every other worker's sums), large
# enough that the per-call overhead of numpy is negligible per fragment.
_BUILD_CHUNK = 256
# Fragments dequantized per numpy pass in `finish`: small enough that a chunk stays in cache
# from the lanes' conversion to the exponent choice (1 MiB of float32 at 256 lanes).
_DEQUANT_CHUNK = 1024
# With the codec, results are dequantized as they come once this many in a row have come (a
# call costs about a microsecond), looking this far ahead for the first one missing.
_READY_CHUNK = 128
_READY_SCAN = 16384
_RAW_FLOAT = int(Flag.RAW_FLOAT)
# Powers of two that keep ``lane * 2**power`` a normal float32 for every nonzero int32 lane
# (1 * 2**-126 is the smallest normal; (2**31 - 1) * 2**96 is below float32's maximum).
_F32_MIN_POWER = -126
_F32_MAX_POWER = 96
# Above this pool `a * (seq mod pool)` could overflow int64: such pools go through the rule.
_VECTOR_POOL_LIMIT = 2**31


def locate_many(
    placement: Placement, job: int, seqs: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``(aggregator indices, shadow bits)`` of fragments `seqs`: `Placement.locate` per array.

    Mirrors ``p4ctl.rule.static_index`` (slot ``seq mod size``, copy alternating per reuse) and
    ``p4ctl.rule.hashed_index``, an affine map ``(a * seq + b) mod pool`` whose `a` and `b` are
    read off the rule itself at seq 0 and 1, so the rule stays written once;
    tests/workers/test_transfer.py holds the two equal.
    """
    seqs = np.asarray(seqs, dtype=np.int64)
    if seqs.size:
        placement.locate(job, int(seqs[0]))  # the rule's own checks (a power-of-two partition)
    if isinstance(placement, HashedPlacement):
        pool = placement.pool
        if pool >= _VECTOR_POOL_LIMIT:
            index = np.array([placement.locate(job, int(s))[0] for s in seqs], np.int64)
            return index, np.zeros(seqs.size, np.int64)
        b = placement.locate(job, 0)[0]
        a = (placement.locate(job, 1)[0] - b) % pool
        return (a * (seqs % pool) + b) % pool, np.zeros(seqs.size, np.int64)
    size = placement.part_size
    shadow = ((seqs & size) != 0).astype(np.int64)
    return placement.part_base + shadow * size + (seqs & (size - 1)), shadow


def quantize_into(
    frags: npt.NDArray[np.float32],
    exponents: npt.NDArray[np.int8],
    fan_in: int,
    out: npt.NDArray[np.int32],
) -> npt.NDArray[np.bool_]:
    """``quant.quantize`` of ``(m, k)`` fragments, its lanes written into `out` (wire order,
    zeros where raw); returns its ``raw`` mask. Equal to it lane for lane (a test holds them
    so), in float32 and without its float64 temporaries.

    Why float32 gives the same lanes: ``2**(S - e)`` is a power of two, so the product of a
    float32 is exact unless it falls below the normal range, and there it is below 2**-126
    and rounds to 0 either way; a fragment that fits its exponent stays below ``2**S``, which
    float32 holds exactly once rounded; one that does not fit is zeroed, inf or not.
    """
    exps = exponents.astype(np.int32)
    one = np.float32(1.0)
    fits: npt.NDArray[np.bool_] = np.all(np.abs(frags) < np.ldexp(one, exps)[:, None], axis=1)
    with np.errstate(over="ignore"):  # only in fragments that are zeroed below
        scaled = frags * np.ldexp(one, scale_bits(fan_in) - exps)[:, None]
    scaled[~fits] = 0.0
    np.rint(scaled, out=scaled)
    out[:] = scaled
    return ~fits


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
        codec: ModuleType | None = None,
    ) -> None:
        self.size = data.size
        # The compiled codec (``p4ctl._engine``: `quantize_rows`, `dequantize_rows`) on the
        # engine data path; None: the numpy code below, which it is held to byte for byte.
        self.codec = codec
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
        # Run by whoever finishes the transfer (the I/O thread): `add_done_callback`.
        self._callbacks: list[Callable[[], None]] = []
        self._callback_lock = threading.Lock()
        # Datagrams to send (built by `_build`), and results as they came (wire byte order).
        self._row = HEADER_SIZE + 4 * lanes
        self._wire: npt.NDArray[np.uint8] | None = None
        self._built = 0
        self._sums: npt.NDArray[np.int32] | None = np.zeros((self.fragments, lanes), LANE_DTYPE)
        self._sum_bytes = self._sums.reshape(-1).view(np.uint8).data
        self._sum_exponent = np.zeros(self.fragments, dtype=np.int64)
        self._sum_raw = np.zeros(self.fragments, dtype=np.bool_)
        # The codec dequantizes as results come: fragments below `_dequantized` are in `out`,
        # with their peaks (for `next_exponents`) in `_peaks`.
        self._dequantized = 0
        self._peaks = np.empty(self.fragments if codec is not None else 0, np.float32)
        # The datagram and sum buffers, handed on to the next allreduce of the same tensor.
        self._spare: tuple[npt.NDArray[np.uint8], npt.NDArray[np.int32]] | None = None

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
        spare = prev._spare if prev is not None else None
        if prev is not None:
            prev._spare = None
        fits = spare is not None and spare[0].size == self.fragments * self._row
        if spare is not None and fits and not self.done.any():
            # Both are overwritten before they are read: every datagram is built before it is
            # sent, and every sum row is stored before `done` marks it.
            self._wire, self._sums = spare
            self._sum_bytes = self._sums.reshape(-1).view(np.uint8).data
        else:
            self._wire = np.empty(self.fragments * self._row, dtype=np.uint8)
        self._built = 0

    def datagram(self, i: int, sender: Sender) -> memoryview:
        """The gradient datagram of fragment i (first send; the client sets RESEND itself)."""
        assert self._wire is not None
        while i >= self._built:
            self._build(sender)
        return self._wire.data[i * self._row : (i + 1) * self._row]

    def datagrams(self, lo: int, hi: int, sender: Sender) -> npt.NDArray[np.uint8]:
        """The gradient datagrams of fragments ``lo .. hi - 1``, one ``(hi - lo, row)`` view."""
        assert self._wire is not None
        while hi > self._built:
            self._build(sender)
        return self._wire[lo * self._row : hi * self._row].reshape(hi - lo, self._row)

    def _build(self, sender: Sender) -> None:
        """Quantize the next `_BUILD_CHUNK` fragments and stamp their headers."""
        assert self._wire is not None and self.exponents is not None and self.padded is not None
        lo = self._built
        hi = min(lo + _BUILD_CHUNK, self.fragments)
        rows = self._wire[lo * self._row : hi * self._row].reshape(hi - lo, self._row)
        head = rows[:, :HEADER_SIZE].view(HEADER_DTYPE).reshape(-1)
        body = rows[:, HEADER_SIZE:].view(LANE_DTYPE)
        exps = self.exponents[lo:hi]
        frags = self.padded[lo:hi]
        if self.codec is not None:
            raw = np.empty(hi - lo, np.bool_)
            shift = scale_bits(self.fan_in)
            self.codec.quantize_rows(
                frags, hi - lo, self.k, exps, shift, rows, self._row, HEADER_SIZE, raw
            )
        else:
            raw = quantize_into(frags, exps, self.fan_in, body)
            if raw.any():
                # Values that do not fit travel as float32 bits, flagged RAW_FLOAT.
                body[raw] = frags[raw].astype(RAW_DTYPE).view(LANE_DTYPE)
        seqs = np.arange(self.first_seq + lo, self.first_seq + hi, dtype=np.int64)
        index, shadow = locate_many(sender.placement, sender.job, seqs)
        head["version"] = VERSION
        head["kind"] = int(Kind.GRADIENT)
        head["flags"] = np.where(raw, _RAW_FLOAT, 0)
        head["job"] = sender.job
        head["worker"] = sender.worker
        head["fan_in"] = self.fan_in
        head["agg_index"] = index
        head["seq"] = seqs
        head["shadow"] = shadow
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

    def take_many(
        self,
        datagrams: npt.NDArray[np.uint8],
        rows: npt.NDArray[np.intp],
        fragments: npt.NDArray[np.int64],
    ) -> npt.NDArray[np.bool_]:
        """`take` for many results at once: ``datagrams[rows[j]]`` (checked as for `take`) is
        the sum of fragment ``fragments[j]``. Returns which of `rows` were taken: the first of
        each fragment not known yet (a duplicate, in the burst or before it, is not)."""
        assert self._sums is not None
        taken = np.zeros(rows.size, np.bool_)
        unique, first = np.unique(fragments, return_index=True)
        new = ~self.done[unique]
        unique, first = unique[new], first[new]
        if unique.size == 0:
            return taken
        taken[first] = True
        picked = rows[first]
        sums = self._sums.reshape(self.fragments, -1).view(np.uint8)
        sums[unique] = datagrams[picked, HEADER_SIZE : self._row]
        head = datagrams[:, :HEADER_SIZE].view(HEADER_DTYPE)[:, 0]
        self._sum_raw[unique] = (head["flags"][picked] & _RAW_FLOAT) != 0
        self._sum_exponent[unique] = head["exponent"][picked]
        self.done[unique] = True
        self.remaining -= unique.size
        if self.codec is not None:
            self._dequantize_ready(_READY_CHUNK)
        return taken

    def finish(self, error: BaseException | None = None) -> None:
        """Mark the transfer ended (with `error` when it failed) and free what is not needed."""
        if self.finished.is_set():
            return
        self.error = error
        if error is None:
            self._dequantize()
        if self._wire is not None and self._sums is not None:
            # Kept for the next allreduce with this key (`activate`), which would otherwise
            # fault in fresh buffers a page at a time; at 64 MB that was a third of the I/O
            # thread's time. It costs 8 bytes per element per key between iterations.
            self._spare = (self._wire, self._sums)
        self.padded = self._wire = self._sums = None
        self._sum_bytes = memoryview(b"")
        self.previous = None
        with self._callback_lock:
            self.finished.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def add_done_callback(self, callback: Callable[[], None]) -> None:
        """Run `callback` once the transfer has finished, at once if it has; it runs on the
        thread that finishes it (the I/O thread), so it must be quick and must not raise."""
        with self._callback_lock:
            if not self.finished.is_set():
                self._callbacks.append(callback)
                return
        callback()

    def _dequantize(self) -> None:
        """Fill `out` from the stored sums: ``lane * 2**(exponent - S)``, or float32 bits; and
        choose `next_exponents` from it (a chunk at a time, while the chunk is in cache).

        In float32 when every scale of a chunk keeps the products normal floats: scaling by a
        power of two then commutes with rounding, so ``float32(lane) * 2**(exponent - S)``
        equals the float64 product rounded to float32 bit for bit (``quant.dequantize``), at
        a third of the memory traffic. Exponents far outside the worker's range (only a
        foreign sender makes them) take the float64 product.
        """
        sums = self._sums
        assert sums is not None
        previous = (
            self.exponents
            if self.exponents is not None
            else np.full(self.fragments, DEFAULT_EXPONENT, np.int8)
        )
        shift = scale_bits(self.fan_in)
        raw = self._sum_raw
        if self.codec is not None:  # the same, one pass per fragment, most of it done already
            self._dequantize_ready(1)
            self.next_exponents = exponents_from_peaks(self._peaks, previous)
            return
        chosen = np.empty(self.fragments, np.int8)
        for lo in range(0, self.fragments, _DEQUANT_CHUNK):
            hi = min(lo + _DEQUANT_CHUNK, self.fragments)
            powers = self._sum_exponent[lo:hi] - shift
            out = self.out[lo:hi]
            if powers.size and powers.min() >= _F32_MIN_POWER and powers.max() <= _F32_MAX_POWER:
                out[:] = sums[lo:hi]
                out *= np.ldexp(np.float32(1.0), powers.astype(np.int32))[:, None]
            else:  # only a foreign sender's exponent gets here: past float32's range is inf
                with np.errstate(over="ignore"):
                    out[:] = sums[lo:hi].astype(np.float64) * np.ldexp(1.0, powers)[:, None]
            floats = np.flatnonzero(raw[lo:hi])
            if floats.size:
                out[floats] = sums[lo:hi][floats].view(RAW_DTYPE)
            chosen[lo:hi] = next_exponents(out, previous[lo:hi])
        self.next_exponents = chosen

    def _dequantize_ready(self, at_least: int) -> None:
        """With the codec: dequantize the fragments from `_dequantized` up to the first one
        without a result, if there are `at_least` of them. Results come nearly in order, so
        most of the tensor is done while the I/O thread waits for the rest of it."""
        assert self._sums is not None and self.codec is not None
        lo = self._dequantized
        ahead = self.done[lo : lo + _READY_SCAN]
        hi = lo + (int(np.argmin(ahead)) if not ahead.all() else ahead.size)
        if hi - lo < at_least:
            return
        self.codec.dequantize_rows(
            self._sums[lo:hi],
            hi - lo,
            self.k,
            self._sum_exponent[lo:hi],
            self._sum_raw[lo:hi],
            scale_bits(self.fan_in),
            self.out[lo:hi],
            self._peaks[lo:hi],
        )
        self._dequantized = hi

    def result(self) -> npt.NDArray[np.float32]:
        """The flat float32 sum (raises the transfer's error if it failed)."""
        if self.error is not None:
            raise self.error
        return self.out.reshape(-1)[: self.size]
