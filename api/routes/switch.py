"""``/switch``: aggregator occupancy and counters, read from the switch."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from api.deps import ServiceDep, TenantDep
from api.schemas import SwitchPublic

router = APIRouter(tags=["switch"])


@router.get("/switch", summary="switch memory map and counters")
def read_switch(_: TenantDep, service: ServiceDep) -> SwitchPublic:
    """``{"aggregators", "lanes", "runs": [[start, length, job_id, state]], "counters":
    {"jobs": {"<job_id>": {...}}, "drops": {...}}}``; runs cover non-free aggregators only."""
    view: dict[str, Any] = service.coordinator.read_switch(publish=False)
    return SwitchPublic.model_validate(view)
