"""The one policy interface.

A policy is pure: ``decide(snapshot)`` returns decisions and changes nothing, reads no clock
and does no I/O; its only randomness is the snapshot's seed. Every policy answers the same
call, so callers never switch on a policy's name. The built-in policies are listed, by name,
in `scheduler.registry`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, Protocol

from scheduler.memory import JobState
from scheduler.priority import get_priority
from scheduler.snapshot import Admit, Decision, JobView, Queue, Reclaim, Snapshot, hash_seed

__all__ = ["Policy", "PolicyParams"]


class PolicyParams(Protocol):
    """What a policy is built from: `scheduler.spec.PolicySpec` (named here by its shape, so
    that the spec, which checks its names against the registry, is not imported back)."""

    @property
    def policy(self) -> str: ...
    @property
    def priority(self) -> str: ...
    @property
    def levels(self) -> int: ...
    @property
    def aging_s(self) -> float: ...


class Policy(ABC):
    """Base of the memory policies; subclasses implement `decide`."""

    name: ClassVar[str]
    #: True when jobs share the pool (atp/esa) and so need a hash seed, not a partition.
    shared: ClassVar[bool]
    #: True when the switch frees a shared aggregator the moment its sum completes (the
    #: result is multicast and a copy sent to the PS, as esa does); False when it waits for
    #: the PS round trip (atp's complete sum goes to the PS, which sends the result back).
    early_release: ClassVar[bool] = False
    #: True when the switch lets a higher-priority claim evict a partial sum (esa), so the
    #: policy's priority levels matter; False when the first claim keeps the aggregator.
    preempts: ClassVar[bool] = False

    def __init__(self, spec: PolicyParams) -> None:
        self.spec = spec
        self.priority_key = get_priority(spec.priority)

    @classmethod
    def switch_rule(cls) -> str:
        """The switch rule its jobs are installed with (a ``p4ctl.protocol.Policy`` name):
        ``static`` for a partition, ``esa`` when the switch frees an aggregator at completion
        (where levels decide preemption; a policy that sets none never preempts), else
        ``atp``."""
        if not cls.shared:
            return "static"
        return "esa" if cls.early_release else "atp"

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

    @classmethod
    def admit_shared(cls, snapshot: Snapshot) -> tuple[list[Decision], list[Decision]]:
        """``(admits, waits)`` for the queued jobs of a shared-pool policy: every one is
        admitted with its hash seed into the shared pool, which stops below the partitions
        static jobs admitted under an earlier policy still hold; while one starts at
        aggregator 0 there is no shared pool and they all wait."""
        size = snapshot.shared_pool()
        queued = cls.queued(snapshot)
        if size < 1:
            reason = "static partitions from an earlier policy hold the start of the pool"
            return [], [Queue(j.job_id, reason) for j in queued]
        admits: list[Decision] = [
            Admit(j.job_id, hash_seed=hash_seed(snapshot.seed, j.job_id), shared_pool=size)
            for j in queued
        ]
        return admits, []
