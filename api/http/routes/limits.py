"""``/tenants/{name}/limits``: a tenant's limits (jobs admitted at once, share of aggregators,
highest priority class, submission rate), read and set with an admin token; ``/limits``: the
caller's own tenant's, with any token."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.coordinator.admission import SubmitLimits
from api.coordinator.quotas import TenantLimits
from api.errors import NotFound
from api.http.deps import AdminDep, CallerDep, ServiceDep, SessionDep
from api.http.routes.tokens import ADMIN_ONLY
from api.schemas import TenantLimitsPublic, TenantLimitsUpdate, TenantName
from api.store.models import Tenant
from api.store.tokens import OwnSubmitLimits

router = APIRouter(tags=["tokens"])

RESPONSES = {**ADMIN_ONLY, 404: {"description": "no tenant of that name"}}
TenantPath = Annotated[TenantName, Path(description="the tenant")]


def _tenant(session: Session, name: str) -> Tenant:
    tenant = session.scalar(select(Tenant).where(Tenant.name == name))
    if tenant is None:
        raise NotFound(f"no tenant '{name}'")
    return tenant


def limits_public(tenant: Tenant, service: ServiceDep) -> TenantLimitsPublic:
    """`tenant`'s limits in force and its own (what an admin set)."""
    limits = TenantLimits.of(tenant, service.coordinator.quota)
    own = OwnSubmitLimits(tenant.max_priority_class, tenant.submit_rate, tenant.submit_burst)
    submit = SubmitLimits.of_settings(service.settings.tenant).of(own)
    return TenantLimitsPublic(
        tenant=tenant.name,
        max_jobs=limits.max_jobs,
        aggregator_share=limits.aggregator_share,
        max_priority_class=submit.max_priority_class,
        submit_rate=submit.submit_rate,
        submit_burst=submit.submit_burst,
        own=TenantLimitsUpdate(
            max_jobs=tenant.max_jobs,
            aggregator_share=tenant.aggregator_share,
            max_priority_class=tenant.max_priority_class,
            submit_rate=tenant.submit_rate,
            submit_burst=tenant.submit_burst,
        ),
    )


@router.get("/tenants/{name}/limits", responses=RESPONSES, summary="a tenant's quota (admin token)")
def read_limits(
    name: TenantPath, _: AdminDep, session: SessionDep, service: ServiceDep
) -> TenantLimitsPublic:
    """``{"tenant", "max_jobs", "aggregator_share", "max_priority_class", "submit_rate",
    "submit_burst", "own"}``: the limits in force, and what an admin set for the tenant (null
    where it has the service's default)."""
    return limits_public(_tenant(session, name), service)


@router.put(
    "/tenants/{name}/limits", responses=RESPONSES, summary="set a tenant's quota (admin token)"
)
def update_limits(
    name: TenantPath,
    body: TenantLimitsUpdate,
    _: AdminDep,
    session: SessionDep,
    service: ServiceDep,
) -> TenantLimitsPublic:
    """The quota in force from the next decision round on, which runs before this answers;
    null fields go back to the service's default. Jobs admitted already keep running when a
    lower quota leaves the tenant over it; its queued jobs wait until it is back under."""
    tenant = _tenant(session, name)
    for name_, value in body.model_dump().items():
        setattr(tenant, name_, value)
    session.commit()
    service.coordinator.reschedule()
    return limits_public(tenant, service)


@router.get("/limits", summary="the limits of the caller's own tenant")
def own_limits(caller: CallerDep, session: SessionDep, service: ServiceDep) -> TenantLimitsPublic:
    """What the caller's tenant may do, as ``/tenants/{name}/limits`` shows it to an admin."""
    return limits_public(_tenant(session, caller.tenant.name), service)
