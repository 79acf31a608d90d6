"""``/events``: server-sent events for the dashboard (switch, job, bench)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from api.deps import ServiceDep, StreamTenantDep
from api.events import Event, format_sse

router = APIRouter(tags=["events"])

# Proxies close idle connections after about a minute; a comment line keeps the stream open.
KEEPALIVE_S = 15.0


@router.get(
    "/events",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
    summary="live event stream",
)
async def stream(
    request: Request, tenant: StreamTenantDep, service: ServiceDep
) -> StreamingResponse:
    """``event: switch`` (the /switch payload, at least once a second), ``event: job`` (a
    JobPublic of the caller's whenever it changes), ``event: bench`` (a stored run)."""
    bus = service.events
    sub = bus.subscribe(tenant_id=tenant.id)
    first = Event("switch", service.coordinator.switch_payload())

    async def body() -> AsyncIterator[str]:
        try:
            yield format_sse(first)
            while True:
                try:
                    event = await asyncio.wait_for(sub.queue.get(), KEEPALIVE_S)
                except TimeoutError:
                    if await request.is_disconnected():
                        return
                    yield ": keepalive\n\n"
                    continue
                if event is None:
                    return
                yield format_sse(event)
        finally:
            bus.unsubscribe(sub)

    return StreamingResponse(
        body(), media_type="text/event-stream", headers={"Cache-Control": "no-store"}
    )
