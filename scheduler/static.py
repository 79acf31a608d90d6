"""``static`` (SwitchML): a private partition per job; FIFO admission queue with backfill.

The partition has as many slots as the job's window rounded up to a power of two (two
aggregators per slot): the switch checks a fragment's slot and copy with bit masks, because a
switch ALU cannot divide by a table value (``p4/PROTOCOL.md`` section 3). Rounding up rather
than down keeps the window the user asked for; a window of 100 gets 128 slots, and a job never
sends more than its window at once, so the extra slots only cost memory. When the pool has no
free range large enough, the job is queued; a later job that does fit is admitted past it
(backfill), which keeps memory busy at the price of possible delay for large windows. A window
whose partition is larger than the whole pool is rejected with the largest window that fits.
"""

from __future__ import annotations

from typing import ClassVar

from scheduler.memory import COPIES_PER_SLOT, first_fit, partition_slots
from scheduler.policy import Policy
from scheduler.snapshot import Admit, Decision, Queue, Reject, Snapshot

__all__ = ["StaticPolicy"]


class StaticPolicy(Policy):
    """SwitchML's memory rule; decisions are `Admit` with a partition, `Queue` or `Reject`."""

    name: ClassVar[str] = "static"
    shared: ClassVar[bool] = False

    def decide(self, snapshot: Snapshot) -> tuple[Decision, ...]:
        out = self.reclaims(snapshot)
        taken = [j.partition for j in snapshot.jobs if j.state.holds_memory and j.partition]
        # Jobs admitted under a shared policy before a policy change hash into 0..n-1.
        taken += snapshot.shared_ranges()
        pool = snapshot.pool.aggregators
        for job in self.queued(snapshot):
            slots = partition_slots(job.window)
            need = COPIES_PER_SLOT * slots
            if need > pool:
                out.append(
                    Reject(
                        job.job_id,
                        f"window {job.window} needs a partition of {slots} slots (a power of "
                        f"two) = {need} aggregators, the pool has {pool}; use a smaller "
                        f"window (at most {_largest_window(pool)})",
                    )
                )
                continue
            part = first_fit(snapshot.pool, taken, slots)
            if part is None:
                why = f"waiting for a partition of {slots:,} slots ({need:,} aggregators)"
                out.append(Queue(job.job_id, why, slots=slots))
                continue
            taken.append(part)
            out.append(Admit(job.job_id, partition=part))
        return tuple(out)


def _largest_window(aggregators: int) -> int:
    """The largest window whose partition fits `aggregators`, a power of two (0: none fits)."""
    slots = aggregators // COPIES_PER_SLOT
    return 1 << (slots.bit_length() - 1) if slots else 0
