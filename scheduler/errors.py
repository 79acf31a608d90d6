"""The scheduler's exception tree.

``SchedulerError`` is the root; the REST layer maps `IllegalTransition` and `MemoryConflict`
to HTTP 409, `UnknownName` to 422 and `WorkloadError` to 400 (`TopologyError` and
`PlacementError`, which no route raises yet, are bad input too). "No room" is not an error: a
policy answers it with a `Queue` decision.
"""

from __future__ import annotations

__all__ = [
    "IllegalTransition",
    "MemoryConflict",
    "PlacementError",
    "PsUnavailable",
    "SchedulerError",
    "TopologyError",
    "UnknownName",
    "WorkloadError",
]


class SchedulerError(Exception):
    """Root of every error the scheduler raises on purpose."""


class IllegalTransition(SchedulerError):
    """A job lifecycle change that is not allowed (cancel a finished job, say)."""

    def __init__(self, job_id: int, old: str, new: str) -> None:
        super().__init__(f"job {job_id}: cannot go from {old} to {new}")
        self.job_id = job_id
        self.old = old
        self.new = new


class MemoryConflict(SchedulerError):
    """A reservation that overlaps another job's partition or leaves the pool."""


class PsUnavailable(SchedulerError):
    """The parameter server did not take a job (unreachable, or it refused): the job is not
    admitted, since the switch would send its bypassed and evicted fragments there."""


class UnknownName(SchedulerError, KeyError, ValueError):
    """A policy or priority function name that is not registered (a ValueError too, so that
    a pydantic model holding the name reports it as a validation error)."""

    def __str__(self) -> str:
        return str(self.args[0])


class WorkloadError(SchedulerError, ValueError):
    """A workload name, file or job that cannot be used; the message says what to fix."""


class TopologyError(SchedulerError, ValueError):
    """A topology file or `Fabric` that cannot be used; the message names the file, the
    switch and the field, and says what the field takes."""


class PlacementError(SchedulerError, ValueError):
    """A placement that can never be made: an unknown or unusable placement policy, or a job
    wider than the whole fabric. A full fabric is not an error: `Placer.place` returns None."""
