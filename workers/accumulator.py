"""The parameter server's bookkeeping for one job, without sockets or clocks.

`FragmentSum` collects what reaches the PS for one ``(job, seq)`` and counts every worker
exactly once (``p4/PROTOCOL.md``, "Exactly once"): it completes the sequence from parts whose
contributor bitmaps are disjoint and cover every worker, so a single-worker packet (a bypassed
fragment, a resend, a one-contributor held sum) whose worker is already in a larger sum is
never added again.

`JobLedger` holds a job's open sums and its completed results, answers resends from the
results, and forgets a result once every worker has moved past it: a worker sends ``seq``
only when it holds every result up to ``seq - window`` (``workers.client``), so a packet that
carries worker w's bit at ``seq`` proves w no longer needs anything at or below
``seq - window``.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from p4ctl.protocol import PS_WORKER_ID, Flag, Kind, Packet, Policy

from workers.quant import dequantize

__all__ = ["Accepted", "FragmentSum", "JobLedger", "Part", "Taken", "is_esa_copy"]

_INT32_MAX = 2**31 - 1
# Flag bits as plain ints: ``pkt.flags & Flag.X`` builds an enum member in Python code, a
# noticeable share of the PS's time per packet.
_RAW_FLOAT = int(Flag.RAW_FLOAT)
_COMPLETE = int(Flag.COMPLETE)
_RESULT_FLAGS = Flag.COMPLETE
_RAW_RESULT_FLAGS = Flag.COMPLETE | Flag.RAW_FLOAT


@dataclass(frozen=True, slots=True)
class Part:
    """One contribution at the PS: workers `bitmap`, fixed-point at `exponent` or raw floats."""

    bitmap: int
    exponent: int | None  # None: RAW_FLOAT lanes
    lanes: npt.NDArray[np.int32] | npt.NDArray[np.float32]

    @classmethod
    def of(cls, pkt: Packet) -> Part:
        raw = bool(int(pkt.flags) & _RAW_FLOAT)
        return cls(pkt.bitmap, None if raw else pkt.exponent, pkt.lanes)


class Taken(enum.Enum):
    """What `FragmentSum.add` did with a contribution."""

    ADDED = "added"
    DUPLICATE = "duplicate"  # the same workers' sum is already here


# Parts kept per sequence: far more than the few a lossy sequence produces, small enough that
# the exact-cover search below stays trivial.
MAX_PARTS = 64


class FragmentSum:
    """The contributions to one ``(job, seq)`` that reached the PS.

    Parts are kept by bitmap (the same workers' sum of one sequence is the same value, however
    often it arrives). The sequence is complete when some parts have pairwise disjoint bitmaps
    covering every worker; their sum is the result. Single-worker packets thus never count a
    worker twice, and sums that overlap (a flushed sum, then a resend added to a new partial
    with another worker) are combined correctly too.
    """

    def __init__(self, fan_in: int) -> None:
        self.fan_in = fan_in
        self.full = (1 << fan_in) - 1
        self.parts: dict[int, Part] = {}
        self.bitmap = 0  # every worker seen in some part
        self._cover: list[Part] | None = None

    def add(self, part: Part) -> Taken:
        """Keep `part` unless the same workers' sum is here already."""
        if part.bitmap in self.parts or len(self.parts) >= MAX_PARTS:
            return Taken.DUPLICATE
        self.parts[part.bitmap] = part
        self.bitmap |= part.bitmap
        if self.bitmap == self.full:
            self._cover = _exact_cover(self.full, list(self.parts.values()))
        return Taken.ADDED

    def complete(self) -> bool:
        """Disjoint parts cover all `fan_in` workers."""
        return self._cover is not None

    def total(self) -> tuple[int | None, npt.NDArray[np.int32] | npt.NDArray[np.float32]]:
        """``(exponent, int32 lanes)`` when every part is fixed point at one exponent, else
        ``(None, float32 lanes)`` summed in float64. Only when `complete`."""
        parts = self._cover
        assert parts is not None
        exponents = {p.exponent for p in parts}
        if len(exponents) == 1 and None not in exponents:
            ints = np.sum([p.lanes.astype(np.int64) for p in parts], axis=0)
            if int(np.abs(ints).max(initial=0)) <= _INT32_MAX:
                (exponent,) = exponents
                return exponent, ints.astype(np.int32)
        floats = np.zeros(len(parts[0].lanes), dtype=np.float64)
        for p in parts:
            if p.exponent is None:
                floats += p.lanes.astype(np.float64)
            else:
                floats += dequantize(p.lanes.astype(np.int32), p.exponent, self.fan_in)
        return None, floats.astype(np.float32)


def _exact_cover(full: int, parts: list[Part]) -> list[Part] | None:
    """Parts with pairwise disjoint bitmaps whose union is `full`, fewest-first; or None."""
    parts = sorted(parts, key=lambda p: -p.bitmap.bit_count())  # big sums first: fewer adds

    def search(left: int, start: int) -> list[Part] | None:
        if left == 0:
            return []
        low = left & -left  # the lowest worker still missing must be in some part
        for i in range(start, len(parts)):
            p = parts[i]
            if p.bitmap & low and p.bitmap & ~left == 0:
                rest = search(left & ~p.bitmap, 0)
                if rest is not None:
                    return [p, *rest]
        return None

    return search(full, 0)


