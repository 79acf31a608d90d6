"""What a tenant may submit: a ceiling on its jobs' priority class, and a submission rate.

Priority classes rank jobs under the ``static`` priority function, so a tenant that could name
any class could take every aggregator; each tenant may use classes up to its ceiling (its own,
set by an admin, else ``tenant.max_priority_class``), and the classes above are an admin's to
grant. Submissions go through one token bucket per tenant (`SubmitBuckets`: ``rate`` jobs per
second, bursts of ``burst``), so one tenant's flood cannot fill the store and the queue that
every decision round reads. An admin token is held to neither: admins run the cluster.
Checked by the submissions' writer thread, which owns the buckets (no lock).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from api.errors import Forbidden, TooMany
from api.settings import TenantSettings
from api.store.tokens import OwnSubmitLimits

__all__ = ["SubmitBuckets", "SubmitLimits", "check_submission"]


@dataclass(frozen=True, slots=True)
class SubmitLimits:
    """The service's defaults (settings ``tenant.max_priority_class``, ``tenant.submit_rate``,
    ``tenant.submit_burst``)."""

    max_priority_class: int
    submit_rate: float
    submit_burst: int

    @classmethod
    def of_settings(cls, tenant: TenantSettings) -> SubmitLimits:
        """The service's defaults, from the settings' ``tenant`` section."""
        return cls(tenant.max_priority_class, tenant.submit_rate, tenant.submit_burst)

    def of(self, own: OwnSubmitLimits) -> SubmitLimits:
        """The limits in force for a tenant whose own are `own`."""
        return SubmitLimits(
            self.max_priority_class if own.max_priority_class is None else own.max_priority_class,
            self.submit_rate if own.submit_rate is None else own.submit_rate,
            self.submit_burst if own.submit_burst is None else own.submit_burst,
        )


@dataclass
class SubmitBuckets:
    """One token bucket per tenant; `clock` is monotonic seconds."""

    clock: Callable[[], float] = time.monotonic
    _levels: dict[int, tuple[float, float]] = field(default_factory=dict)

    def take(self, tenant_id: int, limits: SubmitLimits) -> float:
        """Take one submission from the tenant's bucket: 0 when it may go, else the seconds
        until the bucket holds one again (nothing is taken then)."""
        now = self.clock()
        level, since = self._levels.get(tenant_id, (float(limits.submit_burst), now))
        level = min(float(limits.submit_burst), level + (now - since) * limits.submit_rate)
        if level >= 1:
            self._levels[tenant_id] = (level - 1, now)
            return 0.0
        self._levels[tenant_id] = (level, now)
        return (1 - level) / limits.submit_rate


def check_submission(
    *,
    tenant: str,
    tenant_id: int,
    priority_class: int,
    limits: SubmitLimits,
    buckets: SubmitBuckets,
) -> None:
    """Raise `Forbidden` for a class above the tenant's ceiling, `TooMany` when its bucket is
    empty; the bucket is charged only for a submission that passes every other check."""
    if priority_class > limits.max_priority_class:
        raise Forbidden(
            f"priority_class {priority_class} is above tenant '{tenant}''s ceiling of "
            f"{limits.max_priority_class}; an admin grants higher classes with PUT "
            f"/tenants/{tenant}/limits (max_priority_class)"
        )
    wait = buckets.take(tenant_id, limits)
    if wait:
        raise TooMany(
            f"tenant '{tenant}' submits faster than its {limits.submit_rate:g} jobs/s "
            f"(bursts of {limits.submit_burst}); submit again later",
            retry_after_s=wait,
        )
