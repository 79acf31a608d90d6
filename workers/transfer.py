"""One allreduce in flight: a float32 tensor cut into k-lane fragments, and its growing sum.

A `Transfer` owns the sequence numbers ``first_seq .. first_seq + fragments - 1`` of its job
(fragment i is ``seq = first_seq + i``). Its exponents are chosen when it becomes the next to
send (`activate`), because they come from the previous allreduce of the same tensor, which
must have finished by then (``workers.quant``). The client's I/O thread is its only writer;
the caller only waits on `finished`.

Per fragment the I/O thread only copies bytes: the gradient datagrams (header and quantized
lanes) are built with array operations a chunk of fragments at a time, just before the first
of the chunk is sent (`datagrams`), and result lanes are copied as they arrive (`take_many`,
a burst at a time) into one array that the engine's codec dequantizes as runs of it complete
(`finish` does the rest). The datagram and sum buffers pass from one allreduce of a tensor to
the next (`activate`), so steady-state iterations touch no fresh memory.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from p4ctl.engine import engine_module
from p4ctl.protocol import (
    HEADER_DTYPE,
    HEADER_SIZE,
    LANE_DTYPE,
    VERSION,
    Flag,
    Kind,
)

from workers.quant import DEFAULT_EXPONENT, exponents_from_peaks, scale_bits
from workers.rendezvous import HashedPlacement, Placement

__all__ = ["Sender", "Transfer", "locate_many"]

# Fragments built per numpy pass: small enough that the first datagram of a transfer leaves
# within a millisecond or so (a late first send holds back every other worker's sums), large
# enough that the per-call overhead of numpy is negligible per fragment.
_BUILD_CHUNK = 256
# Results are dequantized as they come once this many in a row have come (a
# call costs about a microsecond), looking this far ahead for the first one missing.
_READY_CHUNK = 128
_READY_SCAN = 16384
_RAW_FLOAT = int(Flag.RAW_FLOAT)
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
        # The compiled codec (``p4ctl._engine``: `quantize_rows`, `dequantize_rows`), held to
        # ``workers.quant`` byte for byte by ``tests/workers/test_codec.py``.
        self.codec = engine_module()
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
        self._sum_exponent = np.zeros(self.fragments, dtype=np.int64)
        self._sum_raw = np.zeros(self.fragments, dtype=np.bool_)
        # The codec dequantizes as results come: fragments below `_dequantized` are in `out`,
        # with their peaks (for `next_exponents`) in `_peaks`.
        self._dequantized = 0
        self._peaks = np.empty(self.fragments, np.float32)
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
        else:
            self._wire = np.empty(self.fragments * self._row, dtype=np.uint8)
        self._built = 0

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
        exps = self.exponents[lo:hi]
        # Values that do not fit their exponent travel as float32 bits, flagged RAW_FLOAT.
        raw = np.empty(hi - lo, np.bool_)
        self.codec.quantize_rows(
            self.padded[lo:hi],
            hi - lo,
            self.k,
            exps,
            scale_bits(self.fan_in),
            rows,
            self._row,
            HEADER_SIZE,
            raw,
        )
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

    def take_many(
        self,
        datagrams: npt.NDArray[np.uint8],
        rows: npt.NDArray[np.intp],
        fragments: npt.NDArray[np.int64],
    ) -> npt.NDArray[np.bool_]:
        """Store results: ``datagrams[rows[j]]`` (already checked to be a RESULT or PS_RESULT
        of this job, with k lanes) is the sum of fragment ``fragments[j]``. Returns which of
        `rows` were taken: the first of each fragment not known yet (a duplicate, in the burst
        or before it, is not)."""
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
        """Fill `out` from the stored sums (``quant.dequantize``, or float32 bits) and choose
        `next_exponents` from it; most of it was done as results came (`_dequantize_ready`)."""
        previous = (
            self.exponents
            if self.exponents is not None
            else np.full(self.fragments, DEFAULT_EXPONENT, np.int8)
        )
        self._dequantize_ready(1)
        self.next_exponents = exponents_from_peaks(self._peaks, previous)

    def _dequantize_ready(self, at_least: int) -> None:
        """Dequantize the fragments from `_dequantized` up to the first one
        without a result, if there are `at_least` of them. Results come nearly in order, so
        most of the tensor is done while the I/O thread waits for the rest of it."""
        assert self._sums is not None
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
