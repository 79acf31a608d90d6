"""``/metrics``: Prometheus text (no token, so a scraper needs no secret; aggregates only)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse

from api.deps import ServiceDep, SessionDep
from api.metrics import render_metrics

router = APIRouter(tags=["metrics"])


@router.get("/metrics", response_class=PlainTextResponse, summary="Prometheus metrics")
def metrics(session: SessionDep, service: ServiceDep) -> PlainTextResponse:
    return PlainTextResponse(
        render_metrics(session, service.coordinator),
        media_type="text/plain; version=0.0.4; charset=utf-8",
    )
