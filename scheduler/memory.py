"""The switch memory model: a pool of aggregators, private partitions, job lifecycle.

The pool is N aggregators of k lanes each. A ``static`` job owns a `Partition` of ``slots``
slots, each slot two aggregators (SwitchML's shadow copy keeps the previous result readable
while the next sequence aggregates), so it covers aggregators
``base .. base + 2 * slots - 1``. ``atp``/``esa`` jobs share the whole pool.

``slots`` is a power of two. The switch checks that fragment ``seq`` uses slot
``seq mod slots`` of copy ``(seq div slots) mod 2``, and a switch ALU cannot divide by a
table value: with a power of two both are bit masks (``p4/PROTOCOL.md`` section 3).
`partition_slots` gives the slots for a job's window (the next power of two, so a job always
gets at least the window it asked for) and `first_fit` hands out nothing else.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from p4ctl.rule import is_power_of_two

from scheduler.errors import IllegalTransition, MemoryConflict

__all__ = [
    "COPIES_PER_SLOT",
    "DEFAULT_AGGREGATORS",
    "DEFAULT_LANES",
    "DEFAULT_WINDOW",
    "JobState",
    "MemoryMap",
    "Partition",
    "Pool",
    "check_transition",
    "first_fit",
    "partition_slots",
]

# Tofino gives 64 lanes of 32 bits per pipeline pass (see p4ctl.protocol.SUPPORTED_LANES).
DEFAULT_LANES = 64
# 8192 aggregators x 64 lanes x 4 B = 2 MiB of register SRAM: about what SwitchML and ATP
# budget for aggregation on a Tofino 1, leaving room for the rest of the pipeline.
DEFAULT_AGGREGATORS = 8192
# SwitchML's pool size per job: 128 slots cover the bandwidth-delay product of a 100 Gbps
# link at a few microseconds of RTT with 256-byte payloads.
DEFAULT_WINDOW = 128
COPIES_PER_SLOT = 2


@dataclass(frozen=True, slots=True)
class Pool:
    """The switch's aggregator pool: `aggregators` registers of `lanes` int32 lanes each."""

    aggregators: int = DEFAULT_AGGREGATORS
    lanes: int = DEFAULT_LANES

    def __post_init__(self) -> None:
        if self.aggregators < 1 or self.lanes < 0:
            raise ValueError(f"pool needs aggregators >= 1 and lanes >= 0, got {self}")


@dataclass(frozen=True, slots=True)
class Partition:
    """A static job's private range: `slots` slots of two copies from aggregator `base`.

    `first_fit` and `MemoryMap.reserve` only accept a power-of-two `slots`; the value itself
    does not check, so that a row stored before that rule still loads.
    """

    base: int
    slots: int

    @property
    def end(self) -> int:
        """One past the last aggregator of the partition."""
        return self.base + COPIES_PER_SLOT * self.slots

    @property
    def size(self) -> int:
        """Aggregators covered (two per slot)."""
        return COPIES_PER_SLOT * self.slots

    def overlaps(self, other: Partition) -> bool:
        return self.base < other.end and other.base < self.end


def partition_slots(window: int) -> int:
    """Slots of a static partition for `window` fragments in flight: the smallest power of two
    that is at least `window` (100 -> 128, 128 -> 128); raises ValueError below 1."""
    if window < 1:
        raise ValueError(f"a window has at least one fragment in flight, got {window}")
    return 1 << (window - 1).bit_length()


def first_fit(pool: Pool, taken: Iterable[Partition], slots: int) -> Partition | None:
    """The lowest-addressed free range of `slots` slots, or None when none is large enough.

    `slots` must be a power of two (`partition_slots`), else ValueError: the switch could not
    check the placement of such a partition.
    """
    if not is_power_of_two(slots):
        raise ValueError(
            f"a static partition has a power-of-two number of slots, got {slots}; "
            "round a window up with partition_slots"
        )
    need = COPIES_PER_SLOT * slots
    cursor = 0
    for part in sorted(taken, key=lambda p: p.base):
        if part.base - cursor >= need:
            return Partition(cursor, slots)
        cursor = max(cursor, part.end)
    return Partition(cursor, slots) if pool.aggregators - cursor >= need else None


