"""``/tenants/{name}/limits``: a tenant's quota (jobs admitted at once, share of aggregators),
read and set with an admin token."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.coordinator.quotas import TenantLimits
from api.errors import NotFound
from api.http.deps import AdminDep, ServiceDep, SessionDep
from api.http.routes.tokens import ADMIN_ONLY
from api.schemas import TenantLimitsPublic, TenantLimitsUpdate, TenantName
from api.store.models import Tenant

router = APIRouter(prefix="/tenants/{name}/limits", tags=["tokens"])

RESPONSES = {**ADMIN_ONLY, 404: {"description": "no tenant of that name"}}
TenantPath = Annotated[TenantName, Path(description="the tenant")]


def _tenant(session: Session, name: str) -> Tenant:
    tenant = session.scalar(select(Tenant).where(Tenant.name == name))
    if tenant is None:
        raise NotFound(f"no tenant '{name}'")
    return tenant


def _public(tenant: Tenant, service: ServiceDep) -> TenantLimitsPublic:
    limits = TenantLimits.of(tenant, service.coordinator.quota)
    own = TenantLimitsUpdate(max_jobs=tenant.max_jobs, aggregator_share=tenant.aggregator_share)
    return TenantLimitsPublic(
        tenant=tenant.name,
        max_jobs=limits.max_jobs,
        aggregator_share=limits.aggregator_share,
        own=own,
    )


@router.get("", responses=RESPONSES, summary="a tenant's quota (admin token)")
def read_limits(
    name: TenantPath, _: AdminDep, session: SessionDep, service: ServiceDep
) -> TenantLimitsPublic:
    """``{"tenant", "max_jobs", "aggregator_share", "own"}``: the quota in force, and what an
    admin set for the tenant (null where it has the service's default)."""
    return _public(_tenant(session, name), service)


@router.put("", responses=RESPONSES, summary="set a tenant's quota (admin token)")
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
    tenant.max_jobs, tenant.aggregator_share = body.max_jobs, body.aggregator_share
    session.commit()
    service.coordinator.reschedule()
    return _public(tenant, service)
