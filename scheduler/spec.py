"""`PolicySpec`: which policy runs and how it ranks jobs, declared once.

The service's settings, its ``/policy`` resource, the `Scheduler`, every `Policy`, the
simulators' `SimConfig` and the JCT benchmark's parameters all nest this one frozen value
instead of repeating its four fields. It is checked when it is made: an unknown policy or
priority function raises `UnknownName` (also a ValueError, so pydantic reports it as a bad
setting), a level count or an aging period out of range a ValueError.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scheduler.priority import DEFAULT_AGING_S, DEFAULT_LEVELS, get_priority
from scheduler.registry import policy_class

__all__ = ["MAX_LEVELS", "PolicySpec"]

# The job table's priority field is 8 bits wide (p4/PROTOCOL.md): 256 levels at most.
MAX_LEVELS = 256


@dataclass(frozen=True, slots=True)
class PolicySpec:
    """`policy` (a registered policy or ablation), `priority` (a registered priority
    function), `levels` (switch priority levels, ``1 .. MAX_LEVELS``) and `aging_s` (seconds
    bypassed or evicted per level of aging; 0: no aging)."""

    policy: str = "esa"
    priority: str = "srtf"
    levels: int = DEFAULT_LEVELS
    aging_s: float = DEFAULT_AGING_S

    def __post_init__(self) -> None:
        policy_class(self.policy)
        get_priority(self.priority)
        if isinstance(self.levels, bool) or not isinstance(self.levels, int):
            raise ValueError(f"levels must be a whole number, got {self.levels!r}")
        if not 1 <= self.levels <= MAX_LEVELS:
            raise ValueError(f"levels must be in 1..{MAX_LEVELS}, got {self.levels}")
        if not 0 <= self.aging_s < math.inf:
            raise ValueError(f"aging_s must be a number >= 0, got {self.aging_s!r}")
