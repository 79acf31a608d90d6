"""``/queue``: why the caller's queued jobs wait, with a count per reason."""

from __future__ import annotations

from fastapi import APIRouter

from api.http.deps import CallerDep, ServiceDep, SessionDep
from api.schemas import QueueSummary
from api.store.crud import queued_job_ids

router = APIRouter(tags=["jobs"])


@router.get("/queue", summary="why the tenant's queued jobs wait, with a count per reason")
def queue(caller: CallerDep, session: SessionDep, service: ServiceDep) -> QueueSummary:
    """``{"total": n, "reasons": [{"kind", "message", "jobs"}]}``: every queued job of the
    tenant (an admin token: of every tenant) counted under its reason, most common first."""
    owner = None if caller.admin else caller.tenant.id
    ids = queued_job_ids(session, tenant_id=owner)
    return QueueSummary(total=len(ids), reasons=service.coordinator.queue_reasons.grouped(ids))
