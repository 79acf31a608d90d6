"""``/switch``: aggregator occupancy and counters, read from the switch."""

from __future__ import annotations

from fastapi import APIRouter

from api.coordinator.counters import owned_jobs, tenant_switch_view, view_job_ids
from api.http.deps import CallerDep, ServiceDep, SessionDep
from api.schemas import SwitchPublic

router = APIRouter(tags=["switch"])


@router.get("/switch", summary="switch memory map and counters")
def read_switch(caller: CallerDep, session: SessionDep, service: ServiceDep) -> SwitchPublic:
    """``{"aggregators", "lanes", "runs": [[start, length, job_id, state]], "counters":
    {"jobs": {"<job_id>": {...}}, "drops": {...}}}``; runs cover non-free aggregators only.
    A tenant token sees its own jobs; other tenants' aggregators have job id 0 and their
    counters are left out. An admin token sees every job."""
    view = service.coordinator.read_switch(publish=False)
    if caller.admin:
        return view
    mine = owned_jobs(session, tenant_id=caller.tenant.id, job_ids=view_job_ids(view))
    return tenant_switch_view(view, mine)
