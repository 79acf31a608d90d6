"""Priority functions and their mapping to the switch's priority levels.

A priority function orders jobs: `key` returns a `Rank` (numbers compared in order), smaller
served first. `levels` turns the order of the active jobs into switch levels ``0 .. levels-1``
where a HIGHER level wins (the switch preempts when the new job's priority is above the held
aggregator's). Ranks are spread evenly over the levels.

Aging: every `aging_s` seconds a job spends bypassed or evicted since its last progress mark
(``JobView.starved_s``) lifts it one level, up to the top, so no job starves under ``esa``.

Registered functions (`PRIORITIES`): ``srtf`` (default; least remaining work, attained service
for jobs of unknown length; a job that over-ran its declared length ranks behind every job
whose declaration holds, by attained service), ``las`` (least attained service), ``fifo``
(earliest arrival), ``static`` (user class, higher class first).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from scheduler.errors import UnknownName
from scheduler.snapshot import JobView

__all__ = [
    "DEFAULT_AGING_S",
    "DEFAULT_LEVELS",
    "PRIORITIES",
    "PriorityKey",
    "Rank",
    "get_priority",
    "levels",
    "register_priority",
]

# A switch priority register of 4 bits: 16 levels.
DEFAULT_LEVELS = 16
# Long enough that a short burst of bypasses does not reorder jobs, short against a job.
DEFAULT_AGING_S = 60.0

Rank = tuple[float, ...]
PriorityKey = Callable[[JobView], Rank]


def _srtf(job: JobView) -> Rank:
    if job.overran_declaration:
        # Its declared length bought its rank and the switch counted more: it keeps no claim
        # from it, and never ranks above a job whose declaration holds.
        return (1.0, job.attained_bytes)
    remaining = job.remaining_bytes
    return (0.0, remaining if math.isfinite(remaining) else job.attained_bytes)


def _las(job: JobView) -> Rank:
    return (job.attained_bytes,)


def _fifo(job: JobView) -> Rank:
    return (job.arrival_s,)


def _static(job: JobView) -> Rank:
    return (-float(job.priority_class),)


PRIORITIES: dict[str, PriorityKey] = {
    "fifo": _fifo,
    "las": _las,
    "srtf": _srtf,
    "static": _static,
}


def register_priority(name: str, key: PriorityKey) -> None:
    """Add (or replace) priority function `name`."""
    PRIORITIES[name] = key


def get_priority(name: str) -> PriorityKey:
    """The priority function registered as `name`; raises `UnknownName`."""
    try:
        return PRIORITIES[name]
    except KeyError:
        known = ", ".join(sorted(PRIORITIES))
        raise UnknownName(f"unknown priority function {name!r}; known: {known}") from None


def levels(
    jobs: Iterable[JobView],
    key: PriorityKey,
    n_levels: int = DEFAULT_LEVELS,
    aging_s: float = DEFAULT_AGING_S,
) -> dict[int, int]:
    """``{job_id: level}`` for `jobs`: rank by `key` spread over the levels, plus aging."""
    if n_levels < 1:
        raise ValueError(f"n_levels must be >= 1, got {n_levels}")
    # Each key once (job ids are unique, so the views themselves are never compared).
    ordered = sorted((key(j), j.arrival_s, j.job_id, j) for j in jobs)
    count = len(ordered)
    out: dict[int, int] = {}
    rank = 0
    previous: Rank | None = None
    for i, (k, _, _, job) in enumerate(ordered):
        if previous is None or k != previous:
            rank = i
            previous = k
        base = n_levels - 1 - (rank * n_levels) // count
        boost = int(job.starved_s // aging_s) if aging_s > 0 else 0
        out[job.job_id] = min(n_levels - 1, base + boost)
    return out
