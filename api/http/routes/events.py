"""``/events``: server-sent events for the dashboard (switch, job, bench)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from anyio import to_thread
from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from api.coordinator.counters import TenantSwitchStream
from api.coordinator.events import Event, format_sse
from api.http.deps import ServiceDep, StreamCallerDep
from api.schemas import SwitchPublic

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
    request: Request, caller: StreamCallerDep, service: ServiceDep
) -> StreamingResponse:
    """``event: switch`` (the /switch payload as the caller sees it, at least once a second),
    ``event: job`` (a JobPublic of the caller's whenever it changes), ``event: bench`` (a run
    the caller's tenant stored). An admin token gets every tenant's jobs, runs and counters."""
    bus = service.events
    sub = bus.subscribe(tenant_id=caller.tenant.id, admin=caller.admin)
    first = Event("switch", service.coordinator.switch_payload())
    switch = (
        None if caller.admin else TenantSwitchStream(service.sessions, tenant_id=caller.tenant.id)
    )

    async def seen(event: Event) -> Event:
        if switch is None or event.kind != "switch":
            return event
        view = SwitchPublic.model_validate(event.data)
        unknown = switch.unknown(view)
        if unknown:
            await to_thread.run_sync(switch.learn, unknown)
        return Event("switch", switch.payload(view))

    async def body() -> AsyncIterator[str]:
        try:
            yield format_sse(await seen(first))
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
                yield format_sse(await seen(event))
        finally:
            bus.unsubscribe(sub)

    return StreamingResponse(
        body(), media_type="text/event-stream", headers={"Cache-Control": "no-store"}
    )
