"""The one policy interface, and the name-to-factory registry of policies.

A policy is pure: ``decide(snapshot)`` returns decisions and changes nothing, reads no clock
and does no I/O; its only randomness is the snapshot's seed. Every policy answers the same
call, so callers never switch on a policy's name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import ClassVar

from scheduler.errors import UnknownName
from scheduler.memory import JobState
from scheduler.priority import DEFAULT_AGING_S, DEFAULT_LEVELS, get_priority
from scheduler.snapshot import Decision, JobView, Reclaim, Snapshot

__all__ = ["POLICIES", "Policy", "PolicyFactory", "make_policy", "register_policy"]


class Policy(ABC):
    """Base of the memory policies; subclasses implement `decide`."""

    name: ClassVar[str]
    #: True when jobs share the pool (atp/esa) and so need a hash seed, not a partition.
    shared: ClassVar[bool]

    def __init__(
        self,
        *,
        priority: str = "srtf",
        levels: int = DEFAULT_LEVELS,
        aging_s: float = DEFAULT_AGING_S,
    ) -> None:
        self.priority_name = priority
        self.priority_key = get_priority(priority)
        self.levels = levels
        self.aging_s = aging_s

    @abstractmethod
    def decide(self, snapshot: Snapshot) -> tuple[Decision, ...]:
        """Decisions for `snapshot`: admissions, queueing, priorities, reclaims (in that order
        of importance; the caller applies them in the order given)."""

    @staticmethod
    def reclaims(snapshot: Snapshot) -> list[Decision]:
        """A `Reclaim` for every job that left but still holds memory."""
        return [
            Reclaim(j.job_id, j.partition)
            for j in snapshot.jobs
            if j.state.terminal and (j.partition is not None or j.hash_seed is not None)
        ]

    @staticmethod
    def queued(snapshot: Snapshot) -> list[JobView]:
        """Queued jobs, first come first."""
        waiting = [j for j in snapshot.jobs if j.state == JobState.QUEUED]
        return sorted(waiting, key=lambda j: (j.arrival_s, j.job_id))


PolicyFactory = Callable[..., Policy]
POLICIES: dict[str, PolicyFactory] = {}


def register_policy(name: str, factory: PolicyFactory) -> None:
    """Add (or replace) policy `name`; `factory(**params)` builds one."""
    POLICIES[name] = factory


def make_policy(name: str, **params: object) -> Policy:
    """A new policy registered as `name`, built with `params`; raises `UnknownName`."""
    _load_builtin()
    try:
        factory = POLICIES[name]
    except KeyError:
        known = ", ".join(sorted(POLICIES))
        raise UnknownName(f"unknown policy {name!r}; known: {known}") from None
    return factory(**params)


def _load_builtin() -> None:
    # The built-in policies register themselves on import; importing here keeps this module
    # free of a dependency cycle on them.
    import scheduler.atp  # noqa: F401
    import scheduler.esa  # noqa: F401
    import scheduler.static  # noqa: F401
