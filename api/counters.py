"""Switch reads onto service terms: the `/switch` view with service job ids, per-job figures
relative to the switch job id's base, and the starvation time that feeds aging."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from api.models import Job
from scheduler.memory import Pool

__all__ = ["settle_counters", "switch_view", "track_starvation"]

Counters = Mapping[int, Mapping[str, int]]


def settle_counters(job: Job, raw: Mapping[str, int]) -> bool:
    """Copy the job's switch counters onto its row; True when a figure changed.

    Counters are per switch job id and ids are reused, so the values the id had when the job
    got it (`Job.counter_base`) are subtracted.
    """
    base = job.counter_base or {}

    def count(name: str) -> int:
        return max(0, raw.get(name, 0) - int(base.get(name, 0)))

    new = (count("job_preempted"), count("job_evicted"), count("job_bypassed"))
    if new == (job.preemptions_caused, job.preemptions_suffered, job.bypassed):
        return False
    job.preemptions_caused, job.preemptions_suffered, job.bypassed = new
    return True


def track_starvation(
    starved: dict[int, float],
    now: Counters,
    before: Counters,
    owners: Mapping[int, int],
    *,
    elapsed_s: float,
) -> None:
    """Update ``starved[job id]``: a job whose fragments were bypassed or evicted between the
    two reads starved for `elapsed_s` more; one that aggregated unhindered starts from zero."""
    for sid, values in now.items():
        job_id = owners.get(sid)
        if job_id is None:
            continue
        old = before.get(sid, {})
        grew = {name for name, v in values.items() if v > old.get(name, 0)}
        if grew & {"job_bypassed", "job_evicted"}:
            starved[job_id] = starved.get(job_id, 0.0) + elapsed_s
        elif "job_aggregated" in grew:
            starved.pop(job_id, None)


def switch_view(
    pool: Pool,
    runs: Sequence[tuple[int, int, int, int]],
    counters: Counters,
    drops: Mapping[str, int],
    owners: Mapping[int, int],
) -> dict[str, Any]:
    """The `/switch` JSON: ``{"aggregators", "lanes", "runs": [[start, length, job_id, state]],
    "counters": {"jobs": {"<job_id>": {...}}, "drops": {...}}}`` with the service's job ids
    (-1 for aggregators of a switch job id the service does not know)."""
    return {
        "aggregators": pool.aggregators,
        "lanes": pool.lanes,
        "runs": [[a, n, owners.get(j, -1), st] for a, n, j, st in runs],
        "counters": {
            "jobs": {str(owners[sid]): dict(c) for sid, c in counters.items() if sid in owners},
            "drops": dict(drops),
        },
    }
