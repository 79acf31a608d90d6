"""``esa`` (ESA): ATP's shared pool plus priorities the switch uses to preempt partial sums.

Every queued job is admitted with a hash seed, like ``atp``. Then the priority function ranks
the active jobs and a `SetPriority` is emitted for every job whose level changes (preemption
itself happens in the switch, packet by packet, in ``p4ctl.rule``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from scheduler.memory import JobState
from scheduler.policy import Policy
from scheduler.priority import levels
from scheduler.snapshot import Decision, SetPriority, Snapshot

__all__ = ["EsaPolicy"]


class EsaPolicy(Policy):
    """ESA's memory rule; decisions are `Admit`, `SetPriority` and `Reclaim`."""

    name: ClassVar[str] = "esa"
    shared: ClassVar[bool] = True
    early_release: ClassVar[bool] = True
    preempts: ClassVar[bool] = True

    def decide(self, snapshot: Snapshot) -> tuple[Decision, ...]:
        out = self.reclaims(snapshot)
        admits, waiting = self.admit_shared(snapshot)
        out += admits
        new_ids = {d.job_id for d in admits}
        admitted = [j for j in self.queued(snapshot) if j.job_id in new_ids]
        active = [j for j in snapshot.jobs if j.state.holds_memory]
        # A just-admitted job has no level yet in the switch; rank it with the others.
        active += [replace(j, state=JobState.ADMITTED, priority=-1) for j in admitted]
        ranked = levels(active, self.priority_key, self.spec.levels, self.spec.aging_s)
        for job in active:
            level = ranked[job.job_id]
            if level != job.priority or job.job_id in new_ids:
                out.append(SetPriority(job.job_id, level))
        return (*out, *waiting)
