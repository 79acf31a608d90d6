"""What a policy sees (`Snapshot`, `JobView`) and what it answers (`Decision`).

Both sides are frozen values: the caller (the REST service with wall time, the simulator
with virtual time) builds a snapshot, calls ``policy.decide(snapshot)`` and applies the
decisions it gets back. Policies never see a clock, a database or a switch.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.memory import COPIES_PER_SLOT, DEFAULT_WINDOW, JobState, Partition, Pool

__all__ = [
    "Admit",
    "Decision",
    "JobView",
    "Queue",
    "Reclaim",
    "Reject",
    "SetPriority",
    "Snapshot",
    "hash_seed",
]


@dataclass(frozen=True, slots=True)
class JobView:
    """One job as the scheduler sees it at the snapshot's time.

    `iterations` is None for a job of unknown length. `starved_s` (the aging input) is the
    time the job has spent with fragments bypassed or evicted since its last progress mark
    (the last time it completed another ``progress_step`` of its iterations, where its
    priority is recomputed anyway): a job that keeps making progress sheds its boost, one that
    stalls while losing fragments keeps climbing until it is at the top.
    `partition`/`hash_seed`/`shared_pool` are what an earlier `Admit` gave it; `priority` is
    the level the switch holds for it now. `overran_declaration` is set once the switch counted
    more of the job's packets than its declared `iterations` account for: its length is unknown
    from then on, and `iterations_done` is the work the switch counted.
    """

    job_id: int
    state: JobState
    arrival_s: float
    workers: int
    grad_bytes: int
    iterations: int | None = None
    iterations_done: int = 0
    window: int = DEFAULT_WINDOW
    priority_class: int = 0
    starved_s: float = 0.0
    priority: int = 0
    partition: Partition | None = None
    hash_seed: int | None = None
    shared_pool: int | None = None
    overran_declaration: bool = False

    @property
    def remaining_bytes(self) -> float:
        """Gradient bytes still to aggregate (inf for a job of unknown length, and for one
        that over-ran its declared length)."""
        if self.iterations is None or self.overran_declaration:
            return float("inf")
        return max(0, self.iterations - self.iterations_done) * float(self.grad_bytes)

    @property
    def attained_bytes(self) -> float:
        """Gradient bytes aggregated so far (least attained service uses this)."""
        return self.iterations_done * float(self.grad_bytes)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The whole scheduling state at virtual or wall time `now` (seconds)."""

    now: float
    pool: Pool
    jobs: tuple[JobView, ...]
    seed: int = 0

    def shared_pool(self) -> int:
        """Aggregators a newly admitted shared-pool job may hash into: ``0 .. n - 1``, below
        every partition a live job holds (0 when one starts at aggregator 0).

        Jobs that ended are left out: their `Reclaim` comes first among the decisions.
        """
        bases = [j.partition.base for j in self.jobs if j.partition and not j.state.terminal]
        return min(bases, default=self.pool.aggregators)

    def shared_ranges(self) -> list[Partition]:
        """The aggregators live shared-pool jobs hash into, as partitions from 0 (what a new
        static partition must not overlap)."""
        return [
            Partition(0, -(-(j.shared_pool or self.pool.aggregators) // COPIES_PER_SLOT))
            for j in self.jobs
            if j.hash_seed is not None and not j.state.terminal
        ]


@dataclass(frozen=True, slots=True)
class Admit:
    """Let the job run: with a private `partition` (static), or a `hash_seed` and the
    `shared_pool` it hashes into, aggregators ``0 .. shared_pool - 1`` (atp/esa)."""

    job_id: int
    partition: Partition | None = None
    hash_seed: int | None = None
    shared_pool: int | None = None


@dataclass(frozen=True, slots=True)
class Queue:
    """Expected "no room now": the job waits in the admission queue. `slots` is set when it
    waits for a private partition of that many slots (two aggregators each)."""

    job_id: int
    reason: str
    slots: int | None = None


@dataclass(frozen=True, slots=True)
class Reject:
    """The job can never run under this policy and pool (it asks for more than exists)."""

    job_id: int
    reason: str


@dataclass(frozen=True, slots=True)
class SetPriority:
    """Write `level` into the priority of the job's ``job_table`` entry (higher wins)."""

    job_id: int
    level: int


@dataclass(frozen=True, slots=True)
class Reclaim:
    """Free the memory of a job that left (its partition, or its shared-pool aggregators)."""

    job_id: int
    partition: Partition | None = None


Decision = Admit | Queue | Reject | SetPriority | Reclaim


def hash_seed(seed: int, job_id: int) -> int:
    """A job's 32-bit placement seed: a pure function of the run seed and the job id."""
    x = (seed * 0x9E3779B97F4A7C15 + (job_id + 1) * 0xBF58476D1CE4E5B9) & (2**64 - 1)
    x ^= x >> 31
    x = (x * 0x94D049BB133111EB) & (2**64 - 1)
    x ^= x >> 29
    return x & 0xFFFFFFFF
