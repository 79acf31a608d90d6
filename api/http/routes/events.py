"""``/events``: server-sent events for the dashboard (switch, job, bench).

A stream reads what the service's `EventBus` queued for it and nothing else: no store
connection while it is open, no per-stream work per event. A tenant holds at most
``tenant.max_streams`` streams (429 beyond); a revoked token's stream ends within about
`api.coordinator.streamwatch.STREAM_CHECK_S`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from anyio import to_thread
from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import StreamingResponse

from api.coordinator.events import Event, TooManyStreams
from api.http.deps import ServiceDep, StreamCallerDep, stream_token
from api.security import hash_token

router = APIRouter(tags=["events"])

# How long a refused stream should wait before it tries again.
RETRY_AFTER_S = 10


@router.get(
    "/events",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"text/event-stream": {}}},
        429: {"description": "the tenant holds as many event streams as it may"},
    },
    summary="live event stream",
)
async def stream(
    caller: StreamCallerDep,
    token: Annotated[str, Depends(stream_token)],
    service: ServiceDep,
) -> StreamingResponse:
    """``event: switch`` (the /switch payload as the caller sees it: first, then whenever it
    changes), ``event: job`` (a JobPublic of the caller's whenever it changes), ``event:
    bench`` (a run the caller's tenant stored). Events come in batches of up to `FLUSH_S`; an
    idle stream gets a comment line every `KEEPALIVE_S`. An admin token gets every tenant's
    jobs, runs and counters."""
    bus = service.events
    try:
        sub = bus.subscribe(
            tenant_id=caller.tenant.id, admin=caller.admin, digest=hash_token(token)
        )
    except TooManyStreams as exc:
        raise HTTPException(
            429,
            f"tenant '{caller.tenant.name}' holds {exc.limit} event streams already, the most "
            "it may (INASCHED_TENANT_MAX_STREAMS); close one and try again",
            headers={"Retry-After": str(RETRY_AFTER_S)},
        ) from None
    try:
        first = await to_thread.run_sync(
            lambda: bus.first_switch(
                Event("switch", service.coordinator.switch_payload()),
                tenant_id=caller.tenant.id,
                admin=caller.admin,
            )
        )
    except BaseException:
        bus.unsubscribe(sub)
        raise

    async def body() -> AsyncIterator[bytes]:
        try:
            yield first
            while (chunk := await sub.read()) is not None:
                yield chunk
        finally:
            bus.unsubscribe(sub)

    return StreamingResponse(
        body(), media_type="text/event-stream", headers={"Cache-Control": "no-store"}
    )
