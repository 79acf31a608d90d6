"""``static`` (SwitchML): a private partition per job; FIFO admission queue with backfill.

The partition has as many slots as the job's window (two aggregators per slot). When the pool
has no free range large enough, the job is queued; a later job that does fit is admitted past
it (backfill), which keeps memory busy at the price of possible delay for large windows.
"""

from __future__ import annotations

from typing import ClassVar

from scheduler.memory import COPIES_PER_SLOT, first_fit
from scheduler.policy import Policy, register_policy
from scheduler.snapshot import Admit, Decision, Queue, Reject, Snapshot

__all__ = ["StaticPolicy"]


class StaticPolicy(Policy):
    """SwitchML's memory rule; decisions are `Admit` with a partition, `Queue` or `Reject`."""

    name: ClassVar[str] = "static"
    shared: ClassVar[bool] = False

    def decide(self, snapshot: Snapshot) -> tuple[Decision, ...]:
        out = self.reclaims(snapshot)
        taken = [j.partition for j in snapshot.jobs if j.state.holds_memory and j.partition]
        for job in self.queued(snapshot):
            need = COPIES_PER_SLOT * job.window
            if need > snapshot.pool.aggregators:
                out.append(
                    Reject(
                        job.job_id,
                        f"window {job.window} needs {need} aggregators, "
                        f"the pool has {snapshot.pool.aggregators}; use a smaller window",
                    )
                )
                continue
            part = first_fit(snapshot.pool, taken, job.window)
            if part is None:
                out.append(Queue(job.job_id, f"no free range of {need} aggregators"))
                continue
            taken.append(part)
            out.append(Admit(job.job_id, partition=part))
        return tuple(out)


register_policy(StaticPolicy.name, StaticPolicy)
