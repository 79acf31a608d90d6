"""Where the data plane is and which policy runs: small values the coordinator is built from."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Protocol

from p4ctl.backend import Endpoint

from scheduler.memory import Pool
from scheduler.scheduler import Scheduler

__all__ = ["PolicyConfig", "PsRegistry", "Topology"]


class PsRegistry(Protocol):
    """The PS the jobs are registered with: `workers.ps.ParameterServer` embedded, or
    `workers.ps_control.RemotePs` for one of its own process (a PS serves no other job)."""

    def register_job(
        self,
        job_id: int,
        fan_in: int,
        *,
        switch: tuple[str, int],
        window: int | None = None,
        policy: str | None = None,
    ) -> None: ...

    def remove_job(self, job_id: int) -> None: ...


@dataclass(frozen=True, slots=True)
class Topology:
    """Where the data plane is: the switch's UDP address (workers send there) and the PS's."""

    switch_data: Endpoint
    ps: Endpoint


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    policy: str
    priority: str
    levels: int
    aging_s: float

    def build(self, pool: Pool, seed: int) -> Scheduler:
        return Scheduler(
            self.policy,
            self.priority,
            pool,
            levels=self.levels,
            aging_s=self.aging_s,
            seed=seed,
        )

    def as_dict(self) -> dict[str, Any]:
        """``{"policy", "priority", "levels", "aging_s"}``, as stored across restarts."""
        return asdict(self)
