"""``/metrics``: Prometheus text. Open, so a scraper needs no secret, with aggregates only;
a scraper that sends the ``metrics_token`` setting also gets per-tenant series."""

from __future__ import annotations

import hmac

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import PlainTextResponse

from api.http.deps import ServiceDep, SessionDep
from api.http.metrics import render_metrics

router = APIRouter(tags=["metrics"])


def _with_tenants(request: Request, service: ServiceDep) -> bool:
    """True when the request carries the configured scrape token; 401 for another bearer
    token when one is configured. Read from the header here, not declared as a security
    scheme: the route stays open in the OpenAPI document, as scrapers use it."""
    expected = service.settings.metrics.token
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if expected is None or scheme.lower() != "bearer" or not given.strip():
        return False
    if not hmac.compare_digest(given.strip().encode(), expected.get_secret_value().encode()):
        raise HTTPException(
            401,
            "not the metrics token (INASCHED_METRICS_TOKEN); send none for aggregates only",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return True


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    summary="Prometheus metrics",
    responses={401: {"description": "a bearer token that is not the metrics token"}},
)
def metrics(request: Request, session: SessionDep, service: ServiceDep) -> PlainTextResponse:
    """Aggregates only (no tenant labels). With ``Authorization: Bearer <metrics_token>``
    (the ``INASCHED_METRICS_TOKEN`` setting) also ``inasched_tenant_jobs{tenant, state}``."""
    tenants = _with_tenants(request, service)
    return PlainTextResponse(
        render_metrics(session, service.coordinator, tenants=tenants),
        media_type="text/plain; version=0.0.4; charset=utf-8",
    )
