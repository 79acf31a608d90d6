"""Where the data plane is: small values the coordinator is built from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from p4ctl.backend import Endpoint

__all__ = ["PsRegistry", "Topology"]


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
        fresh: bool = False,
        children: tuple[tuple[str, int], ...] = (),
    ) -> None: ...

    def remove_job(self, job_id: int) -> None: ...


@dataclass(frozen=True, slots=True)
class Topology:
    """Where the data plane is: the switch's UDP address (workers send there) and the PS's."""

    switch_data: Endpoint
    ps: Endpoint
