"""``/policy``: the memory policy used for jobs admitted from now on."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter

from api.http.deps import AdminDep, ServiceDep, TenantDep
from api.schemas import PolicyPublic, PolicyUpdate
from scheduler.spec import PolicySpec

router = APIRouter(prefix="/policy", tags=["policy"])

APPLIES_TO = (
    "jobs admitted from now on; admitted and running jobs keep the policy they were admitted under"
)


def _public(spec: PolicySpec) -> PolicyPublic:
    return PolicyPublic.model_validate({**asdict(spec), "applies_to": APPLIES_TO})


@router.get("", summary="the current policy")
def read_policy(_: TenantDep, service: ServiceDep) -> PolicyPublic:
    return _public(service.coordinator.policy)


@router.put(
    "",
    summary="change the policy for jobs admitted afterwards (admin token)",
    responses={403: {"description": "the token is a tenant token, not an admin token"}},
)
def update_policy(update: PolicyUpdate, _: AdminDep, service: ServiceDep) -> PolicyPublic:
    """The new policy, with ``applies_to`` saying which jobs it governs. Only an admin token
    may change it: the policy governs every tenant's jobs."""
    old = service.coordinator.policy
    spec = PolicySpec(
        policy=update.policy,
        priority=update.priority or old.priority,
        levels=update.levels or old.levels,
        aging_s=update.aging_s or old.aging_s,
    )
    service.coordinator.set_policy(spec)
    return _public(spec)