class MemoryMap:
    """Who holds which memory: reserve/release pairs; release is idempotent.

    A static job reserves its `Partition`; a shared-pool job (atp/esa) reserves the shared
    pool it hashes into, aggregators ``0 .. size - 1`` (`reserve_shared`). The two never
    overlap: a policy change while static jobs run must not let hashed fragments land in a
    private partition (and the static rule would overwrite a hashed partial sum).
    """

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self._parts: dict[int, Partition] = {}
        self._shared: dict[int, int] = {}

    def reserve(self, job_id: int, part: Partition) -> None:
        """Record `part` for `job_id`; raises `MemoryConflict` on overlap (with a partition or
        a shared pool in use), overflow or a slot count that is not a power of two."""
        if part.base < 0 or part.slots < 1 or part.end > self.pool.aggregators:
            raise MemoryConflict(f"job {job_id}: {part} is outside a pool of {self.pool}")
        if not is_power_of_two(part.slots):
            raise MemoryConflict(
                f"job {job_id}: {part} has {part.slots} slots, not a power of two; the switch "
                "cannot check its placement"
            )
        for other_id, other in self._parts.items():
            if other_id != job_id and other.overlaps(part):
                raise MemoryConflict(f"job {job_id}: {part} overlaps job {other_id}'s {other}")
        for other_id, size in self._shared.items():
            if other_id != job_id and part.base < size:
                raise MemoryConflict(
                    f"job {job_id}: {part} overlaps the shared pool 0..{size - 1} that job "
                    f"{other_id} hashes into"
                )
        self._parts[job_id] = part

    def shared_limit(self) -> int:
        """The largest shared pool free of partitions: aggregators below the lowest one."""
        return min((p.base for p in self._parts.values()), default=self.pool.aggregators)

    def reserve_shared(self, job_id: int, size: int) -> None:
        """Record that `job_id` hashes into aggregators ``0 .. size - 1``; raises
        `MemoryConflict` when that range is empty, leaves the pool or meets a partition."""
        if not 1 <= size <= self.pool.aggregators:
            raise MemoryConflict(
                f"job {job_id}: shared pool of {size} outside a pool of {self.pool}"
            )
        limit = self.shared_limit()
        if size > limit:
            owner = min(self._parts, key=lambda j: self._parts[j].base)
            raise MemoryConflict(
                f"job {job_id}: shared pool 0..{size - 1} overlaps job {owner}'s "
                f"{self._parts[owner]}"
            )
        self._shared[job_id] = size

    def release(self, job_id: int) -> Partition | None:
        """Free `job_id`'s partition or shared-pool use; returns the partition, or None if it
        held none."""
        self._shared.pop(job_id, None)
        return self._parts.pop(job_id, None)

    def shared(self) -> dict[int, int]:
        """``{job_id: shared pool size}`` of every job hashing into the shared pool."""
        return dict(self._shared)

    def partitions(self) -> dict[int, Partition]:
        """``{job_id: Partition}`` of every reservation."""
        return dict(self._parts)

    def used(self) -> int:
        """Aggregators reserved."""
        return sum(p.size for p in self._parts.values())


class JobState(enum.StrEnum):
    """Lifecycle of a job. Terminal: finished, failed, cancelled.

    The one list of job states: the store's column, the REST schemas and the CLI take theirs
    from here. A `str` enum, so a stored or sent value compares equal to its member; every
    change of state goes through `check_transition`.
    """

    QUEUED = "queued"
    ADMITTED = "admitted"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL

    @property
    def holds_memory(self) -> bool:
        return self in (JobState.ADMITTED, JobState.RUNNING)


_TERMINAL = frozenset({JobState.FINISHED, JobState.FAILED, JobState.CANCELLED})
_LEGAL: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.ADMITTED, JobState.CANCELLED, JobState.FAILED}),
    # ADMITTED -> QUEUED: a reclaimed partition sends the job back to the admission queue.
    JobState.ADMITTED: frozenset(
        {JobState.RUNNING, JobState.QUEUED, JobState.CANCELLED, JobState.FAILED}
    ),
    JobState.RUNNING: frozenset({JobState.FINISHED, JobState.CANCELLED, JobState.FAILED}),
}


def check_transition(job_id: int, old: JobState, new: JobState) -> JobState:
    """`new` if ``old -> new`` is legal; raises `IllegalTransition` otherwise."""
    if new not in _LEGAL.get(old, frozenset()):
        raise IllegalTransition(job_id, old.value, new.value)
    return new
