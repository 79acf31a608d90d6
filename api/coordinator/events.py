"""`EventBus`: fans service events out to server-sent-event streams.

Publishers are plain threads (request handlers, the scheduling loop); subscribers are asyncio
streams. Each subscriber has a bounded queue: a slow browser loses its oldest events instead of
growing the service's memory.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Event", "EventBus", "Subscription", "format_sse"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Event:
    """One event: `kind` is the SSE event name (switch, job, bench); `tenant_id` limits who
    sees it (None: everyone)."""

    kind: str
    data: dict[str, Any]
    tenant_id: int | None = None


@dataclass(eq=False)
class Subscription:
    """One stream: it gets events for everyone and for its tenant (an admin's: every event)."""

    loop: asyncio.AbstractEventLoop
    tenant_id: int
    admin: bool = False
    queue: asyncio.Queue[Event | None] = field(default_factory=lambda: asyncio.Queue(256))


def format_sse(event: Event) -> str:
    """The wire form: ``event: <kind>`` then one ``data:`` line of JSON, then a blank line."""
    return f"event: {event.kind}\ndata: {json.dumps(event.data, separators=(',', ':'))}\n\n"


def _offer(queue: asyncio.Queue[Event | None], event: Event | None) -> None:
    if queue.full():
        queue.get_nowait()
    queue.put_nowait(event)


class EventBus:
    """Thread-safe publish; `subscribe` must be called from the subscriber's event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subs: set[Subscription] = set()

    def subscribe(self, *, tenant_id: int, admin: bool = False) -> Subscription:
        sub = Subscription(loop=asyncio.get_running_loop(), tenant_id=tenant_id, admin=admin)
        with self._lock:
            self._subs.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            self._subs.discard(sub)

    @property
    def subscribers(self) -> int:
        with self._lock:
            return len(self._subs)

    def publish(self, event: Event) -> None:
        """Queue `event` for every subscriber allowed to see it; never blocks."""
        with self._lock:
            subs = list(self._subs)
        for sub in subs:
            if event.tenant_id not in (None, sub.tenant_id) and not sub.admin:
                continue
            self._send(sub, event)

    def close(self) -> None:
        """End every stream (each gets a None sentinel)."""
        with self._lock:
            subs = list(self._subs)
            self._subs.clear()
        for sub in subs:
            self._send(sub, None)

    def _send(self, sub: Subscription, event: Event | None) -> None:
        try:
            sub.loop.call_soon_threadsafe(_offer, sub.queue, event)
        except RuntimeError:
            # The subscriber's loop is closed: the stream is gone without unsubscribing.
            self.unsubscribe(sub)