def is_esa_copy(policy: Policy | None, fan_in: int, pkt: Packet) -> bool:
    """An esa completion copy: a whole sum the switch completed, and already multicast, sent
    to the PS only so that it can answer resends."""
    whole = pkt.bitmap == (1 << fan_in) - 1
    return policy == Policy.ESA and bool(int(pkt.flags) & _COMPLETE) and whole


@dataclass(frozen=True, slots=True)
class Accepted:
    """What the PS does with one TO_PS packet: a counter name and the packet to send, if any."""

    outcome: str  # added, completed, stored, answered, duplicate, stale, overflow
    reply: Packet | None = None


class JobLedger:
    """Open sums and retained results of one job (see the module docstring)."""

    def __init__(
        self, job: int, fan_in: int, window: int, policy: Policy | None, max_results: int
    ) -> None:
        self.job = job
        self.fan_in = fan_in
        self.window = window
        self.policy = policy
        self.max_results = max_results
        self.open: dict[int, FragmentSum] = {}
        # A result as sent (PS_RESULT), or an esa copy (TO_PS) that `_result` turns into one
        # when a resend first asks for it: most copies are never asked for.
        self.results: OrderedDict[int, Packet] = OrderedDict()
        self.max_seen = [-1] * fan_in
        self.forgotten = -1  # every seq at or below this is forgotten

    def accept(self, pkt: Packet) -> Accepted:
        """Take one TO_PS packet of this job (already validated by the PS)."""
        self._saw(pkt.bitmap, pkt.seq)
        stored = self.results.get(pkt.seq)
        if stored is not None:
            return Accepted("answered", self._result(stored))
        if pkt.seq <= self.forgotten:
            return Accepted("stale")
        frag = self.open.get(pkt.seq)
        full = (1 << self.fan_in) - 1
        if frag is None and pkt.bitmap == full:
            # The common case (atp's complete sums, esa's copies): the packet is the result.
            raw = bool(int(pkt.flags) & _RAW_FLOAT)
            return self._completed(pkt, pkt.exponent, pkt.lanes, raw)
        if frag is None:
            if len(self.open) >= self.max_results:
                return Accepted("overflow")  # memory stays bounded whatever arrives
            frag = self.open[pkt.seq] = FragmentSum(self.fan_in)
        taken = frag.add(Part.of(pkt))
        if taken is not Taken.ADDED:
            return Accepted(taken.value)
        if not frag.complete():
            return Accepted("added")
        del self.open[pkt.seq]
        exponent, lanes = frag.total()
        # An esa copy lands here only when a worker's resend opened the sum first (a copy is
        # whole): that worker lacks the result, so it is answered like any completed sum.
        return self._completed(pkt, exponent or 0, lanes, exponent is None, awaited=True)

    def _completed(
        self,
        pkt: Packet,
        exponent: int,
        lanes: npt.NDArray[np.int32] | npt.NDArray[np.float32],
        raw: bool,
        *,
        awaited: bool = False,
    ) -> Accepted:
        # The workers have an esa copy's sum already: the PS only keeps it for resends
        # (unless one `awaited` it), as it came.
        if not awaited and is_esa_copy(self.policy, self.fan_in, pkt):
            self.results[pkt.seq] = pkt
            self._forget()
            return Accepted("stored")
        result = self._as_result(pkt, exponent, lanes, raw)
        self.results[pkt.seq] = result
        self._forget()
        return Accepted("completed", result)

    def _result(self, stored: Packet) -> Packet:
        """The PS_RESULT of a stored result: itself, or the one an esa copy stands for."""
        if stored.kind == Kind.PS_RESULT:
            return stored
        raw = bool(int(stored.flags) & _RAW_FLOAT)
        result = self.results[stored.seq] = self._as_result(
            stored, stored.exponent, stored.lanes, raw
        )
        return result

    def _as_result(
        self,
        pkt: Packet,
        exponent: int,
        lanes: npt.NDArray[np.int32] | npt.NDArray[np.float32],
        raw: bool,
    ) -> Packet:
        """The PS_RESULT of fragment ``pkt.seq`` with these lanes."""
        return Packet(
            kind=Kind.PS_RESULT,
            job=self.job,
            worker=PS_WORKER_ID,
            fan_in=self.fan_in,
            agg_index=pkt.agg_index,
            seq=pkt.seq,
            flags=_RAW_RESULT_FLAGS if raw else _RESULT_FLAGS,
            shadow=pkt.shadow,
            exponent=exponent,
            bitmap=(1 << self.fan_in) - 1,
            lanes=lanes,
        )

    def _saw(self, bitmap: int, seq: int) -> None:
        for w in range(self.fan_in):
            if bitmap >> w & 1 and seq > self.max_seen[w]:
                self.max_seen[w] = seq

    def _forget(self) -> None:
        """Drop results every worker has, and the oldest ones past `max_results`."""
        floor = min(self.max_seen) - self.window
        if floor <= self.forgotten and len(self.results) <= self.max_results:
            return  # what is kept is above the floor already (accept refuses below it)
        if floor > self.forgotten:
            self.forgotten = floor
            for seq in [s for s in self.open if s <= floor]:
                del self.open[seq]
        while self.results:
            oldest = next(iter(self.results))
            if oldest > self.forgotten and len(self.results) <= self.max_results:
                break
            # Past the cap a worker that still lacks this result will time out: memory stays
            # bounded even when some worker never reports progress.
            self.results.popitem(last=False)
