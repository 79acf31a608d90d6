"""``/bench/runs``: stored JCT benchmark runs (written by ``inasched bench jct``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from api.coordinator.events import Event
from api.errors import NotFound
from api.http.deps import CallerDep, ServiceDep, SessionDep, TenantDep
from api.http.routes import not_found
from api.schemas import BenchRunCreate, BenchRunDetail, BenchRunPublic
from api.store.crud import get_bench_run, list_bench_runs, store_bench_run

router = APIRouter(prefix="/bench/runs", tags=["bench"])


@router.get("", summary="the caller's stored benchmark runs, newest first")
def index(
    caller: CallerDep,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
) -> list[BenchRunPublic]:
    """``[{"id", "created_at", "workload", "backend", "summary"}]``: the runs the caller's
    tenant stored (an admin token: every run)."""
    owner = None if caller.admin else caller.tenant.id
    return [
        BenchRunPublic.model_validate(r)
        for r in list_bench_runs(session, tenant_id=owner, limit=limit, offset=offset)
    ]


@router.get(
    "/{run_id}",
    responses=not_found("benchmark run"),
    summary="one run with its summary and job rows",
)
def show(
    run_id: Annotated[int, Path(ge=1, le=2**31 - 1)], caller: CallerDep, session: SessionDep
) -> BenchRunDetail:
    """404 for another tenant's run, as for one that does not exist."""
    run = get_bench_run(
        session, run_id=run_id, tenant_id=None if caller.admin else caller.tenant.id
    )
    if run is None:
        raise NotFound(f"benchmark run {run_id} does not exist")
    return BenchRunDetail.model_validate(run)


@router.post("", status_code=201, summary="store a finished run")
def create(
    body: BenchRunCreate, tenant: TenantDep, session: SessionDep, service: ServiceDep
) -> BenchRunPublic:
    """The stored run (without its job rows), owned by the caller's tenant; also sent to that
    tenant's event streams as an ``event: bench``."""
    run = store_bench_run(
        session,
        tenant_id=tenant.id,
        workload=body.workload,
        backend=body.backend,
        summary=body.summary,
        jobs=body.jobs,
    )
    public = BenchRunPublic.model_validate(run)
    service.events.publish(Event("bench", public.model_dump(mode="json"), tenant_id=tenant.id))
    return public
